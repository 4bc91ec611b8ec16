"""`rlscope calibrate` end to end: runs, extension, precision, failures, and the per-machine cache."""

from __future__ import annotations

from dataclasses import replace

import json
import subprocess
import sys

import pandas as pd
import pytest

from rlscope.nvidia import gpu_unavailable_reason
from rlscope.errors import RlscopeError
from tests.calibration_helpers import (
    calibration_of,
)


def _blocks(runs: list[dict]) -> int:
    """Palindromic blocks in the windows runs among ``runs``, as calibration.json keeps them."""
    from rlscope.calibrate.window_costs import window_blocks

    return sum(len(window_blocks(w)) for r in runs if r["config"] == "windows" for w in r["windows"])


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU is here: the probe would succeed")
def test_a_failed_residual_probe_is_reported_with_its_log(tmp_path):
    from rlscope.calibrate.residual import measure_residual_run

    result, why = measure_residual_run(tmp_path / "residual", timeout_s=120)  # no GPU or libcupti here
    assert result is None and "exit code 1" in why and str(tmp_path / "residual" / "log.txt") in why
    assert "rlscope: " in (tmp_path / "residual" / "log.txt").read_text()


# Iterations for 0.15 s, about a hundred windows of 1 ms whatever the machine's speed: a fixed
# count of microsecond iterations made too few windows to alternate on where Python runs fast.
TIMED_LOOP = ("import time, rlscope\nimport numpy as np\nend = time.perf_counter() + 0.15\n"
              "while time.perf_counter() < end:\n    rlscope.step()\n")


@pytest.mark.slow
def test_calibrate_then_analyze_corrected(tmp_path, cli_env):
    script = tmp_path / "loop.py"
    script.write_text(
        "import math, rlscope\n"
        "import numpy as np\n"
        "for i in range(60000):\n"  # ~60 windows of 1 ms per run (more on a slower machine)
        "    rlscope.step()\n"
        "    with rlscope.operation('work'):\n"
        "        np.zeros(2); math.floor(i / 3)\n")
    cal_dir = tmp_path / "cal"
    run = subprocess.run([sys.executable, "-m", "rlscope.cli", "calibrate", "--output", str(cal_dir), "-r", "2",
                          "--no-gpu", "--window-ms", "1", "--", sys.executable, str(script)], capture_output=True,
                         text=True, env=cli_env, timeout=300)
    assert run.returncode == 0, run.stderr
    cal = json.loads((cal_dir / "calibration.json").read_text())
    assert {r["config"] for r in cal["runs"]} == {"windows", "startup", "startup-profiled"}
    assert cal["blocks"] == _blocks(cal["runs"]) > 0  # every block of both windows runs, and some
    assert set(cal["costs_ns"]) == {"annotation", "python_call"} and cal["repetitions"] == 2
    assert "ns per event" in run.stdout and "blocks of alternating windows" in run.stderr
    # one uninstrumented start-up per repetition, each ended at its first step, against the windows runs' own
    startups = [r for r in cal["runs"] if r["config"] == "startup"]
    assert len(startups) == 6 and all(r["startup_ns"] > 0 for r in startups)
    profiled = [r for r in cal["runs"] if r["config"] in ("windows", "startup-profiled")]
    assert sorted((r["repetition"], r["pair"]) for r in profiled) == sorted((r["repetition"], r["pair"])
                                                                            for r in startups)
    assert cal["startup_ns"] is not None and cal["startup_ci95_ns"] is not None and "start-up" in run.stdout
    # per repetition: the windows run and 3 start-up pairs, the first pair's profiled start-up the windows run's
    assert [p.name for p in sorted((cal_dir / "runs").iterdir())][:6] == [
        "0-startup", "0-startup-1", "0-startup-2", "0-startup-profiled-1", "0-startup-profiled-2", "0-windows"]
    assert len(list((cal_dir / "runs").iterdir())) == 12

    trace = tmp_path / "trace"
    prof = subprocess.run([sys.executable, "-m", "rlscope.cli", "prof", "--output", str(trace), "--no-analyze",
                           "--", sys.executable, str(script)], capture_output=True, text=True, env=cli_env,
                          timeout=300)
    assert prof.returncode == 0, prof.stderr
    out = subprocess.run([sys.executable, "-m", "rlscope.cli", "analyze", str(trace), "--corrected",
                          "--calibration", str(cal_dir / "calibration.json")], capture_output=True, text=True,
                         env=cli_env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "time corrected for profiling overhead" in out.stdout
    assert "by the costs' 95% intervals" in out.stdout
    table = pd.read_csv(trace / "analysis" / "breakdown.csv")
    assert {"corrected_ns", "corrected_low_ns", "corrected_high_ns", "overhead_ns", "excess_ns"} <= set(table.columns)
    assert (0 <= table["corrected_low_ns"]).all() and (table["corrected_low_ns"] <= table["corrected_ns"]).all()
    assert (table["corrected_ns"] <= table["corrected_high_ns"]).all()
    assert (table["corrected_high_ns"] <= table["time_ns"]).all()

    missing = subprocess.run([sys.executable, "-m", "rlscope.cli", "analyze", str(trace), "--corrected"],
                             capture_output=True, text=True, env=cli_env, timeout=300)
    assert missing.returncode == 2 and "rlscope calibrate" in missing.stderr and "Traceback" not in missing.stderr


def test_extend_adds_repetitions_to_a_calibration_and_refuses_another_command(tmp_path, cli_env):
    script = tmp_path / "loop.py"
    script.write_text(TIMED_LOOP + "    with rlscope.operation('work'):\n        np.zeros(2)\n")
    cal_dir = tmp_path / "cal"
    base = [sys.executable, "-m", "rlscope.cli", "calibrate", "--output", str(cal_dir), "-r", "1", "--no-gpu",
            "--window-ms", "1", "--startup-pairs", "1"]
    command = ["--", sys.executable, str(script)]

    def calibrate(*extra: str, cmd: list[str] = command) -> subprocess.CompletedProcess:
        return subprocess.run(base + list(extra) + cmd, capture_output=True, text=True, env=cli_env, timeout=300)

    missing = calibrate("--extend")
    assert missing.returncode == 2 and "calibrate there without --extend first" in missing.stderr
    assert "Traceback" not in missing.stderr
    first = calibrate()
    assert first.returncode == 0, first.stderr
    before = json.loads((cal_dir / "calibration.json").read_text())
    more = calibrate("--extend")
    assert more.returncode == 0, more.stderr
    after = json.loads((cal_dir / "calibration.json").read_text())
    assert before["repetitions"] == 1 and after["repetitions"] == 2
    assert after["runs"][:len(before["runs"])] == before["runs"]  # the first repetition's runs, kept as they were
    assert {r["repetition"] for r in after["runs"][len(before["runs"]):]} == {1}
    assert {p.name for p in (cal_dir / "runs").iterdir()} == {"0-windows", "0-startup", "1-windows", "1-startup"}
    added = [r for r in after["runs"] if r["repetition"] == 1]
    assert after["blocks"] == before["blocks"] + _blocks(added) and _blocks(added) > 0  # from all its runs

    other = calibrate("--extend", cmd=["--", sys.executable, "-c", "pass"])
    assert other.returncode == 2 and "not `" in other.stderr and "Traceback" not in other.stderr
    assert json.loads((cal_dir / "calibration.json").read_text()) == after  # nothing already written is lost


@pytest.mark.slow
def test_precision_adds_runs_up_to_a_cap(tmp_path, cli_env):
    script = tmp_path / "loop.py"
    script.write_text(TIMED_LOOP + "    np.zeros(2); sum(range(500))\n")
    cal_dir = tmp_path / "cal"
    run = subprocess.run([sys.executable, "-m", "rlscope.cli", "calibrate", "--output", str(cal_dir), "-r", "1",
                          "--precision", "0.000001", "--no-gpu", "--window-ms", "1", "--startup-pairs", "0", "--",
                          sys.executable, str(script)], capture_output=True, text=True, env=cli_env, timeout=300)
    assert run.returncode == 0, run.stderr
    cal = json.loads((cal_dir / "calibration.json").read_text())
    assert cal["repetitions"] == 4  # 1 asked for, 3 added, then the cap
    assert [r["config"] for r in cal["runs"]] == ["windows"] * 4  # --startup-pairs 0: no start-up runs
    assert cal["startup_ns"] is None and "start-up" not in run.stdout
    assert "one more run" in run.stderr and "above --precision 1e-06%; stopping there" in run.stderr
    assert cal["uncertainty_pct"] > 0 and "a corrected iteration is uncertain to" in run.stderr


def test_failed_calibration_run_is_reported_and_others_kept(tmp_path, cli_env):
    script = tmp_path / "flaky.py"
    script.write_text("import os, sys\nsys.exit(3 if os.environ.get('RLSCOPE_WALL_ONLY') else 0)\n")
    run = subprocess.run([sys.executable, "-m", "rlscope.cli", "calibrate", "--output", str(tmp_path / "cal"),
                          "-r", "1", "--no-gpu", "--", sys.executable, str(script)], capture_output=True, text=True,
                         env=cli_env, timeout=300)
    assert run.returncode != 0
    assert "uninstrumented: exit code 3" in run.stderr and "log.txt" in run.stderr
    assert "calibrating with whole runs" in run.stderr  # no rlscope.step(): nothing to alternate on
    assert (tmp_path / "cal" / "runs" / "0-annotations" / "log.txt").exists()


def test_bad_window_length_is_one_clear_error(tmp_path, cli_env):
    run = subprocess.run([sys.executable, "-m", "rlscope.cli", "calibrate", "--output", str(tmp_path), "--window-ms",
                          "0", "--", sys.executable, "train.py"], capture_output=True, text=True, env=cli_env,
                         timeout=120)
    assert run.returncode == 2
    assert "--window-ms" in run.stderr and "Traceback" not in run.stderr
    pairs = subprocess.run([sys.executable, "-m", "rlscope.cli", "calibrate", "--output", str(tmp_path),
                            "--startup-pairs", "-1", "--", sys.executable, "train.py"], capture_output=True, text=True,
                           env=cli_env, timeout=120)
    assert pairs.returncode == 2 and "--startup-pairs" in pairs.stderr and "Traceback" not in pairs.stderr


def test_a_cached_calibration_is_made_once_per_command_and_machine(tmp_path, monkeypatch):
    import rlscope.calibrate.cache as calibrate_module

    made = []

    def fake_calibrate(command, output, progress=None, **options):
        made.append(command)
        calibration = replace(calibration_of(python_call=1000.0), command=tuple(command))
        output.mkdir(parents=True, exist_ok=True)
        calibration.save(output / "calibration.json")
        return calibration, []

    monkeypatch.setattr(calibrate_module, "calibrate", fake_calibrate)
    def sized(n):
        return lambda: ["python", "loop.py", "--iterations", str(n)]

    first, path = calibrate_module.cached_calibration(["python", "loop.py"], sized(100), tmp_path, startup_pairs=0)
    again, same = calibrate_module.cached_calibration(["python", "loop.py"], sized(300), tmp_path, startup_pairs=0)
    assert made == [["python", "loop.py", "--iterations", "100"]]  # another length, same workload: reused
    assert same == path and again.costs_ns == first.costs_ns == {"python_call": 1000.0}
    calibrate_module.cached_calibration(["python", "other.py"], sized(100), tmp_path, startup_pairs=0)
    calibrate_module.cached_calibration(["python", "loop.py"], sized(100), tmp_path, startup_pairs=1)  # other options
    assert len(made) == 3 and len(list(tmp_path.iterdir())) == 3
    # Looking one up never makes one: found for the same workload and options, else None.
    assert calibrate_module.find_cached_calibration(["python", "loop.py"], tmp_path, startup_pairs=0) == path
    assert calibrate_module.find_cached_calibration(["python", "loop.py"], tmp_path, startup_pairs=2) is None
    assert len(made) == 3


def test_a_failed_calibration_is_not_cached(tmp_path, monkeypatch):
    import rlscope.calibrate.cache as calibrate_module

    def failing(command, output, progress=None, **options):
        output.mkdir(parents=True, exist_ok=True)
        calibration_of(python_call=1.0).save(output / "calibration.json")
        return calibration_of(python_call=1.0), ["repetition 1, windows: exit 1 (see log.txt)"]

    monkeypatch.setattr(calibrate_module, "calibrate", failing)
    with pytest.raises(RlscopeError, match="calibration runs failed: repetition 1"):
        calibrate_module.cached_calibration(["python", "loop.py"], lambda: ["python", "loop.py"], tmp_path)
    assert not list(tmp_path.glob("*/calibration.json"))


def test_a_calibration_cut_off_part_way_is_not_found_as_cached(tmp_path, monkeypatch):
    # calibrate saves its calibration.json after each repetition; one stopped after the first of
    # two (Ctrl-C, a job's time limit) must not be reused by the next run as a finished one.
    import rlscope.calibrate.cache as calibrate_module

    def cut_off(command, output, progress=None, **options):
        output.mkdir(parents=True, exist_ok=True)
        calibration_of(python_call=1.0).save(output / "calibration.json")  # the first repetition's
        raise KeyboardInterrupt

    monkeypatch.setattr(calibrate_module, "calibrate", cut_off)
    with pytest.raises(KeyboardInterrupt):
        calibrate_module.cached_calibration(["python", "loop.py"], lambda: ["python", "loop.py"], tmp_path,
                                            repetitions=2)
    assert calibrate_module.find_cached_calibration(["python", "loop.py"], tmp_path, repetitions=2) is None
