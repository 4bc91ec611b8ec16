"""bench/sampled_size.py: growth per hour from a timeline, and sampled shares against full traces."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "bench" / "sampled_size.py"
_spec = importlib.util.spec_from_file_location("sampled_size", _PATH)
sampled_size = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sampled_size)


def test_growth_is_the_slope_of_the_second_half_per_hour() -> None:
    # Start-up grows 500 MB in the first seconds; afterwards 2 MB a minute, which is 120 MB an hour.
    timeline = [[t, (500.0 if t > 5 else 100.0 * t) + 2.0 * t / 60, float("nan"), 0.0] for t in range(0, 121)]
    assert math.isclose(sampled_size.growth_per_hour(timeline, 1), 120.0, rel_tol=1e-6)
    assert math.isnan(sampled_size.growth_per_hour(timeline, 2))  # no NVML: not a number, not zero
    assert math.isnan(sampled_size.growth_per_hour(timeline[:2], 1))  # too short a run to say


def test_each_round_s_estimate_is_held_against_its_own_round_s_full_trace() -> None:
    runs = [{"round": 0, "mode": "full", "shares": {"inference / GPU": 0.40, "simulation / Python": 0.02}},
            {"round": 0, "mode": "sampled", "shares": {"inference / GPU": [0.41, 0.39, 0.43]}},
            {"round": 1, "mode": "full", "shares": {"inference / GPU": 0.30}},
            # within 5% relative of round 0's full share, but not of its own round's
            {"round": 1, "mode": "sampled", "shares": {"inference / GPU": [0.40, 0.38, 0.42]}},
            {"round": 1, "mode": "off"}]
    (row,) = sampled_size.share_agreement(runs)  # shares under 5% are left out
    assert row["share"] == "inference / GPU" and row["rounds"] == 2
    assert row["within_tolerance"] == 1 and row["covered"] == 1


def test_a_share_the_sampled_run_never_saw_counts_as_missed() -> None:
    runs = [{"round": 0, "mode": "full", "shares": {"backpropagation / GPU": 0.2}},
            {"round": 0, "mode": "sampled", "shares": {}}]
    (row,) = sampled_size.share_agreement(runs)
    assert row["rounds"] == 1 and row["sampled"] == 0.0 and row["within_tolerance"] == 0 and row["covered"] == 0


def test_the_profiler_s_own_writes_are_left_out_of_both_sides() -> None:
    """A full trace that spent 20% of its iterations writing its own chunks: its loop's shares
    are those of the other 80%. Estimate and interval are scaled alike."""
    full = {"sim / Python": 0.40, "inference / GPU": 0.40, "sim / Profiler": 0.20}
    assert sampled_size.without_profiler(full) == {"sim / Python": 0.5, "inference / GPU": 0.5}
    sampled = {"sim / Python": [0.45, 0.40, 0.50], "sim / Profiler": [0.10, 0.05, 0.15]}
    assert sampled_size.without_profiler(sampled)["sim / Python"] == pytest.approx([0.5, 0.40 / 0.9, 0.50 / 0.9])
    assert sampled_size.without_profiler({"sim / Python": 0.4}) == {"sim / Python": 0.4}  # nothing to leave out
    no_interval = {"sim / Python": [0.45, math.nan, math.nan], "sim / Profiler": [math.nan, math.nan, math.nan]}
    assert sampled_size.without_profiler(no_interval)["sim / Python"][0] == 0.45  # a NaN profiler share is none
    with pytest.raises(ValueError, match="no loop time"):
        sampled_size.without_profiler({"sim / Profiler": 1.0})


def test_a_long_run_s_estimates_are_held_to_the_median_of_its_full_references() -> None:
    estimates = {"sim / Python": [0.52, 0.50, 0.54], "inference / GPU": [0.40, 0.39, 0.41],
                 "tail / Python": [0.08, 0.07, 0.09]}
    references = [{"sim / Python": 0.50, "inference / GPU": 0.45, "tail / Python": 0.05},
                  {"sim / Python": 0.51, "inference / GPU": 0.44, "tail / Python": 0.05},
                  {"sim / Python": 0.60, "inference / GPU": 0.46, "tail / Python": 0.04}]
    rows = {r["share"]: r for r in sampled_size.reference_agreement(estimates, references)}
    assert rows["sim / Python"]["full"] == 0.51 and rows["sim / Python"]["full_range"] == [0.50, 0.60]
    assert rows["sim / Python"]["within_tolerance"] and rows["sim / Python"]["covered"]
    assert rows["sim / Python"]["full_runs_within_tolerance"] == 2  # the third full run is off by itself
    assert not rows["inference / GPU"]["within_tolerance"] and not rows["inference / GPU"]["covered"]
    assert not rows["tail / Python"]["within_tolerance"]  # 0.08 against 0.05: over 0.5 points
    assert set(rows) == {"sim / Python", "inference / GPU", "tail / Python"}


def test_a_long_run_s_memory_is_read_inside_the_session_and_after_start_up(tmp_path: Path) -> None:
    import json

    # 100 s: start-up fills 1000 MB in the first 5 s, then flat but for the last sample, taken after
    # the session's end (CUPTI's buffers freed): neither may count as growth.
    timeline = [[float(t), 1000.0 if t >= 5 else 200.0 * t, 50.0, t / 100] for t in range(1, 101)]
    timeline.append([100.5, 900.0, 10.0, 1.0])
    process = tmp_path / "trace" / "loop.1"
    process.mkdir(parents=True)
    (process / "samples.json").write_text(json.dumps(
        {"calls": [[0, 0], [5000, 10**9]], "windows": [[1, 0, 1, 20]] * 3, "blocks": [500, 800, 900]}))
    helper = tmp_path / "trace" / "helper.2"  # a process that never stepped: not the loop's
    helper.mkdir()
    (helper / "samples.json").write_text(json.dumps({"calls": [], "windows": [], "blocks": []}))
    run = {"wall_s": 100.5, "trace_bytes": 1_000_000, "max_rss_mb": 954.0, "dropped_records": 0, "timeline": timeline}
    record = sampled_size.long_record(run, tmp_path / "trace", "tiny", 5000, "window=20", {"host": {}, "gpu": "none"})
    assert record["iterations"] == 5000 and record["windows"] == 3 and record["largest_block"] == 900
    assert record["rss_mb_settled_last"] == [1000.0, 1000.0] and record["rss_mb_range_settled"] == [1000.0, 1000.0]
    assert math.isclose(record["rss_mb_per_hour"], 0.0, abs_tol=1e-6)
    assert record["gpu_mb_settled_last"] == [50.0, 50.0]
    assert math.isclose(record["trace_mb_per_hour"], 1.0 / 100.5 * 3600)


def test_cupti_overhead_counts_the_records_of_a_recorded_gpu_trace() -> None:
    found = sampled_size.cupti_overhead(Path(__file__).parent / "fixtures" / "cupti" / "trace")
    request = found["overhead: activity buffer request"]
    assert request["count"] == 2 and request["median_us"] > 0 and request["total_ms"] >= request["median_us"] / 1e3
    assert request["main_thread"] == 1  # the other came on CUPTI's flushing thread
    assert request["in_windows"] == 0 and request["in_windows_ms"] == 0.0  # a full trace has no windows


def test_the_memory_watcher_reads_the_gpu_the_loop_sees(tmp_path: Path, monkeypatch) -> None:
    """Two GPUs, CUDA_VISIBLE_DEVICES=1: the used memory is GPU 1's, not NVML's first."""
    import types

    from rlscope import nvidia

    used = {0: 5e9, 1: 7e9}
    fake = types.SimpleNamespace(
        nvmlDeviceGetCount=lambda: 2, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetMemoryInfo=lambda handle: types.SimpleNamespace(used=used[handle]))
    monkeypatch.setattr(nvidia, "open_nvml", lambda: fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    watcher = sampled_size.Watcher(tmp_path / "trace", 60.0)
    watcher.sample()
    assert watcher.samples[-1][2] == 7e3


def test_time_in_windows_counts_the_overlapping_parts_only() -> None:
    import numpy as np

    starts, ends = np.array([0, 10, 25, 40]), np.array([5, 20, 35, 45])
    windows = np.array([[12, 30], [44, 50]])
    # [10, 20) has 8 inside the first window, [25, 35) 5, [40, 45) 1 inside the second; [0, 5) none
    assert sampled_size.time_in_windows(starts, ends, windows) == (3, 14.0)
    assert sampled_size.time_in_windows(starts, ends, np.empty((0, 2))) == (0, 0.0)
