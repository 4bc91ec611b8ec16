"""The runner: run directories, resume, --force, failures, timeouts, crashes, skips and Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from rlscope.harness.executors import LocalExecutor
from rlscope.files import read_json, write_atomic
from rlscope.harness.manifest import load_manifest
from rlscope.harness import runner
from rlscope.harness.runner import run_sweep


def manifest(tmp_path: Path, params: str = "{}", xs: str = "[1, 2, 3]", timeout: float = 60,
             repetitions: int = 2) -> Path:
    path = tmp_path / "toy.yaml"
    path.write_text(textwrap.dedent(f"""\
        experiment: toy
        workload: tests.toy_workloads:echo
        params: {params}
        grid: {{x: {xs}}}
        repetitions: {repetitions}
        timeout_s: {timeout}
        """))
    return path


@pytest.fixture
def timeout_s(tmp_path_factory: pytest.TempPathFactory) -> float:
    """A ``timeout_s`` that kills a hung run yet lets a healthy one finish on this machine, however
    loaded: 10x what a run of three repetitions of the toy workload took here just now, 2 s at
    the least."""
    here = tmp_path_factory.mktemp("healthy")
    (outcome,) = sweep(manifest(here, xs="[1]", repetitions=3), here / "out").outcomes
    assert outcome.status == "ok", outcome.message
    return round(max(2.0, 10 * outcome.seconds), 1)


def sweep(path: Path, out: Path, **kwargs):
    return run_sweep(load_manifest(path, "full"), out, progress=False, **kwargs)


def calls(out: Path, run_id: str) -> list[str]:
    return (out / "toy" / "runs" / run_id / "calls.txt").read_text().split()


def test_run_directories_hold_config_log_result_and_done(tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = sweep(manifest(tmp_path), out)
    assert [o.status for o in summary.outcomes] == ["ok", "ok", "ok"]
    run_dir = out / "toy" / "runs" / "x-2"
    assert json.loads((run_dir / "config.json").read_text())["params"] == {"x": 2}
    result = json.loads((run_dir / "result.json").read_text())
    assert [r["y"] for r in result["repetitions"]] == [4.0, 4.0]
    assert (run_dir / "DONE").exists() and (run_dir / "log.txt").exists()
    frame = pd.read_csv(out / "toy" / "results.csv")
    assert len(frame) == 6  # 3 runs x 2 repetitions
    assert sorted(frame["repetition"].unique()) == [0, 1]
    assert (frame["y"] == frame["x"] ** 2).all()


def test_resume_skips_done_runs_and_force_reruns(tmp_path: Path) -> None:
    out, path = tmp_path / "out", manifest(tmp_path, repetitions=1)
    sweep(path, out)
    again = sweep(path, out)
    assert [o.status for o in again.outcomes] == ["reused"] * 3
    assert calls(out, "x-1") == ["1"]
    forced = sweep(path, out, force=True)
    assert [o.status for o in forced.outcomes] == ["ok"] * 3
    assert calls(out, "x-1") == ["1", "1"]


def test_a_gpu_out_of_memory_is_a_failed_run_that_says_so(tmp_path: Path) -> None:
    from rlscope.harness.worker import gpu_out_of_memory

    summary = sweep(manifest(tmp_path, params="{oom_on: 2}", repetitions=1), tmp_path / "out")
    assert [o.status for o in summary.outcomes] == ["ok", "failed", "ok"]
    assert summary.failures[0].message == "exit code 1: out of GPU memory at (run x-2)"
    try:
        raise RuntimeError("collecting failed") from RuntimeError(
            "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 34999975936 bytes.")
    except RuntimeError as err:
        assert gpu_out_of_memory(err)  # JAX's, behind the workload's own error
    assert not gpu_out_of_memory(RuntimeError("RESOURCE_EXHAUSTED: too many open files"))


def test_changed_parameters_rerun_instead_of_reusing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sweep(manifest(tmp_path, params="{sleep_s: 0}", repetitions=1), out)
    again = sweep(manifest(tmp_path, params="{sleep_s: 0.01}", repetitions=1), out)
    assert [o.status for o in again.outcomes] == ["ok"] * 3


def test_failing_run_in_the_middle_does_not_stop_the_sweep(tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = sweep(manifest(tmp_path, params="{fail_on: 2}"), out)
    assert [o.status for o in summary.outcomes] == ["ok", "failed", "ok"]
    failure = summary.failures[0]
    assert failure.run_id == "x-2" and "toy failure for x=2" in failure.message
    assert "Traceback" in failure.log.read_text()
    assert not (failure.run_dir / "DONE").exists()
    frame = pd.read_csv(out / "toy" / "results.csv")
    assert sorted(frame.loc[frame["status"] == "ok", "x"].unique()) == [1, 3]
    failed = frame[frame["status"] == "failed"]  # the failed run is a row saying why, with no measurement
    assert list(failed["x"]) == [2] and "toy failure for x=2" in failed["reason"].iloc[0]
    # Resuming re-runs only the failed run.
    resumed = sweep(manifest(tmp_path, params="{fail_on: 99}"), out)
    assert sum(o.status == "ok" for o in resumed.outcomes) == 3  # params changed: all rerun
    resumed = sweep(manifest(tmp_path, params="{fail_on: 99}"), out)
    assert [o.status for o in resumed.outcomes] == ["reused"] * 3


def test_timeout_kills_the_run_and_leaves_no_done(tmp_path: Path, timeout_s: float) -> None:
    out = tmp_path / "out"
    summary = sweep(manifest(tmp_path, params="{hang_on: 1}", xs="[1, 2]", timeout=timeout_s), out)
    status = {o.run_id: o.status for o in summary.outcomes}
    assert status == {"x-1": "timeout", "x-2": "ok"}
    assert not (out / "toy" / "runs" / "x-1" / "DONE").exists()
    assert "timeout_s" in summary.failures[0].message


def test_a_run_cut_off_keeps_the_repetitions_it_finished(tmp_path: Path, timeout_s: float) -> None:
    out = tmp_path / "out"
    summary = sweep(manifest(tmp_path, params="{hang_on_call: 2}", xs="[1]", timeout=timeout_s, repetitions=3), out)
    outcome = summary.outcomes[0]
    assert outcome.status == "timeout" and "the 1 of 3 repetitions it finished" in outcome.message
    assert not (outcome.run_dir / "DONE").exists()
    frame = pd.read_csv(out / "toy" / "results.csv")
    assert frame[["run_id", "repetition", "y", "status"]].values.tolist() == [["x-1", 0, 1.0, "timeout"]]
    # Not complete: a resume runs it again, and its full result replaces the partial one.
    again = sweep(manifest(tmp_path, xs="[1]", timeout=timeout_s, repetitions=3), out)
    assert [o.status for o in again.outcomes] == ["ok"]
    frame = pd.read_csv(out / "toy" / "results.csv")
    assert frame["repetition"].tolist() == [0, 1, 2] and set(frame["status"]) == {"ok"}


def test_a_resumed_run_goes_on_from_the_repetitions_it_finished(tmp_path: Path, timeout_s: float) -> None:
    out = tmp_path / "out"
    path = manifest(tmp_path, params="{hang_on_call: 3}", xs="[1]", timeout=timeout_s, repetitions=3)
    assert [o.status for o in sweep(path, out).outcomes] == ["timeout"]  # repetitions 0 and 1 finished
    again = sweep(path, out)  # the same run: its worker's first call is now repetition 2
    assert [o.status for o in again.outcomes] == ["ok"]
    assert calls(out, "x-1") == ["1"] * 4  # 3 calls in the first attempt, 1 in the second
    assert "resumed: 2 of 3 repetitions" in (out / "toy" / "runs" / "x-1" / "log.txt").read_text()
    frame = pd.read_csv(out / "toy" / "results.csv")
    assert frame["repetition"].tolist() == [0, 1, 2] and set(frame["status"]) == {"ok"}


def test_force_starts_an_unfinished_run_afresh(tmp_path: Path, timeout_s: float) -> None:
    out = tmp_path / "out"
    path = manifest(tmp_path, params="{hang_on_call: 3}", xs="[1]", timeout=timeout_s, repetitions=3)
    sweep(path, out)
    forced = sweep(path, out, force=True)  # all three again, so the third hangs again
    assert [o.status for o in forced.outcomes] == ["timeout"]
    assert calls(out, "x-1") == ["1"] * 6


def test_a_run_failing_in_a_later_repetition_keeps_the_earlier_ones(tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = sweep(manifest(tmp_path, params="{fail_on_call: 3}", xs="[2]", repetitions=3), out)
    assert summary.outcomes[0].status == "failed" and "toy failure on call 3" in summary.outcomes[0].message
    frame = pd.read_csv(out / "toy" / "results.csv")
    assert frame["repetition"].tolist() == [0, 1] and set(frame["status"]) == {"failed"}
    assert (frame["y"] == 4.0).all()
    # Asked something else next time, the old run's partial rows are not reported as its result.
    changed = sweep(manifest(tmp_path, params="{skip_on: 2}", xs="[2]", repetitions=3), out)
    assert [o.status for o in changed.outcomes] == ["skipped"]
    assert pd.read_csv(out / "toy" / "results.csv")["status"].tolist() == ["skipped"]


def test_killed_run_leaves_no_done_and_a_result_saying_why(tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = sweep(manifest(tmp_path, params="{crash_on: 3}"), out)
    run_dir = out / "toy" / "runs" / "x-3"
    assert summary.outcomes[-1].status == "failed"
    assert "exit code -9" in summary.outcomes[-1].message
    assert not (run_dir / "DONE").exists()
    assert read_json(run_dir / "result.json") == {"status": "failed", "reason": summary.outcomes[-1].message,
                                                 "repetitions": []}


def test_stale_done_is_removed_before_a_rerun(tmp_path: Path) -> None:
    out, path = tmp_path / "out", manifest(tmp_path, xs="[3]", repetitions=1)
    sweep(path, out)
    crashed = sweep(manifest(tmp_path, params="{crash_on: 3}", xs="[3]", repetitions=1), out)
    assert crashed.outcomes[0].status == "failed"
    assert not (out / "toy" / "runs" / "x-3" / "DONE").exists()


def test_skipped_run_is_complete_and_recorded_with_reason(tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = sweep(manifest(tmp_path, params="{skip_on: 1}", xs="[1, 2]"), out)
    assert [o.status for o in summary.outcomes] == ["skipped", "ok"]
    frame = pd.read_csv(out / "toy" / "results.csv")
    skipped = frame[frame["status"] == "skipped"]
    assert len(skipped) == 1 and skipped["reason"].iloc[0] == "toy reason"


def test_parallel_jobs_run_every_point_once(tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = sweep(manifest(tmp_path, xs="[1, 2, 3, 4, 5]", repetitions=1), out,
                    executor=LocalExecutor(jobs=2, gpus=[]))
    assert sorted(o.run_id for o in summary.outcomes) == [f"x-{i}" for i in range(1, 6)]
    assert all(calls(out, f"x-{i}") == [str(i)] for i in range(1, 6))


def test_local_executor_pins_one_gpu_per_slot() -> None:
    seen: list[str] = []
    executor = LocalExecutor(jobs=2, gpus=["0", "1"])
    list(executor.run_all([1, 2, 3, 4], lambda run, env: seen.append(env["CUDA_VISIBLE_DEVICES"])))
    assert sorted(set(seen)) == ["0", "1"] and len(seen) == 4


def test_write_atomic_keeps_old_content_when_writing_fails(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    write_atomic(target, "old")

    with pytest.raises(TypeError):
        write_atomic(target, 12345)  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_cli_reports_failures_with_log_paths_and_exit_code(tmp_path: Path, cli_env: dict[str, str]) -> None:
    path = manifest(tmp_path, params="{fail_on: 1}", xs="[1, 2]", repetitions=1)
    proc = subprocess.run([sys.executable, "-m", "rlscope.cli", "run", str(path), "--output", str(tmp_path / "o"),
                           "--no-plot"], capture_output=True, text=True, env=cli_env)
    assert proc.returncode == 1
    assert "1 run(s) failed" in proc.stderr and "runs/x-1/log.txt" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_stopping_waits_for_a_run_that_exited_just_before_the_kill(tmp_path: Path, monkeypatch) -> None:
    # A run whose subprocess has exited but whose DONE is not yet written is held in that window by a
    # gate; stopping must wait for its DONE, or results.csv (rebuilt next) would miss a run a resume reuses.
    reading, gate = threading.Event(), threading.Event()
    read_json = runner.read_json

    def held_read(path: Path):
        if path.name == "result.json":
            reading.set()
            gate.wait()
        return read_json(path)

    monkeypatch.setattr(runner, "read_json", held_read)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    loaded = load_manifest(manifest(tmp_path, xs="[1]", repetitions=1), "full")
    launcher = runner._Launcher([runner._Sweep(loaded, tmp_path)])
    outcomes = []
    launch = threading.Thread(target=lambda: outcomes.append(launcher(runner._Run(0, next(loaded.points())), {})))
    launch.start()
    assert reading.wait(60), "the toy run did not finish"
    stopper = threading.Thread(target=launcher.stop_all)
    stopper.start()
    stopper.join(0.5)
    waited = stopper.is_alive()
    gate.set()
    stopper.join(60)
    assert waited, "stop_all returned while a run was between its exit and its DONE"
    launch.join(60)
    assert not stopper.is_alive() and [o.status for o in outcomes] == ["ok"]
    assert (tmp_path / "runs" / "x-1" / "DONE").exists()


def test_ctrl_c_keeps_finished_runs_and_resume_completes(tmp_path: Path, cli_env: dict[str, str]) -> None:
    out = tmp_path / "o"
    path = manifest(tmp_path, params="{sleep_s: 1.5}", xs="[1, 2, 3, 4]", repetitions=1)
    cmd = [sys.executable, "-m", "rlscope.cli", "run", str(path), "--output", str(out), "--no-plot"]
    # A child inherits an ignored SIGINT (as this test's process has it when run as a background job of a
    # non-interactive shell), but not a handler: with one in place here, the runner starts with Ctrl-C live.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env)
    finally:
        signal.signal(signal.SIGINT, previous)
    first_done = out / "toy" / "runs" / "x-1" / "DONE"
    deadline = time.monotonic() + 60
    while not first_done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "resume" in stderr
    assert first_done.exists()
    done = sorted(p.parent.name for p in (out / "toy" / "runs").glob("*/DONE"))
    assert len(done) < 4
    finished = pd.read_csv(out / "toy" / "results.csv")
    assert sorted(finished["run_id"]) == done
    resumed = subprocess.run(cmd, capture_output=True, text=True, env=cli_env)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(done)} reused" in resumed.stdout
    assert calls(out, "x-1") == ["1"]


def test_manifests_share_the_slots_so_a_long_run_overlaps_the_next_manifests_runs(tmp_path: Path) -> None:
    out = tmp_path / "o"
    # The long run lasts until the quick manifest's results are written (or 50 s, if they never are).
    slow_path = manifest(tmp_path, params=f"{{path: '{out / 'toy_quick' / 'results.csv'}', wait_s: 50}}", xs="[1]",
                         repetitions=1)
    slow_path.write_text(slow_path.read_text().replace("tests.toy_workloads:echo", "tests.toy_workloads:wait_for"))
    slow = load_manifest(slow_path, "full")
    (tmp_path / "quick").mkdir()
    quick_path = manifest(tmp_path / "quick", xs="[1, 2, 3]", repetitions=1)
    quick_path.write_text(quick_path.read_text().replace("experiment: toy", "experiment: toy_quick"))
    quick = load_manifest(quick_path, "full")
    finished: list[str] = []
    summaries = runner.run_sweeps([slow, quick], out, executor=LocalExecutor(jobs=2), progress=False,
                                  on_finished=lambda spec, _: finished.append(spec.experiment))
    # With one slot each in turn, the quick runs would wait for the long one, which would give up
    # waiting for them and finish first; sharing two, the three quick runs go through the second
    # slot while the long one waits.
    assert finished == ["toy_quick", "toy"]
    assert [[o.status for o in s.outcomes] for s in summaries] == [["ok"], ["ok", "ok", "ok"]]
    assert all(s.results_csv.exists() for s in summaries)
    assert pd.read_csv(summaries[0].results_csv)["seen"].tolist() == [1.0]  # it saw them, rather than gave up


def test_two_manifests_of_one_experiment_are_refused_before_any_run(tmp_path: Path) -> None:
    loaded = load_manifest(manifest(tmp_path), "full")
    with pytest.raises(runner.ManifestError, match="given twice"):
        runner.run_sweeps([loaded, loaded], tmp_path / "o", progress=False)
    assert not (tmp_path / "o").exists()


def test_a_failing_report_stops_the_runs_still_going_and_keeps_the_finished(tmp_path: Path) -> None:
    slow = load_manifest(manifest(tmp_path, params="{sleep_s: 60}", xs="[1]", repetitions=1), "full")
    (tmp_path / "quick").mkdir()
    quick_path = manifest(tmp_path / "quick", xs="[1]", repetitions=1)
    quick_path.write_text(quick_path.read_text().replace("experiment: toy", "experiment: toy_quick"))

    def broken_figure(spec, summary) -> None:
        raise RuntimeError(f"cannot draw {spec.experiment}")

    with pytest.raises(RuntimeError, match="cannot draw toy_quick"):
        runner.run_sweeps([slow, load_manifest(quick_path, "full")], tmp_path / "o", executor=LocalExecutor(jobs=2),
                          progress=False, on_finished=broken_figure)
    assert (tmp_path / "o" / "toy_quick" / "runs" / "x-1" / "DONE").exists()
    assert not (tmp_path / "o" / "toy" / "runs" / "x-1" / "DONE").exists()  # killed, not waited for
    assert (tmp_path / "o" / "toy" / "results.csv").exists()


def test_sigterm_stops_the_sweep_and_its_workers_as_ctrl_c_does(tmp_path: Path, cli_env: dict[str, str]) -> None:
    out = tmp_path / "o"
    path = manifest(tmp_path, params="{sleep_s: 30}", xs="[1, 2]", repetitions=1)
    proc = subprocess.Popen([sys.executable, "-m", "rlscope.cli", "run", str(path), "--output", str(out), "--no-plot"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env)
    log = out / "toy" / "runs" / "x-1" / "log.txt"
    deadline = time.monotonic() + 60
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the worker is in its workload
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "run the same command again to resume" in stderr

    def workers() -> list[str]:  # processes still running a run of this output directory
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(out) in text:
                found.append(text)
        return found

    deadline = time.monotonic() + 10
    while workers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not workers()
