"""An output directory belongs to one run and one writer: prof, calibrate and run never mix an
earlier run into a new one unasked, and two writers at once are refused."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlscope.collect.launch import default_output
from rlscope.errors import RlscopeError, os_error_message
from rlscope.outputs import claim_output, output_lock

SCRIPT = "import rlscope\nwith rlscope.profile(gpu=False, transitions=False):\n    rlscope.step()\n"


def rlscope(*args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlscope.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def processes(trace: Path) -> list[str]:
    return sorted(p.parent.name for p in trace.glob("*/meta.json"))


def test_prof_refuses_a_directory_holding_a_trace_and_replaces_or_appends_when_asked(tmp_path: Path,
                                                                                    cli_env) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    trace = tmp_path / "trace"
    first = rlscope("prof", "--output", str(trace), "--", sys.executable, str(script), env=cli_env)
    assert first.returncode == 0, first.stderr
    before = processes(trace)
    assert len(before) == 1

    again = rlscope("prof", "--output", str(trace), "--", sys.executable, str(script), env=cli_env)
    assert again.returncode == 2
    assert "already holds a trace" in again.stderr and "--force" in again.stderr and "--append" in again.stderr
    assert "Traceback" not in again.stderr
    assert processes(trace) == before  # nothing run, nothing written

    appended = rlscope("prof", "--append", "--output", str(trace), "--", sys.executable, str(script), env=cli_env)
    assert appended.returncode == 0, appended.stderr
    assert len(processes(trace)) == 2 and set(before) < set(processes(trace))

    replaced = rlscope("prof", "--force", "--output", str(trace), "--", sys.executable, str(script), env=cli_env)
    assert replaced.returncode == 0, replaced.stderr
    assert len(processes(trace)) == 1 and not set(before) & set(processes(trace))


def test_force_never_removes_files_rlscope_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "process.1").mkdir()
    (tmp_path / "process.1" / "meta.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RlscopeError, match=r"holds files rlscope did not write \(notes.txt\)"):
        claim_output(tmp_path, lambda p: (p / "meta.json").exists(), force=True, append=False, what="a trace")
    assert (tmp_path / "notes.txt").read_text() == "mine" and (tmp_path / "process.1" / "meta.json").exists()


def test_an_output_path_that_is_a_file_is_one_message(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(RlscopeError, match="is a file, not a directory"):
        claim_output(tmp_path / "f", lambda p: True, force=False, append=False, what="a trace")


def test_a_second_writer_is_refused_naming_the_first_and_a_dead_one_holds_nothing(tmp_path: Path) -> None:
    with output_lock(tmp_path, "rlscope run first.yaml"):
        with pytest.raises(RlscopeError, match=r"being written by `rlscope run first.yaml` \(pid \d+"):
            with output_lock(tmp_path, "rlscope run second.yaml"):
                pass
    with output_lock(tmp_path, "rlscope run third.yaml"):  # released when the first ended
        pass


def test_default_outputs_started_in_the_same_second_differ(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda fmt: "20261127-120000")
    made = [default_output(["python", "train.py"], "traces") for _ in range(3)]
    assert len(set(made)) == 3 and all(p.is_dir() for p in made)


def test_calibrate_refuses_a_directory_holding_a_calibration(tmp_path: Path, cli_env) -> None:
    out = tmp_path / "cal"
    (out / "runs").mkdir(parents=True)
    (out / "calibration.json").write_text("{}")
    result = rlscope("calibrate", "--output", str(out), "--", sys.executable, "-c", "pass", env=cli_env)
    assert result.returncode == 2 and "already holds a calibration" in result.stderr
    assert "--extend" in result.stderr and "Traceback" not in result.stderr
    assert (out / "calibration.json").read_text() == "{}"


def write_manifest(path: Path, workload: str, sleep_s: float) -> Path:
    path.write_text(textwrap.dedent(f"""\
        experiment: toy
        workload: {workload}
        params: {{sleep_s: {sleep_s}}}
        grid: {{x: [1]}}
        """))
    return path


def test_two_runs_into_one_directory_at_once_the_second_is_refused(tmp_path: Path, cli_env) -> None:
    slow = write_manifest(tmp_path / "slow.yaml", "tests.toy_workloads:echo", 30)
    out = tmp_path / "out"
    first = subprocess.Popen([sys.executable, "-m", "rlscope.cli", "run", str(slow), "--output", str(out),
                              "--no-plot"], env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (out / "toy" / "runs" / "x-1" / "config.json").exists():  # the first holds the lock by now
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        second = rlscope("run", str(slow), "--output", str(out), "--no-plot", env=cli_env)
        assert second.returncode == 2
        assert "is being written by `rlscope run" in second.stderr and f"pid {first.pid}" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        first.kill()
        first.wait()


def test_run_refuses_an_experiment_directory_of_another_workload(tmp_path: Path, cli_env) -> None:
    out = tmp_path / "out"
    done = rlscope("run", str(write_manifest(tmp_path / "a.yaml", "tests.toy_workloads:echo", 0)), "--output",
                   str(out), "--no-plot", env=cli_env)
    assert done.returncode == 0, done.stderr
    other = write_manifest(tmp_path / "b.yaml", "tests.toy_workloads:gpu_env", 0)
    refused = rlscope("run", str(other), "--output", str(out), "--no-plot", env=cli_env)
    assert refused.returncode == 2 and "holds runs of workload tests.toy_workloads:echo" in refused.stderr
    assert (out / "toy" / "runs" / "x-1" / "DONE").exists()
    replaced = rlscope("run", str(other), "--output", str(out), "--no-plot", "--force", env=cli_env)
    assert replaced.returncode == 0, replaced.stderr
    assert "cuda_visible_devices" in (out / "toy" / "results.csv").read_text()


@pytest.mark.parametrize("code, says", [
    (errno.ENOSPC, "no space left"), (errno.EACCES, "permission denied"), (errno.EROFS, "read-only"),
    (errno.ENOTDIR, "is a file, not a directory"), (errno.EISDIR, "is a directory"),
])
def test_each_os_error_is_one_line_with_its_fix(code: int, says: str) -> None:
    message = os_error_message(OSError(code, os.strerror(code), "/data/out/x"))
    assert message.startswith("/data/out/x: ") and says in message and "\n" not in message


def test_an_output_under_a_file_ends_the_cli_in_one_line(tmp_path: Path, cli_env) -> None:
    (tmp_path / "f").write_text("")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    done = rlscope("prof", "--output", str(tmp_path / "f" / "trace"), "--", sys.executable, str(script), env=cli_env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    where = tmp_path / "f" / "trace"
    assert done.stderr.strip() == f"error: {where}: a part of this path is a file, not a directory; choose another path"


def test_force_never_removes_a_trace_another_rlscope_is_writing(tmp_path: Path, cli_env) -> None:
    trace = tmp_path / "trace"
    (trace / "train.1").mkdir(parents=True)
    (trace / "train.1" / "meta.json").write_text("{}")
    with output_lock(trace, "rlscope prof -- python train.py"):
        forced = rlscope("prof", "--force", "--output", str(trace), "--", sys.executable, "-c", "pass", env=cli_env)
    assert forced.returncode == 2 and "is being written by `rlscope prof -- python train.py`" in forced.stderr
    assert (trace / "train.1" / "meta.json").exists()


@pytest.mark.parametrize("folder, files", [("figures", ["paper.tex"]), ("analysis", ["notes.md"]),
                                           ("train.1", ["meta.json", "my_results.npy"])])
def test_force_keeps_folders_rlscope_did_not_fill_itself(tmp_path: Path, folder: str, files: list[str]) -> None:
    from rlscope.collect.launch import is_trace_part

    (tmp_path / folder).mkdir()
    for name in files:
        (tmp_path / folder / name).write_text("mine")
    with pytest.raises(RlscopeError, match=f"holds files rlscope did not write \\({folder}\\)"):
        claim_output(tmp_path, is_trace_part, force=True, append=False, what="a trace")
    assert all((tmp_path / folder / name).exists() for name in files)
