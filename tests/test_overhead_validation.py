"""The overhead-correction validation workload (experiments/overhead/validate.py) and its figure."""

from __future__ import annotations

from dataclasses import replace

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.calibration_helpers import (
    TRUE_COSTS,
    calibration_of,
    windows_with_costs,
)



class _Process:
    """A process's trace as the validation reads it: meta and events, and a directory without a
    sampled session's samples.json (a full trace)."""

    def __init__(self, meta: dict, events: pd.DataFrame | None = None) -> None:
        self.meta, self.events = meta, events
        self.directory = Path("/nonexistent-trace")


def test_window_validation_of_exact_costs_is_zero_error():
    from experiments.overhead.validate import window_errors

    result = window_errors([windows_with_costs(20, levels=(0, 2))], TRUE_COSTS)
    assert result["window_corrected_error_pct"] == pytest.approx(0, abs=1e-9)
    assert result["window_raw_error_pct"] > 20 and result["window_blocks"] == 20
    under = window_errors([windows_with_costs(20, levels=(0, 2))], {"python_call": TRUE_COSTS["python_call"]})
    assert under["window_corrected_error_pct"] > 0  # the annotations' cost left in


def test_window_validation_scales_only_the_cpu_side_costs_by_speed():
    from experiments.overhead.validate import window_errors

    # Calibrated on a machine twice as fast: CPU-side costs half as large, GPU-side ones the same.
    slower = {e: c / 2 if e in ("annotation", "python_call") else c for e, c in TRUE_COSTS.items()}
    windows = [windows_with_costs(20, levels=(0, 4))]
    assert window_errors(windows, slower, speed=2.0)["window_corrected_error_pct"] == pytest.approx(0, abs=1e-9)
    assert window_errors(windows, slower)["window_corrected_error_pct"] > 0


def test_the_windows_check_takes_the_residual_off_its_unprofiled_windows():
    from experiments.overhead.validate import window_errors

    windows = [windows_with_costs(20, levels=(0, 4), residual_ns=800.0)]
    exact = window_errors(windows, TRUE_COSTS, unprofiled_ns={"cuda_api": 800.0})
    assert exact["window_corrected_error_pct"] == pytest.approx(0, abs=1e-9)
    assert window_errors(windows, TRUE_COSTS)["window_corrected_error_pct"] < 0  # against the slowed windows


def test_steady_check_leaves_out_start_up_and_its_events():
    from experiments.overhead.validate import steady_errors
    from rlscope.trace.schema import Kind

    s = 1_000_000_000
    base = [_Process({"wall_only": True, "start_ns": 0, "first_step_ns": 1 * s, "end_ns": 11 * s}),
            _Process({"wall_only": True, "start_ns": 0, "first_step_ns": 3 * s, "end_ns": 13 * s})]
    # Profiled: 1000 intercepted calls of 1 ms before its first step (at 2 s), 1000 after; the
    # steady part is 11 s, of which 1 s is overhead: exactly the uninstrumented 10 s.
    rows = [(int(Kind.STEP), 0, 7, 2 * s, 2 * s + 1)]
    rows += [(int(Kind.CPU_CALL), 1, 7, t, t + 10) for t in range(0, 2 * s, 2 * s // 1000)]
    rows += [(int(Kind.CPU_CALL), 1, 7, t, t + 10) for t in range(2 * s + 5, 13 * s, 11 * s // 1000)][:1000]
    events = pd.DataFrame(rows, columns=["kind", "category", "tid", "start_ns", "end_ns"]).assign(correlation=0)
    profiled = [_Process({"start_ns": 0, "end_ns": 13 * s, "main_tid": 7}, events)]
    costs = {"python_call": 1e6}
    result = steady_errors(base, profiled, raw_ns=13 * s, corrected_ns=11 * s, costs_ns=costs, speed=1.0)
    assert result["steady_corrected_error_pct"] == pytest.approx(0)
    assert result["steady_raw_error_pct"] == pytest.approx(10)
    assert result["steady_noise_pct"] == pytest.approx(0) and result["steady_iterations"] == 1
    assert steady_errors(base[:1], profiled, 13 * s, 11 * s, costs, 1.0) == {}  # no second baseline


def test_whole_run_pairs_report_medians_and_the_range():
    from experiments.overhead.validate import median_of_pairs

    pairs = [{"corrected_error_pct": e, "noise_pct": n, "steady_corrected_error_pct": e / 2}
             for e, n in ((12.0, 1.0), (-3.0, 20.0), (2.0, 4.0))]
    out = median_of_pairs(pairs)
    assert out["corrected_error_pct"] == 2.0 and out["noise_pct"] == 4.0 and out["whole_run_pairs"] == 3
    assert (out["corrected_error_min_pct"], out["corrected_error_max_pct"]) == (-3.0, 12.0)
    assert out["steady_corrected_error_max_pct"] == 6.0
    assert json.loads(out["corrected_error_pairs_pct"]) == [12.0, -3.0, 2.0]  # every pair, in run order
    assert json.loads(out["steady_corrected_error_pairs_pct"]) == [6.0, -1.5, 1.0]
    assert "noise_pairs_pct" not in out
    assert "steady_corrected_error_pct" not in median_of_pairs([{"corrected_error_pct": 1.0}, {}])


def test_whole_run_pairs_stop_short_of_the_budget_and_keep_the_finished_ones():
    from experiments.overhead.validate import pairs_within_budget

    def run(deadline: float | None, after_pairs: float = 0.0) -> list[float]:
        now, durations = [0.0], iter([10.0, 12.0, 9.0, 9.0, 9.0])  # seconds each pair takes

        def pair(i: int) -> dict[str, float]:
            now[0] += next(durations)
            return {"corrected_error_pct": float(i)}

        pairs = pairs_within_budget(pair, 5, deadline, after_pairs, clock=lambda: now[0])
        return [p["corrected_error_pct"] for p in pairs]

    # At t=22 another pair (12 s, the longest yet) and a windows run of half that would end at 40.
    assert run(39.9, after_pairs=0.5) == [0.0, 1.0]
    assert run(40.0, after_pairs=0.5) == [0.0, 1.0, 2.0]
    assert run(None) == [0.0, 1.0, 2.0, 3.0, 4.0]  # no budget: every pair
    assert run(1.0) == [0.0]  # the first pair runs whatever the budget


def test_unprofiled_stretches_are_set_against_the_uninstrumented_iteration():
    from experiments.overhead.validate import unprofiled_slowdown

    windows = [[[0, 1_100_000, 10], [2, 2_000_000, 10], [2, 2_000_000, 10], [0, 1_100_000, 10]]]
    steady = {"steady_uninstrumented_s": 0.001, "steady_iterations": 10}  # 100 us per iteration
    result = unprofiled_slowdown(windows, steady)
    assert result["unprofiled_windows_vs_uninstrumented_pct"] == pytest.approx(10)
    assert unprofiled_slowdown(windows, {}) == {}
    sessions = [[[0, 1_200_000, 10], [2, 2_000_000, 10], [2, 2_000_000, 10], [0, 1_200_000, 10]]]
    assert unprofiled_slowdown(sessions, steady, "sessions") == {
        "unprofiled_sessions_vs_uninstrumented_pct": pytest.approx(20)}


def test_overhead_figure_shows_the_calibrations_own_uncertainty_where_reported():
    import matplotlib

    matplotlib.use("Agg")
    from rlscope.plot.overhead import overhead_correction

    results = pd.DataFrame({"status": ["ok"] * 4, "workload": ["a", "a", "b", "b"],
                            "raw_error_pct": [30.0, 32, 20, 22], "corrected_error_pct": [1.0, -2, 3, 4],
                            "steady_corrected_error_pct": [0.5, -1, 2, 3],
                            "window_corrected_error_pct": [0.2, 0.1, 1, 2],
                            "window_corrected_ci95_pct": [1.0, 2, 1, 1]})

    def labels(fig):
        return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "± the calibration's own uncertainty" not in labels(overhead_correction(results, {"scale": "quick"}))
    fig = overhead_correction(results.assign(calibration_uncertainty_pct=[1.5, 2.5, 6.0, 8.0]), {"scale": "quick"})
    assert "± the calibration's own uncertainty" in labels(fig)
    bars = [c for c in fig.axes[0].containers if type(c).__name__ == "ErrorbarContainer"]
    spans = bars[-1].lines[2][0].get_segments()  # the last error bars drawn: the calibration's, at 0 ± median
    assert [(round(s[0][1], 6), round(s[1][1], 6)) for s in spans] == [(-2.0, 2.0), (-7.0, 7.0)]
    assert "corrected, sessions in one run (median)" not in labels(fig)
    sessions = results.assign(session_corrected_error_pct=[1.0, 3, -2, -4], session_corrected_ci95_pct=[2.0, 4, 1, 1])
    fig = overhead_correction(sessions, {"scale": "quick"})
    assert "corrected, sessions in one run (median)" in labels(fig)
    session_bars = fig.axes[0].containers[-1]  # drawn last: mean of the runs' medians, mean interval
    assert [round(b.get_height(), 6) for b in session_bars] == [2.0, -3.0]
    assert [round(s[1][1] - s[0][1], 6) for s in session_bars.errorbar.lines[2][0].get_segments()] == [6.0, 2.0]


def test_overhead_figure_draws_every_whole_run_pair_on_its_bar():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.collections import PathCollection

    from rlscope.plot.overhead import overhead_correction

    results = pd.DataFrame({"status": ["ok", "ok", "ok", "failed"], "workload": ["a", "a", "b", "b"],
                            "raw_error_pct": [30.0, 32, 20, 22], "corrected_error_pct": [1.0, -2, 3, 4],
                            "corrected_error_pairs_pct": ["[1.0, 8.5, -0.5]", "[-2.0]", float("nan"), "[40.0]"]})
    fig = overhead_correction(results, {"scale": "quick"})
    dots = [c for c in fig.axes[0].collections if isinstance(c, PathCollection)]
    assert len(dots) == 1  # workload a only: b's one ok row predates the pairs, its failed row is left out
    bars = [c for c in fig.axes[0].containers if type(c).__name__ == "BarContainer"]
    bar = bars[1].patches[0]  # the corrected whole-run bar of workload a (after the uncorrected one)
    assert sorted(dots[0].get_offsets()[:, 1].tolist()) == [-2.0, -0.5, 1.0, 8.5]
    assert all(bar.get_x() <= x <= bar.get_x() + bar.get_width() for x in dots[0].get_offsets()[:, 0])
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels.count("single whole-run pairs") == 1


def test_a_reused_calibration_must_be_of_the_workload_and_of_another_length(tmp_path):
    from experiments.overhead.validate import reused_calibration

    path = tmp_path / "calibration.json"
    calibration = calibration_of(annotation=100)
    for command, error in ((["python", "-m", "experiments.overhead.loops", "jax_loop", "100000"], "not for gym_numpy"),
                           (["python", "train.py"], "not for gym_numpy"),
                           (["python", "-m", "experiments.overhead.loops", "gym_numpy", "200000"], "another length")):
        replace(calibration, command=tuple(command)).save(path)
        with pytest.raises(ValueError, match=error):
            reused_calibration(path, "gym_numpy", 200_000)
    replace(calibration, command=("python", "-m", "experiments.overhead.loops", "gym_numpy", "100000")).save(path)
    assert reused_calibration(path, "gym_numpy", 200_000).costs_ns == {"annotation": 100}
