"""Correction of a breakdown: each cost from its layer, never below zero, with its uncertainty."""

from __future__ import annotations

from dataclasses import replace


import pandas as pd
import pytest

from rlscope.calibrate.correct import correct_breakdown
from tests.calibration_helpers import (
    breakdown_tables,
    calibration_of,
)


def test_correction_takes_each_cost_from_its_layer_and_never_below_zero():
    breakdown, transitions = breakdown_tables()
    out = correct_breakdown(breakdown, transitions, calibration_of(annotation=100, python_call=1000, cuda_api=2500,
                                                                gpu_activity=1000)).set_index(["operation",
                                                                                                "resources"])
    # inference Python: 10000 - 2*100 - 4*1000
    assert out.loc[("inference", "Python"), "corrected_ns"] == 5_800
    # inference CUDA API: 2*2500 + 1*1000 = 6000 taken from CPU-only 4000 first, then 2000 from CUDA API+GPU
    assert out.loc[("inference", "CUDA API"), "corrected_ns"] == 0
    assert out.loc[("inference", "CUDA API+GPU"), "corrected_ns"] == 1_000
    assert out.loc[("inference", "GPU"), "corrected_ns"] == 7_000  # GPU time is left as measured
    assert out.loc[("simulation", "Python"), "corrected_ns"] == 0  # 10 x 1000 > 500: clamped
    assert (out["corrected_ns"] >= 0).all()
    assert out["overhead_ns"].sum() == out["time_ns"].sum() - out["corrected_ns"].sum()


def test_correction_reports_how_far_the_intervals_move_it():
    breakdown, transitions = breakdown_tables()
    calibration = calibration_of(annotation=100, python_call=1000, cuda_api=2500, gpu_activity=1000)
    calibration = replace(calibration, ci95_ns={"annotation": 10.0, "python_call": 100.0, "cuda_api": 200.0,
                                                "gpu_activity": None})
    out = correct_breakdown(breakdown, transitions, calibration, speed=2.0).set_index(["operation", "resources"])
    # CPU-side half-widths scale with the speed as the costs do: inference 2*10*2 + 4*100*2, simulation 10*100*2
    assert out.loc[("inference", "Python"), "uncertainty_ns"] == 840
    assert out.loc[("simulation", "Python"), "uncertainty_ns"] == 2_000
    assert out.loc[("inference", "CUDA API"), "uncertainty_ns"] == 400  # 2 calls x 200; kernels have no interval
    assert out["uncertainty_ns"].sum() == 3_240


def test_correlated_costs_combine_by_their_correlation_in_an_operations_removal():
    breakdown, transitions = breakdown_tables()
    calibration = calibration_of(annotation=100, python_call=1000, cuda_api=2500, gpu_activity=1000)
    calibration = replace(
        calibration, ci95_ns={"annotation": 10.0, "python_call": 100.0, "cuda_api": 200.0, "gpu_activity": 300.0},
        correlation={"cuda_api": {"gpu_activity": -1.0}, "gpu_activity": {"cuda_api": -1.0},
                     "annotation": {"python_call": 0.0}, "python_call": {"annotation": 0.0}})
    out = correct_breakdown(breakdown, transitions, calibration).set_index(["operation", "resources"])
    # inference: 2 CUDA API calls x 200 against 1 kernel x 300, opposite errors: |400 - 300|
    assert out.loc[("inference", "CUDA API"), "uncertainty_ns"] == 100
    # independent: sqrt((2 x 10)^2 + (4 x 100)^2)
    assert out.loc[("inference", "Python"), "uncertainty_ns"] == round((20 ** 2 + 400 ** 2) ** 0.5)
    assert out.loc[("inference", "Python"), "corrected_ns"] == 10_000 - 2 * 100 - 4 * 1000  # costs unchanged


def test_start_up_cost_comes_off_the_iterating_process_outside_operations():
    breakdown, transitions = breakdown_tables()
    other = dict(process="p[1]", thread="main", phase="default", operation="(unannotated)", gpu=False)
    breakdown = pd.concat([breakdown, pd.DataFrame([
        {**other, "cpu": "Python", "resources": "Python", "time_ns": 3_000},
        {**other, "cpu": "Backend", "resources": "Backend", "time_ns": 9_000},
        {**other, "process": "q[2]", "cpu": "Python", "resources": "Python", "time_ns": 9_000},
    ])], ignore_index=True)
    calibration = calibration_of(annotation=0.0)
    calibration = replace(calibration, startup_ns=1_000.0, startup_ci95_ns=300.0)
    out = correct_breakdown(breakdown, transitions, calibration, speed=2.0, startup_process="p[1]")
    unannotated = out[out["operation"] == "(unannotated)"].set_index(["process", "cpu"])
    assert unannotated.loc[("p[1]", "Python"), "corrected_ns"] == 1_000  # 3000 - 2 x 1000 (scaled by speed)
    assert unannotated.loc[("p[1]", "Python"), "uncertainty_ns"] == 600
    assert unannotated.loc[("p[1]", "Backend"), "corrected_ns"] == 9_000  # imports' Python time only
    assert unannotated.loc[("q[2]", "Python"), "corrected_ns"] == 9_000  # not the process that iterates
    calibration = replace(calibration, startup_ns=1e9)
    clipped = correct_breakdown(breakdown, transitions, calibration, startup_process="p[1]")
    assert (clipped["corrected_ns"] >= 0).all()
    assert correct_breakdown(breakdown, transitions, calibration)["corrected_ns"].equals(
        correct_breakdown(breakdown, transitions, calibration_of(annotation=0.0))["corrected_ns"])


def test_trace_writes_are_removed_whole_and_left_out_of_windows():
    import numpy as np

    from rlscope.calibrate.spans import write_time_in
    from rlscope.trace.schema import Kind

    breakdown, transitions = breakdown_tables()
    keys = dict(process="p[1]", thread="main", phase="default")
    breakdown = pd.concat([breakdown, pd.DataFrame([{**keys, "operation": "inference", "cpu": "Profiler",
                                                     "gpu": False, "resources": "Profiler", "time_ns": 2_500}])])
    out = correct_breakdown(breakdown, transitions, calibration_of()).set_index(["operation", "resources"])
    assert out.loc[("inference", "Profiler"), "corrected_ns"] == 0
    assert out.loc[("inference", "Profiler"), "overhead_ns"] == 2_500
    events = pd.DataFrame({"kind": [int(Kind.PROFILER_WRITE)] * 2 + [int(Kind.CPU_CALL)], "tid": [1, 2, 1],
                           "start_ns": [90, 150, 100], "end_ns": [130, 160, 200]})
    spans = np.array([[0, 0, 100, 5], [2, 100, 200, 5]])
    assert write_time_in(spans, events, tid=1).tolist() == [10, 30]


def _profiled_loop(iterations: int, annotation_ns: float, call_ns: float) -> tuple[object, float]:
    """A loop of one annotated operation per iteration with 3 backend calls of 5 µs and 10 µs of
    its own Python, profiled: each annotation and each intercepted call busy-waits its known
    cost in the operation's Python time. Returns the trace and the uninstrumented loop's time."""
    from tests.synthetic import BACKEND, CALL, OP, STEP, make_trace

    own, call = 10_000, 5_000
    rows, t = [], 0
    for _ in range(iterations):
        length = own + 3 * call + round(annotation_ns + 3 * call_ns)
        rows.append((STEP, t, t + length, "default"))
        rows.append((OP, t, t + length, "inference"))
        for i in range(3):
            start = t + (i + 1) * (own + round(annotation_ns + 3 * call_ns)) // 4 + i * call
            rows.append((CALL, start, start + call, "linear", BACKEND, 1))
        t += length
    return make_trace(rows, end=t), iterations * (own + 3 * call)


def test_correction_with_calibrated_costs_recovers_the_uninstrumented_time():
    """Known per-event overheads, calibrated from noisy alternating windows, then corrected away:
    the corrected loop lands within 1% of the uninstrumented one, where the raw one is 20% over."""
    from rlscope.analyze.overlap import breakdown as breakdown_of
    from rlscope.analyze.overlap import transitions as transitions_of

    from rlscope.calibrate.window_costs import derive_window_costs
    from tests.calibration_helpers import TRUE_COSTS, windows_with_costs

    noise = {1: 150.0, 2: 300.0}
    windows = [windows_with_costs(40, annotations_per_it=1.0, calls_per_it=3.0, seed=seed, noise_ns=noise)
               for seed in range(3)]
    costs, ci, _ = derive_window_costs(windows)
    calibration = replace(calibration_of(**costs), ci95_ns=ci)
    trace, uninstrumented = _profiled_loop(500, TRUE_COSTS["annotation"], TRUE_COSTS["python_call"])
    out = correct_breakdown(breakdown_of(trace), transitions_of(trace), calibration)
    raw, corrected = out["time_ns"].sum(), out["corrected_ns"].sum()
    assert raw / uninstrumented - 1 > 0.15  # the check would see a correction that does nothing
    assert abs(corrected / uninstrumented - 1) < 0.01
    assert abs(corrected - uninstrumented) <= out["uncertainty_ns"].sum()  # inside the stated interval
    doubled = correct_breakdown(breakdown_of(trace), transitions_of(trace), calibration_of(
        **{e: 2 * c for e, c in costs.items()}))
    assert abs(doubled["corrected_ns"].sum() / uninstrumented - 1) > 0.05  # wrong costs miss it: 1% means something


def _with_intervals(cuda_api: float = 3600, cuda_api_ci: float = 400.0):
    """The example of ``correct_breakdown``'s docstring: 2 annotations at 100 ± 10 ns, 4 calls at
    1000 ± 100 ns and 2 CUDA API calls at ``cuda_api`` ± ``cuda_api_ci`` in inference (7000 ns of
    CUDA API time), and 10 simulator calls at 1000 ± 100 ns against 500 ns of Python."""
    breakdown, transitions = breakdown_tables()
    transitions = transitions[transitions["transition"] != "GPU kernels"]
    calibration = replace(calibration_of(annotation=100, python_call=1000, cuda_api=cuda_api),
                          ci95_ns={"annotation": 10.0, "python_call": 100.0, "cuda_api": cuda_api_ci})
    return correct_breakdown(breakdown, transitions, calibration)


def _assert_bounded(out: pd.DataFrame) -> None:
    assert (out["corrected_low_ns"] >= 0).all()
    assert (out["corrected_low_ns"] <= out["corrected_ns"]).all()
    assert (out["corrected_ns"] <= out["corrected_high_ns"]).all()
    assert (out["corrected_high_ns"] <= out["time_ns"]).all()


def test_a_removal_within_the_measured_time_gets_its_interval_around_the_corrected_time():
    out = _with_intervals().set_index(["operation", "resources"])
    python = out.loc[("inference", "Python")]
    # 10000 - (2 x 100 + 4 x 1000) ± (2 x 10 + 4 x 100): the costs' errors taken to add up
    assert (python["corrected_low_ns"], python["corrected_ns"], python["corrected_high_ns"]) == (5_380, 5_800, 6_220)
    assert python["excess_ns"] == 0 and python["caveat"] == ""
    gpu = out.loc[("inference", "GPU")]  # GPU time is measured, not estimated
    assert gpu["corrected_low_ns"] == gpu["corrected_ns"] == gpu["corrected_high_ns"] == 7_000
    _assert_bounded(out)


def test_a_removal_beyond_the_measured_time_within_its_interval_is_zero_but_not_only_zero():
    """7200 ± 800 ns from 7000 ns of CUDA API time: the point is 0, yet the time may be up to 600 ns."""
    out = _with_intervals().set_index(["operation", "resources"])
    cpu_only, beside_gpu = out.loc[("inference", "CUDA API")], out.loc[("inference", "CUDA API+GPU")]
    assert cpu_only["corrected_ns"] == beside_gpu["corrected_ns"] == 0
    assert cpu_only["corrected_low_ns"] == beside_gpu["corrected_low_ns"] == 0
    # the low end of the removal, 6400 ns, takes the CPU-only 4000 first, then 2400 of the 3000 beside the GPU
    assert (cpu_only["corrected_high_ns"], beside_gpu["corrected_high_ns"]) == (0, 600)
    assert cpu_only["excess_ns"] == 200 and cpu_only["uncertainty_ns"] == 800  # on the row the removal starts from
    assert cpu_only["caveat"] == beside_gpu["caveat"] == ""  # within the costs' interval: not flagged
    assert out["overhead_ns"].sum() == out["time_ns"].sum() - out["corrected_ns"].sum()
    _assert_bounded(out)


def test_a_removal_far_beyond_the_measured_time_is_flagged_on_the_layers_rows():
    from rlscope.analyze.caveats import OVERCORRECTED

    out = _with_intervals(cuda_api=4500, cuda_api_ci=100.0).set_index(["operation", "resources"])
    # simulation: 10 x (1000 ± 100) from 500 ns; inference's CUDA API: 2 x (4500 ± 100) from 7000 ns
    for row in (("simulation", "Python"), ("inference", "CUDA API"), ("inference", "CUDA API+GPU")):
        assert out.loc[row, "caveat"] == OVERCORRECTED, row
        assert out.loc[row, "corrected_low_ns"] == out.loc[row, "corrected_high_ns"] == 0
    assert out.loc[("simulation", "Python"), "excess_ns"] == 10_000 - 500
    assert out.loc[("inference", "CUDA API"), "excess_ns"] == 9_000 - 7_000
    assert out.loc[("inference", "Python"), "caveat"] == ""  # other layers of the operation are not concerned
    _assert_bounded(out)


def test_the_flag_joins_the_caveats_a_row_already_has_once():
    from rlscope.analyze.caveats import OVERCORRECTED

    breakdown, transitions = breakdown_tables()
    breakdown["caveat"] = ["", "", "", "", "calls unseen"]
    calibration = calibration_of(python_call=1000)
    out = correct_breakdown(breakdown, transitions, calibration)
    assert out.loc[4, "caveat"] == f"calls unseen; {OVERCORRECTED}"
    breakdown["caveat"] = out["caveat"]
    assert correct_breakdown(breakdown, transitions, calibration).loc[4, "caveat"] == f"calls unseen; {OVERCORRECTED}"


def test_a_row_both_removals_reach_keeps_its_bounds_in_order():
    """Events of the unannotated code, then the start-up cost, from one Python row."""
    breakdown, transitions = breakdown_tables()
    keys = dict(process="p[1]", thread="main", phase="default", operation="(unannotated)")
    breakdown = pd.concat([breakdown, pd.DataFrame([{**keys, "cpu": "Python", "gpu": False, "resources": "Python",
                                                     "time_ns": 6_000}])], ignore_index=True)
    transitions = pd.concat([transitions, pd.DataFrame([{**keys, "transition": "Python->Backend", "count": 3,
                                                         "iterations": 0, "per_iteration": float("nan")}])],
                            ignore_index=True)
    calibration = replace(calibration_of(python_call=1000), ci95_ns={"python_call": 200.0}, startup_ns=2_000.0,
                          startup_ci95_ns=500.0)
    out = correct_breakdown(breakdown, transitions, calibration, startup_process="p[1]")
    row = out[out["operation"] == "(unannotated)"].iloc[0]
    # 6000 - 3 x 1000 - 2000, the two half-widths (600 and 500) adding up
    assert (row["corrected_low_ns"], row["corrected_ns"], row["corrected_high_ns"]) == (0, 1_000, 2_100)
    assert row["uncertainty_ns"] == 1_100 and row["caveat"] == ""
    _assert_bounded(out)


def test_the_bounds_always_hold_the_corrected_time_within_what_was_measured():
    import numpy as np

    rng = np.random.default_rng(7)
    for _ in range(50):
        breakdown, transitions = breakdown_tables()
        breakdown["time_ns"] = rng.integers(0, 20_000, len(breakdown))
        transitions["count"] = rng.integers(0, 12, len(transitions))
        costs = {e: float(rng.uniform(0, 5_000)) for e in ("annotation", "python_call", "cuda_api", "gpu_activity")}
        calibration = replace(calibration_of(**costs), ci95_ns={e: float(rng.uniform(0, c)) for e, c in costs.items()},
                              startup_ns=float(rng.uniform(0, 5_000)), startup_ci95_ns=float(rng.uniform(0, 2_000)))
        out = correct_breakdown(breakdown, transitions, calibration, startup_process="p[1]")
        _assert_bounded(out)
        zero = out["corrected_ns"] == 0
        assert (out.loc[~zero, "excess_ns"] == 0).all()  # an excess only where a layer ran out


def test_corrected_shares_keep_their_point_inside_their_bounds():
    from rlscope.analyze.shares import share_intervals
    from rlscope.plot.breakdown import stack_label

    out = _with_intervals()
    out["layer"] = [stack_label(c, g) for c, g in zip(out["cpu"], out["gpu"])]
    per_layer = out[out["operation"] == "inference"].groupby("layer")[
        ["corrected_ns", "corrected_low_ns", "corrected_high_ns"]].sum()
    share, low, high = share_intervals(*(per_layer[c] for c in per_layer))
    assert share.sum() == pytest.approx(1.0)
    assert (0 <= low).all() and (low <= share).all() and (share <= high).all() and (high <= 1).all()
    assert share["CUDA API"] == 0 and low["CUDA API"] == 0 and high["CUDA API"] == 0  # its bounds are 0 and 0
    assert high["CPU + GPU"] == pytest.approx(600 / (600 + 5_380 + 7_000))  # the others at their low ends
    assert low["Python"] == pytest.approx(5_380 / (5_380 + 600 + 7_000))  # the others at their high ends


def test_the_correction_summary_prints_the_interval_and_marks_overcorrected_rows():
    from rlscope.analyze.caveats import OVERCORRECTED
    from rlscope.analyze.summary import format_correction

    text = format_correction(_with_intervals(cuda_api=4500, cuda_api_ci=100.0))
    assert "corrected_low_s" in text and "corrected_high_s" in text and "by the costs' 95% intervals" in text
    assert "exceed the measured time by 0.0000" in text  # 11.5 µs in a table of seconds
    assert text.splitlines()[-1] == f"* {OVERCORRECTED}"
    rows = [line.rstrip() for line in text.splitlines() if "inference" in line or "simulation" in line]
    assert len(rows) == 2 and all(line.endswith("*") for line in rows)
