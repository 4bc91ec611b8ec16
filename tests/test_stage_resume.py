"""Checkpointed stages (rlscope.stages): stored only when complete, tied to the run's config and
repetition, damaged files computed again; a run killed part way through a repetition resumes from
the stages it finished, under `rlscope run`, with the results of an uninterrupted run."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rlscope.files import CorruptFileWarning
from rlscope.harness import runner
from rlscope.harness.manifest import load_manifest
from rlscope.harness.runner import run_sweep
from rlscope.stages import ENV_STAGES_DIR, STAGES_DIR, Stages, current, describe, prune, repetition_dir, stage

KILL_PARAMS = {"kill_in", "kill_at", "kill_runner"}  # the parameters only the killed runs are given
METRICS = ["repetition", "cost", "calibration_runs", "errors_pairs", "whole_run_pairs", "window_rows"]


class Counter:
    """A stage's compute that counts its calls."""

    def __init__(self, value: Any) -> None:
        self.value, self.calls = value, 0

    def __call__(self) -> Any:
        self.calls += 1
        return self.value


# The stage store


def test_a_stage_is_stored_once_complete_and_then_read_back_not_computed(tmp_path: Path) -> None:
    compute = Counter({"cost": 1.5, "runs": (1, 2)})
    first = Stages(tmp_path / "rep")
    assert first.stage("calibration", compute) == {"cost": 1.5, "runs": [1, 2]}  # a JSON round trip either way
    again = Stages(tmp_path / "rep")
    assert again.stage("calibration", compute) == {"cost": 1.5, "runs": [1, 2]}
    assert compute.calls == 1
    assert [s.name for s in again.resumed] == ["calibration"] and again.resumed_seconds >= 0
    assert again.resumed_seconds == again.stored()[0].seconds


def test_a_stage_cut_off_part_way_stores_nothing_and_is_redone(tmp_path: Path) -> None:
    stages = Stages(tmp_path / "rep")

    def fails() -> dict[str, float]:
        raise RuntimeError("killed part way")

    with pytest.raises(RuntimeError):
        stages.stage("windows run", fails)
    # What a kill in the middle of the atomic write leaves: a temporary file, never read as the stage.
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / ".windows-run.json.x1y2.tmp").write_text('{"stage": "windows run", "ind')
    assert stages.stored() == [] and not stages.has("windows run")
    compute = Counter([[0, 10, 2]])
    assert Stages(tmp_path / "rep").stage("windows run", compute) == [[0, 10, 2]] and compute.calls == 1


@pytest.mark.parametrize("damage", ['{"stage": "calibration", "res', "[1, 2]", "",
                                    '{"stage": "calibration", "index": null, "of": null, "seconds": "a lot", '
                                    '"stored_at": 1.0, "result": 1}',
                                    '{"stage": "windows run", "index": null, "of": null, "seconds": 1.0, '
                                    '"stored_at": 1.0, "result": 1}'])
def test_a_damaged_stage_file_is_computed_again_with_a_warning(tmp_path: Path, damage: str) -> None:
    Stages(tmp_path / "rep").stage("calibration", Counter({"cost": 1.0}))
    (tmp_path / "rep" / "calibration.json").write_text(damage)
    compute = Counter({"cost": 2.0})
    with pytest.warns(CorruptFileWarning, match="calibration.json: stored stage 'calibration' unreadable"):
        assert Stages(tmp_path / "rep").stage("calibration", compute) == {"cost": 2.0}
    assert compute.calls == 1
    assert Stages(tmp_path / "rep").stage("calibration", compute) == {"cost": 2.0} and compute.calls == 1


def test_a_changed_config_reads_none_of_the_old_stages(tmp_path: Path) -> None:
    asked = {"workload": "m:f", "params": {"steps": 100}, "repetitions": 2, "timeout_s": 60}
    same = {**asked, "timeout_s": 120, "finished_repetitions": [{"y": 1}]}  # not what the run computes
    changed = {**asked, "params": {"steps": 200}}
    assert repetition_dir(tmp_path, same, 0) == repetition_dir(tmp_path, asked, 0)
    assert repetition_dir(tmp_path, changed, 0) != repetition_dir(tmp_path, asked, 0)
    assert repetition_dir(tmp_path, {**asked, "repetitions": 3}, 0) != repetition_dir(tmp_path, asked, 0)
    Stages(repetition_dir(tmp_path, asked, 0)).stage("calibration", Counter(1))
    compute = Counter(2)
    assert Stages(repetition_dir(tmp_path, changed, 0)).stage("calibration", compute) == 2 and compute.calls == 1
    prune(tmp_path, changed)  # what the runner does before the changed run starts
    assert not repetition_dir(tmp_path, asked, 0).exists() and repetition_dir(tmp_path, changed, 0).exists()
    prune(tmp_path, None)
    assert not (tmp_path / STAGES_DIR).exists()


def test_each_repetition_has_its_own_stages(tmp_path: Path) -> None:
    config = {"workload": "m:f", "params": {}, "repetitions": 2}
    assert repetition_dir(tmp_path, config, 0) != repetition_dir(tmp_path, config, 1)
    Stages(repetition_dir(tmp_path, config, 0)).stage("calibration", Counter("first"))
    compute = Counter("second")
    assert Stages(repetition_dir(tmp_path, config, 1)).stage("calibration", compute) == "second"
    assert compute.calls == 1


def test_without_the_harness_stages_simply_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_STAGES_DIR, raising=False)
    compute = Counter({"runs": (1, 2)})
    assert stage("calibration", compute) == {"runs": [1, 2]} and stage("calibration", compute) == {"runs": [1, 2]}
    assert compute.calls == 2 and current().directory is None and current().resumed == []


def test_the_harness_names_the_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    Stages(tmp_path / "rep").stage("validation pairs", Counter(1), index=0, of=2)
    monkeypatch.setenv(ENV_STAGES_DIR, str(tmp_path / "rep"))
    assert stage("validation pairs", Counter(9), index=0, of=2) == 1
    stages = current()
    assert stages.stage("validation pairs", Counter(9), index=0, of=2) == 1
    assert stages.stage("validation pairs", Counter(2), index=1, of=2) == 2
    assert [s.index for s in stages.resumed] == [0]


def test_a_result_that_is_not_json_is_refused_naming_the_stage(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="stage 'windows run': its result cannot be stored as JSON"):
        Stages(tmp_path / "rep").stage("windows run", Counter({"trace": object()}))
    assert not (tmp_path / "rep").exists()


def test_stored_stages_are_described_as_a_reader_names_them(tmp_path: Path) -> None:
    stages = Stages(tmp_path / "rep")
    stages.stage("calibration", Counter(1))
    for i in range(3):
        stages.stage("validation pairs", Counter(i), index=i, of=5)
    assert describe(stages.stored()) == "calibration, 3 of 5 validation pairs"
    assert describe([]) == ""


# Under the harness


def staged_manifest(tmp_path: Path, counters: Path, params: str = "", repetitions: int = 2) -> Path:
    path = tmp_path / "staged.yaml"
    path.write_text(textwrap.dedent(f"""\
        experiment: staged
        workload: tests.stage_workloads:staged
        params: {{counters: "{counters}"{params}}}
        grid: {{pairs: [3]}}
        repetitions: {repetitions}
        timeout_s: 120
        """))
    return path


def counters(tmp_path: Path, name: str = "counters") -> Path:
    path = tmp_path / name
    path.mkdir()
    return path


def computed(directory: Path) -> dict[str, int]:
    labels = (directory / "computed.txt").read_text().split()
    return {label: labels.count(label) for label in dict.fromkeys(labels)}


def results(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "staged" / "results.csv")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """The results of the staged workload run without interruption."""
    here = tmp_path_factory.mktemp("uninterrupted")
    summary = run_sweep(load_manifest(staged_manifest(here, counters(here)), "full"), here / "out", progress=False)
    assert [o.status for o in summary.outcomes] == ["ok"]
    assert computed(here / "counters") == {"calibration": 2, "pair-0": 2, "pair-1": 2, "pair-2": 2, "windows": 2}
    return results(here / "out")


def rlscope_run(path: Path, out: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlscope.cli", "run", str(path), "--output", str(out), "--no-plot",
                           *extra], capture_output=True, text=True, env=env, timeout=600)


def test_a_run_killed_mid_stage_resumes_from_the_stages_it_finished(tmp_path: Path, cli_env: dict[str, str],
                                                                    uninterrupted: pd.DataFrame) -> None:
    marks, out = counters(tmp_path), tmp_path / "out"
    path = staged_manifest(tmp_path, marks, ', kill_in: "pair-2"')
    first = rlscope_run(path, out, cli_env)
    assert first.returncode == 1 and "exit code -9" in first.stderr + first.stdout
    run_dir = out / "staged" / "runs" / "pairs-3"
    assert computed(marks) == {"calibration": 1, "pair-0": 1, "pair-1": 1, "pair-2": 1}

    again = rlscope_run(path, out, cli_env)
    assert again.returncode == 0, again.stderr
    assert "resumed pairs-3: calibration, 2 of 3 validation pairs from an earlier attempt" in again.stdout
    assert "Traceback" not in again.stderr
    log = (run_dir / "log.txt").read_text()
    assert "stage calibration: reused from an earlier attempt" in log and "stage validation pairs 2 of 3: reused" in log
    # Only the stage it was killed in is computed again; the second repetition computes all of its own.
    assert computed(marks) == {"calibration": 2, "pair-0": 2, "pair-1": 2, "pair-2": 3, "windows": 2}
    frame = results(out)
    assert set(frame["status"]) == {"ok"} and set(frame.columns) - KILL_PARAMS == set(uninterrupted.columns)
    pd.testing.assert_frame_equal(frame[METRICS], uninterrupted[METRICS])
    assert (run_dir / "DONE").exists() and not (run_dir / STAGES_DIR).exists()


def test_a_run_whose_machine_went_away_resumes_its_repetitions_and_stages(tmp_path: Path, cli_env: dict[str, str],
                                                                          uninterrupted: pd.DataFrame) -> None:
    marks, out = counters(tmp_path), tmp_path / "out"
    # Killed with its runner in the second repetition, after its calibration and first pair.
    path = staged_manifest(tmp_path, marks, ', kill_in: "pair-1", kill_at: 2, kill_runner: true')
    first = rlscope_run(path, out, cli_env)
    assert first.returncode == -9
    run_dir = out / "staged" / "runs" / "pairs-3"
    assert not (run_dir / "result.json").exists()  # the runner never kept the first repetition: partial.json has it

    again = rlscope_run(path, out, cli_env)
    assert again.returncode == 0, again.stderr
    assert ("resumed pairs-3: 1 of 2 repetitions, calibration, 1 of 3 validation pairs from an earlier attempt"
            in again.stdout)
    assert computed(marks) == {"calibration": 2, "pair-0": 2, "pair-1": 3, "pair-2": 2, "windows": 2}
    frame = results(out)
    assert set(frame["status"]) == {"ok"} and set(frame.columns) - KILL_PARAMS == set(uninterrupted.columns)
    pd.testing.assert_frame_equal(frame[METRICS], uninterrupted[METRICS])


def killed_in_the_first_repetition(tmp_path: Path, marks: Path, params: str = "") -> tuple[Path, Path]:
    out = tmp_path / "out"
    path = staged_manifest(tmp_path, marks, ', kill_in: "pair-1"' + params, repetitions=1)
    assert [o.status for o in run_sweep(load_manifest(path, "full"), out, progress=False).outcomes] == ["failed"]
    assert computed(marks) == {"calibration": 1, "pair-0": 1, "pair-1": 1}
    return path, out


def test_a_run_asked_something_else_computes_its_stages_afresh(tmp_path: Path) -> None:
    marks = counters(tmp_path)
    _, out = killed_in_the_first_repetition(tmp_path, marks)
    changed = staged_manifest(tmp_path, marks, ', kill_in: "pair-1", scale: 2.0', repetitions=1)
    summary = run_sweep(load_manifest(changed, "full"), out, progress=False)
    assert [o.status for o in summary.outcomes] == ["ok"]
    assert computed(marks) == {"calibration": 2, "pair-0": 2, "pair-1": 2, "pair-2": 1, "windows": 1}
    assert results(out)["cost"].tolist() == [3.0]


def test_force_computes_every_stage_afresh(tmp_path: Path) -> None:
    marks = counters(tmp_path)
    path, out = killed_in_the_first_repetition(tmp_path, marks)
    summary = run_sweep(load_manifest(path, "full"), out, progress=False, force=True)
    assert [o.status for o in summary.outcomes] == ["ok"]
    assert computed(marks) == {"calibration": 2, "pair-0": 2, "pair-1": 2, "pair-2": 1, "windows": 1}


def test_a_ray_task_takes_the_stored_stages_with_it(tmp_path: Path) -> None:
    from rlscope.harness.ray_executor import _execute_run, _pack

    marks = counters(tmp_path)
    path, out = killed_in_the_first_repetition(tmp_path, marks)
    manifest = load_manifest(path, "full")
    (point,) = manifest.points()
    run_dir = out / "staged" / "runs" / point.run_id
    reply = _execute_run(runner._config(manifest, point), _pack(run_dir / STAGES_DIR))  # as on a node, no Ray needed
    assert reply["returncode"] == 0
    assert computed(marks) == {"calibration": 1, "pair-0": 1, "pair-1": 2, "pair-2": 1, "windows": 1}
    with tarfile.open(fileobj=io.BytesIO(reply["files"]), mode="r:gz") as tar:
        result = json.load(tar.extractfile("./result.json"))  # type: ignore[arg-type]
    assert result["status"] == "ok" and result["repetitions"][0]["whole_run_pairs"] == 3


# overhead_correction's stages, with its runs and analyses stood in for (the quick scale takes
# minutes): which runs each attempt makes, and what it returns


class _FakeRuns:
    """Stand-ins for overhead_correction's runs and analyses; ``fail_pair``: the pair whose check
    raises, the first time only (the attempt stopped part way)."""

    def __init__(self, fail_pair: int = -1) -> None:
        self.ran: list[str] = []
        self.fail_pair = fail_pair

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import rlscope.analyze.attribution
        import rlscope.calibrate
        import rlscope.calibrate.spans
        import rlscope.collect.launch
        from experiments.overhead import validate
        from tests.calibration_helpers import TRUE_COSTS, calibration_of, windows_with_costs

        def calibrate(command, directory, *args, **kwargs):
            self.ran.append("calibration")
            calibration = calibration_of(**TRUE_COSTS)
            calibration.save(directory / rlscope.calibrate.CALIBRATION_FILE)
            return calibration, []

        def run_profiled(command, directory, **kwargs):
            self.ran.append(directory.name)
            directory.mkdir(parents=True)
            return None, 0

        def whole_run_pair(base, base_again, profiled, tables, calibration):
            i = int(profiled[0].removeprefix("profiled"))
            assert calibration.costs_ns == TRUE_COSTS and tables == {"trace": f"profiled{i}"}
            assert (base, base_again) == ([f"base{i}"], [f"base{i + 1}"])
            if i == self.fail_pair:
                self.fail_pair = -1
                raise RuntimeError("stopped part way")
            return {"corrected_error_pct": float(i), "noise_pct": 1.0}

        def sessions(command, root, gpu):
            self.ran.append("sessions")

        def analyze_corrected(trace, calibration_path):
            rlscope.calibrate.Calibration.load(calibration_path)  # the file is there, computed or read back
            return {"trace": trace.name}

        monkeypatch.setattr(rlscope.calibrate, "calibrate", calibrate)
        monkeypatch.setattr(rlscope.calibrate, "analyze_corrected", analyze_corrected)
        monkeypatch.setattr(rlscope.collect.launch, "run_profiled", run_profiled)
        monkeypatch.setattr(rlscope.analyze.attribution, "read_attributed", lambda path: [path.name])
        monkeypatch.setattr(rlscope.calibrate.spans, "measure_windows",
                            lambda processes: [windows_with_costs(20, levels=(0, 4))])
        monkeypatch.setattr(validate, "whole_run_pair", whole_run_pair)
        monkeypatch.setattr(validate, "_run_sessions", sessions)
        monkeypatch.setattr(validate, "session_errors",
                            lambda directory, calibration, whole: {"session_corrected_error_pct": whole["noise_pct"]})


def overhead_correction(**params: Any) -> dict[str, Any]:
    from experiments.overhead.validate import overhead_correction

    return overhead_correction(**{"workload": "gym_numpy", "calibration_steps": 100, "validation_steps": 200,
                                  "gpu": False, "validation_pairs": 3, "session_steps": 400, **params})


def test_overhead_correction_resumes_from_its_stages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _FakeRuns()
    plain.install(monkeypatch)
    monkeypatch.delenv(ENV_STAGES_DIR, raising=False)
    uninterrupted = overhead_correction()
    assert plain.ran == ["calibration", "base0", "profiled0", "base1", "profiled1", "base2", "profiled2", "base3",
                         "windows", "sessions"]

    runs = _FakeRuns(fail_pair=2)
    runs.install(monkeypatch)
    monkeypatch.setenv(ENV_STAGES_DIR, str(tmp_path / "rep"))
    with pytest.raises(RuntimeError, match="stopped part way"):
        overhead_correction()
    assert describe(Stages(tmp_path / "rep").stored()) == "calibration, 2 of 3 validation pairs"
    runs.ran.clear()
    resumed = overhead_correction()
    # Pair 2 again, its uninstrumented run before the profiled one included (the earlier one's trace is gone).
    assert runs.ran == ["base2", "profiled2", "base3", "windows", "sessions"]
    assert describe(Stages(tmp_path / "rep").stored()) == ("calibration, 3 of 3 validation pairs, windows run, "
                                                           "sessions run")
    assert resumed.keys() == uninterrupted.keys()
    assert json.dumps(resumed, sort_keys=True) == json.dumps(uninterrupted, sort_keys=True)
    runs.ran.clear()
    assert json.dumps(overhead_correction(), sort_keys=True) == json.dumps(uninterrupted, sort_keys=True)
    assert runs.ran == []  # every stage read back


def test_overhead_correction_counts_the_time_its_stored_stages_took_against_its_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _FakeRuns(fail_pair=1)
    runs.install(monkeypatch)
    monkeypatch.setenv(ENV_STAGES_DIR, str(tmp_path / "rep"))
    with pytest.raises(RuntimeError, match="stopped part way"):
        overhead_correction(budget_s=3600)
    stored = tmp_path / "rep" / "calibration.json"
    record = json.loads(stored.read_text())
    stored.write_text(json.dumps({**record, "seconds": 3600.0}))  # the calibration took the whole budget
    assert overhead_correction(budget_s=3600)["whole_run_pairs"] == 1  # the first pair always runs
    monkeypatch.setenv(ENV_STAGES_DIR, str(tmp_path / "afresh"))
    assert overhead_correction(budget_s=3600)["whole_run_pairs"] == 3  # no time spent before


def test_a_stage_bound_to_its_machine_is_computed_again_on_another(tmp_path: Path, monkeypatch) -> None:
    import rlscope.stages

    calls: list[str] = []
    monkeypatch.setattr(rlscope.stages, "machine_identity", lambda: "vm#0000aaaa")
    Stages(tmp_path).stage("calibration", lambda: calls.append("a") or {"cost": 1}, this_machine=True)
    Stages(tmp_path).stage("pair", lambda: calls.append("pair") or 1)
    monkeypatch.setattr(rlscope.stages, "machine_identity", lambda: "vm#0000bbbb")  # same name, another machine
    assert Stages(tmp_path).stage("calibration", lambda: calls.append("b") or {"cost": 2}, this_machine=True) == \
        {"cost": 2}
    assert Stages(tmp_path).stage("pair", lambda: calls.append("pair again") or 2) == 1  # any machine's will do
    assert calls == ["a", "pair", "b"]
