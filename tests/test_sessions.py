"""The in-process sessions check: segments of one run profiled through rlscope.profile() or not,
in palindromic order, read back as window rows and corrected like alternating windows."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from experiments.overhead.sessions import SEGMENTS_FILE, SessionSegments, read_segments
from experiments.overhead.validate import window_errors


def test_segments_alternate_palindromically_and_leave_out_each_warm_up(tmp_path, monkeypatch):
    clock = iter(range(0, 10**12, 1_000_000))  # every tick 1 ms later
    monkeypatch.setattr("experiments.overhead.sessions.time.perf_counter_ns", lambda: next(clock))
    started = []

    class FakeProfile:
        def __init__(self, directory, gpu=None):
            started.append(directory.name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr("experiments.overhead.sessions.rlscope.profile", FakeProfile)
    with SessionSegments(tmp_path, segment_ms=5, warmup_fraction=0.4) as segments:
        for _ in range(70):
            segments.tick()
    data = json.loads((tmp_path / SEGMENTS_FILE).read_text())
    rows = data["segments"]
    assert [r[0] for r in rows] == [0, 1, 1, 0] * (len(rows) // 4) + [0, 1, 1, 0][:len(rows) % 4]
    assert len(rows) >= 8
    # warm-up of 2 ms (two ticks, the first one the segment's own), then 5 ms timed: 5 iterations
    assert {r[2] - r[1] for r in rows} == {5_000_000} and {r[3] for r in rows} == {5}
    assert [r[4] for r in rows if r[0]] == started[:len([r for r in rows if r[0]])]
    assert all(r[4] == "" for r in rows if not r[0])
    # every session opened was closed and costed: 1 ms (one clock reading) to open and to close;
    # a timed one saw its 5 timed iterations and its warm-up
    sessions = data["sessions"]
    assert len(sessions) == len(started) and {(s[0], s[1]) for s in sessions} == {(1_000_000, 1_000_000)}
    assert all(s[2] > 5 for s in sessions[:len([r for r in rows if r[0]])])


def test_a_tick_every_few_iterations_counts_them_all(tmp_path, monkeypatch):
    clock = iter(range(0, 10**12, 1_000_000))  # every tick 1 ms later
    monkeypatch.setattr("experiments.overhead.sessions.time.perf_counter_ns", lambda: next(clock))
    monkeypatch.setattr("experiments.overhead.sessions.rlscope.profile", lambda directory, gpu=None: _NoSession())
    with SessionSegments(tmp_path, segment_ms=5, warmup_fraction=0.4, every=4) as segments:
        for i in range(280):
            if i % segments.every == 0:
                segments.tick()
    rows = json.loads((tmp_path / SEGMENTS_FILE).read_text())["segments"]
    assert len(rows) >= 8 and {r[3] for r in rows} == {5 * 4}  # 5 ticks of 4 iterations per timed stretch
    with pytest.raises(ValueError, match="every 0"):
        SessionSegments(tmp_path, every=0)


class _NoSession:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_training_loop_inside_an_operation_can_end_in_a_profiled_segment(tmp_path):
    """SB3's loop runs inside rlscope.operation("learn"); with every tick switching segments,
    its 4 rollouts end in the second (profiled) segment, whose session must close before
    "learn" does."""
    pytest.importorskip("stable_baselines3")
    import rlscope
    from experiments.overhead.loops import sb3

    segments = SessionSegments(tmp_path, segment_ms=1e-6, warmup_fraction=0, gpu=False)
    sb3(20, "A2C", "cpu", segments)  # A2C: 5 steps per rollout
    assert not rlscope.enabled()
    rows = json.loads((tmp_path / SEGMENTS_FILE).read_text())["segments"]
    assert [r[0] for r in rows] == [0]  # segment 0 timed; segment 1 (profiled) cut short and dropped
    assert (tmp_path / "segment-00001").is_dir()


def test_bad_segment_length_is_refused(tmp_path, cli_env):
    with pytest.raises(ValueError, match="segment_ms"):
        SessionSegments(tmp_path, segment_ms=0)
    result = subprocess.run([sys.executable, "-m", "experiments.overhead.loops", "gym_numpy", "10", "--sessions",
                             str(tmp_path / "s"), "--segment-ms", "-5"], env=cli_env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and "--segment-ms -5: must be positive" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "s").exists()


def test_missing_segments_file_is_one_clear_error(tmp_path):
    from rlscope.errors import RlscopeError

    with pytest.raises(RlscopeError, match="--sessions"):
        read_segments(tmp_path)


@pytest.mark.slow
def test_sessions_run_profiles_every_other_pair_of_segments(tmp_path, cli_env):
    out = tmp_path / "sessions"
    subprocess.run([sys.executable, "-m", "experiments.overhead.loops", "gym_numpy", "60000", "--sessions",
                    str(out), "--segment-ms", "10"], check=True, env={**cli_env, "RLSCOPE_GPU": "0"}, timeout=300)
    rows = read_segments(out)
    assert len(rows) >= 12
    profiled = np.array([r for r in rows if r[0]])
    unprofiled = np.array([r for r in rows if not r[0]])
    # Profiled segments have their events counted from their own traces: two annotations and the
    # intercepted calls of each iteration; unprofiled ones none.
    assert (profiled[:, 3] >= 2 * profiled[:, 2]).all() and (profiled[:, 4] > 0).all()
    assert (unprofiled[:, 3:] == 0).all()
    result = window_errors([rows], {"annotation": 300.0, "python_call": 1500.0}, prefix="session")
    assert result["session_blocks"] == len(rows) // 4 - 1  # the first block, warm-up, left out
    assert result["session_raw_error_pct"] > result["session_corrected_error_pct"]
    from experiments.overhead.validate import session_errors
    from rlscope.calibrate import Calibration

    calibration = Calibration(costs_ns={"annotation": 300.0, "python_call": 1500.0}, ci95_ns={}, repetitions=1,
                              machine={}, command=(), runs=())  # no iteration time: costs taken as they are
    checked = session_errors(out, calibration)
    assert checked["session_corrected_error_pct"] == pytest.approx(result["session_corrected_error_pct"])
    assert "unprofiled_sessions_vs_uninstrumented_pct" not in checked  # no whole runs to set them against
    off = unprofiled[:, 1].sum() / unprofiled[:, 2].sum()  # ns per unprofiled iteration
    steady = {"steady_uninstrumented_s": off * 100 / 1.25 / 1e9, "steady_iterations": 100}
    against = session_errors(out, calibration, steady)
    assert against["unprofiled_sessions_vs_uninstrumented_pct"] == pytest.approx(25)


def test_sessions_refuse_to_run_under_rlscope_prof(tmp_path, cli_env):
    result = subprocess.run([sys.executable, "-m", "rlscope.cli", "prof", "--output", str(tmp_path / "t"), "--",
                             sys.executable, "-m", "experiments.overhead.loops", "gym_numpy", "10", "--sessions",
                             str(tmp_path / "s")], env={**cli_env, "RLSCOPE_GPU": "0"}, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0 and "without `rlscope prof`" in result.stderr
    assert "Traceback" not in result.stderr
