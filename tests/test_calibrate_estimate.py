"""Estimation: costs recovered from runs with known injected costs, the residual, continuous and start-up costs."""

from __future__ import annotations


import pytest

from rlscope.calibrate.correct import correct_breakdown
from rlscope.calibrate.estimate import derive_costs
from rlscope.calibrate.window_costs import derive_window_costs
from rlscope.errors import RlscopeError
from tests.calibration_helpers import (
    TRUE_COSTS,
    breakdown_tables,
    calibration_of,
    derive,
    runs_with_costs,
    whole_pair,
    windows_with_costs,
)


def test_injected_costs_are_recovered_exactly():
    costs, ci, reps = derive_costs(runs_with_costs([2_000_000_000, 2_100_000_000, 1_950_000_000]))
    assert reps == 3
    for event, cost in TRUE_COSTS.items():
        assert costs[event] == pytest.approx(cost)
        assert ci[event] == pytest.approx(0, abs=1e-6)  # the base drifts, but paired rounds cancel it


def test_the_residual_of_cuptis_recording_completes_the_cuda_api_cost_the_windows_see():
    from rlscope.calibrate.model import RESIDUAL, WINDOWS

    residual = 800.0
    windows = windows_with_costs(20, levels=(0, 1, 2, 3, 4), residual_ns=residual)
    seen, _, _ = derive_window_costs([windows])
    assert seen["cuda_api"] == pytest.approx(TRUE_COSTS["cuda_api"] - residual)
    probes = {"driver_launch": {"residual_ns": residual, "ci95_ns": 90.0}, "driver_query": {"residual_ns": 200.0,
                                                                                           "ci95_ns": 50.0}}
    runs = [{"config": WINDOWS, "repetition": 0, "windows": [windows], "pair": 0, "startup": None},
            {"config": RESIDUAL, "repetition": 0, "probes": probes}]
    calibration = derive(runs)
    assert calibration.costs_ns["cuda_api"] == pytest.approx(TRUE_COSTS["cuda_api"])
    assert calibration.costs_ns["gpu_activity"] == pytest.approx(TRUE_COSTS["gpu_activity"])  # above the residual
    assert calibration.cupti_residual_ns == residual and calibration.cupti_residual_ci95_ns == 90.0
    assert calibration.ci95_ns["cuda_api"] == pytest.approx(90.0)  # the window cost's own half-width is 0 here
    cpu_only = derive([runs[0] | {"windows": [windows_with_costs(20)]}, runs[1]])  # no CUDA API cost: nothing to add to
    assert "cuda_api" not in cpu_only.costs_ns and cpu_only.cupti_residual_ns is None


def test_whole_run_pairs_recover_what_continuous_profiling_costs_per_cuda_call():
    from experiments.overhead.validate import window_costs
    from rlscope.calibrate.model import WINDOWS

    windows = windows_with_costs(20, levels=(0, 1, 2, 3, 4))
    runs = [{"config": WINDOWS, "repetition": 0, "windows": [windows], "pair": 0, "startup": None}]
    continuous = 1200.0
    for pair, speed in ((1, 1.0), (2, 1.3)):  # one pair's iterations ran slower, as a profiled process's do
        runs += whole_pair(continuous, speed, windows, 0, pair)
    calibration = derive(runs)
    assert calibration.continuous_ns == pytest.approx(continuous)
    assert calibration.continuous_ci95_ns == pytest.approx(0, abs=1e-6)
    assert calibration.costs_ns["cuda_api"] == pytest.approx(TRUE_COSTS["cuda_api"] + continuous)
    assert window_costs(calibration)["cuda_api"] == pytest.approx(TRUE_COSTS["cuda_api"])  # what windows pay
    assert calibration.startup_ns == pytest.approx(1e9)  # the start-up pairs are unchanged by it
    without = derive(runs[:1] + [whole_pair(0.0, 1.0, windows, 0, 1)[0]])  # no profiled whole run: not measured
    assert without.continuous_ns is None and without.costs_ns["cuda_api"] == pytest.approx(TRUE_COSTS["cuda_api"])
    cpu_only = derive([runs[0] | {"windows": [windows_with_costs(20)]}, *runs[1:]])  # no CUDA API cost
    assert cpu_only.continuous_ns is None and "cuda_api" not in cpu_only.costs_ns


def test_noise_gives_an_interval_and_one_repetition_gives_none():
    runs = runs_with_costs([2_000_000_000, 2_000_000_000, 2_000_000_000])
    runs[2]["wall_ns"] += 3_000_000  # repetition 0's transitions run was slower
    costs, ci, _ = derive_costs(runs)
    assert ci["python_call"] > 0 and ci["annotation"] == pytest.approx(0, abs=1e-6)
    _, ci_single, reps = derive_costs(runs_with_costs([2_000_000_000]))
    assert reps == 1 and all(v is None for v in ci_single.values())


def test_a_round_missing_a_run_is_left_out():
    runs = [r for r in runs_with_costs([1_000_000_000, 1_000_000_000])
            if not (r["repetition"] == 1 and r["config"] == "annotations")]
    _, _, reps = derive_costs(runs)
    assert reps == 1
    with pytest.raises(RlscopeError, match="no complete round"):
        derive_costs([{"config": "annotations", "repetition": 0, "wall_ns": 1, "counts": {}}])


def test_start_up_cost_is_what_a_profiled_start_up_adds_beyond_its_events():
    from rlscope.calibrate.estimate import startup_cost

    costs = {"annotation": 100.0, "python_call": 1000.0}
    # Profiled start-ups: 50 ms of uninstrumented work, 4 ms (+-1) that only the start-up pays,
    # 300 intercepted calls and 10 annotations, 2 ms of trace writes.
    pairs = [({"raw_ns": base + extra + 300 * 1000 + 10 * 100 + 2_000_000, "writes_ns": 2_000_000,
               "events": {"python_call": 300, "annotation": 10, "cuda_api": 0}}, base)
             for base, extra in ((50e6, 3e6), (55e6, 4e6), (48e6, 5e6))]
    mean, half = startup_cost(pairs, costs)
    assert mean == pytest.approx(4e6) and half == pytest.approx(4.303 * 1e6 / 3 ** 0.5)
    assert startup_cost(pairs[:1], costs) == (pytest.approx(3e6), None)  # one pair: no interval
    assert startup_cost([], costs) == (None, None)
    # a negative event cost is not added, as in correction
    assert startup_cost(pairs, {**costs, "python_call": -1.0})[0] == pytest.approx(4e6 + 300 * 1000)


def test_negative_costs_are_not_added():
    breakdown, transitions = breakdown_tables()
    out = correct_breakdown(breakdown, transitions, calibration_of(annotation=-500))
    assert (out["corrected_ns"] == out["time_ns"]).all()
