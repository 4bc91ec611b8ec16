"""Overhead calibration and correction: costs recovered from runs with known injected costs,
correction bounds, the calibration file, and calibrate -> analyze --corrected end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from rlscope.analyze.calibration import (
    CONFIGS,
    Calibration,
    CalibrationWarning,
    correct_breakdown,
    correction_uncertainty_pct,
    cost_correlation,
    derive_costs,
    derive_window_costs,
    machine_fingerprint,
)
from rlscope.collect.cupti import gpu_unavailable_reason
from rlscope.errors import RlscopeError

TRUE_COSTS = {"annotation": 400.0, "python_call": 1500.0, "cuda_api": 2500.0, "gpu_activity": 900.0}
COUNTS = {"annotation": 20_000, "python_call": 90_000, "cuda_api": 30_000, "gpu_activity": 12_000}


def _runs(base_ns: list[int]) -> list[dict]:
    """Runs whose wall time is exactly base + sum(count x true cost) of the layers switched on."""
    runs = []
    for rep, base in enumerate(base_ns):
        on: dict[str, int] = {}  # counts above MIN_EVENTS, so every layer gets a cost
        for config, (_, _, event) in CONFIGS.items():
            if event is not None:
                on[event] = COUNTS[event]
            wall = base + sum(n * TRUE_COSTS[e] for e, n in on.items())
            runs.append({"config": config, "repetition": rep, "wall_ns": int(wall), "counts": dict(on)})
    return runs


def test_injected_costs_are_recovered_exactly():
    costs, ci, reps = derive_costs(_runs([2_000_000_000, 2_100_000_000, 1_950_000_000]))
    assert reps == 3
    for event, cost in TRUE_COSTS.items():
        assert costs[event] == pytest.approx(cost)
        assert ci[event] == pytest.approx(0, abs=1e-6)  # the base drifts, but paired rounds cancel it


def _windows(blocks: int, levels: tuple[int, ...] = (0, 1, 2), annotations_per_it: float = 2.0,
             calls_per_it: float = 3.0, seed: int = 0, noise_ns: dict[int, float] | None = None,
             residual_ns: float = 0.0) -> list[list[float]]:
    """Alternating windows in palindromic blocks whose time per iteration is a drifting base (a
    jump between blocks, linear within one) plus the true costs of the events switched on
    (per iteration: 1.5 CUDA API calls from level 3, 0.5 kernels from level 4), plus, per level
    in ``noise_ns``, normal noise of that standard deviation on each of its windows. Below level
    3 the same 1.5 CUDA calls, unrecorded, cost ``residual_ns`` each (what CUPTI's recording
    leaves on every call), so the windows see the CUDA API cost less that."""
    import numpy as np

    rng = np.random.default_rng(seed)
    windows = []
    for _ in range(blocks + 1):  # the first block is warm-up and left out
        base, slope = rng.uniform(8_000, 20_000), rng.uniform(-300, 300)
        for i, level in enumerate(levels + levels[::-1]):
            per_it = _events_per_iteration(level, annotations_per_it, calls_per_it)
            tau = base + slope * i + sum(n * TRUE_COSTS[e] for e, n in per_it.items())
            tau += 1.5 * residual_ns if level < 3 else 0.0
            tau += rng.normal(0, (noise_ns or {}).get(level, 0.0))
            windows.append([level, tau * 500, 500, *(n * 500 for n in per_it.values())])
    return windows


def _events_per_iteration(level: int, annotations_per_it: float = 2.0, calls_per_it: float = 3.0) -> dict[str, float]:
    return {"annotation": annotations_per_it if level >= 1 else 0.0, "python_call": calls_per_it if level >= 2 else 0.0,
            "cuda_api": 1.5 if level >= 3 else 0.0, "gpu_activity": 0.5 if level >= 4 else 0.0}


def test_window_costs_are_recovered_exactly_despite_drift():
    costs, ci, blocks = derive_window_costs([_windows(30), _windows(20, seed=1)])
    assert blocks == 50
    for event in ("annotation", "python_call"):
        assert costs[event] == pytest.approx(TRUE_COSTS[event])
        assert ci[event] == pytest.approx(0, abs=1e-6)  # linear drift within a block cancels


def test_gpu_layer_costs_are_recovered_from_windows_too():
    costs, ci, blocks = derive_window_costs([_windows(20, levels=(0, 1, 2, 3, 4))])
    assert blocks == 20
    for event, cost in TRUE_COSTS.items():
        assert costs[event] == pytest.approx(cost)
        assert ci[event] == pytest.approx(0, abs=1e-6)


def test_windows_of_an_older_layout_without_gpu_columns_still_derive():
    rows = [w[:5] for w in _windows(10)]
    costs, _, _ = derive_window_costs([rows])
    assert costs["python_call"] == pytest.approx(TRUE_COSTS["python_call"])


def test_windows_without_annotations_switched_give_only_the_call_cost():
    costs, _, _ = derive_window_costs([_windows(30, levels=(1, 2))])
    assert set(costs) == {"python_call"} and costs["python_call"] == pytest.approx(TRUE_COSTS["python_call"])
    costs, _, _ = derive_window_costs([_windows(30, calls_per_it=0.0)])  # no calls switched in: no cost
    assert set(costs) == {"annotation"}


def test_window_validation_of_exact_costs_is_zero_error():
    from experiments.overhead.validate import window_errors

    result = window_errors([_windows(20, levels=(0, 2))], TRUE_COSTS)
    assert result["window_corrected_error_pct"] == pytest.approx(0, abs=1e-9)
    assert result["window_raw_error_pct"] > 20 and result["window_blocks"] == 20
    under = window_errors([_windows(20, levels=(0, 2))], {"python_call": TRUE_COSTS["python_call"]})
    assert under["window_corrected_error_pct"] > 0  # the annotations' cost left in


def test_window_validation_scales_only_the_cpu_side_costs_by_speed():
    from experiments.overhead.validate import window_errors

    # Calibrated on a machine twice as fast: CPU-side costs half as large, GPU-side ones the same.
    slower = {e: c / 2 if e in ("annotation", "python_call") else c for e, c in TRUE_COSTS.items()}
    windows = [_windows(20, levels=(0, 4))]
    assert window_errors(windows, slower, speed=2.0)["window_corrected_error_pct"] == pytest.approx(0, abs=1e-9)
    assert window_errors(windows, slower)["window_corrected_error_pct"] > 0


def test_the_residual_of_cuptis_recording_completes_the_cuda_api_cost_the_windows_see():
    from rlscope.collect.calibrate import RESIDUAL, WINDOWS, _derive

    residual = 800.0
    windows = _windows(20, levels=(0, 1, 2, 3, 4), residual_ns=residual)
    seen, _, _ = derive_window_costs([windows])
    assert seen["cuda_api"] == pytest.approx(TRUE_COSTS["cuda_api"] - residual)
    probes = {"driver_launch": {"residual_ns": residual, "ci95_ns": 90.0}, "driver_query": {"residual_ns": 200.0,
                                                                                           "ci95_ns": 50.0}}
    runs = [{"config": WINDOWS, "repetition": 0, "windows": [windows], "pair": 0, "startup": None},
            {"config": RESIDUAL, "repetition": 0, "probes": probes}]
    calibration = _derive(runs)
    assert calibration.costs_ns["cuda_api"] == pytest.approx(TRUE_COSTS["cuda_api"])
    assert calibration.costs_ns["gpu_activity"] == pytest.approx(TRUE_COSTS["gpu_activity"])  # above the residual
    assert calibration.cupti_residual_ns == residual and calibration.cupti_residual_ci95_ns == 90.0
    assert calibration.ci95_ns["cuda_api"] == pytest.approx(90.0)  # the window cost's own half-width is 0 here
    cpu_only = _derive([runs[0] | {"windows": [_windows(20)]}, runs[1]])  # no CUDA API cost: nothing to add to
    assert "cuda_api" not in cpu_only.costs_ns and cpu_only.cupti_residual_ns is None


def _whole_pair(continuous_ns: float, speed_scale: float, windows: list[list[float]], rep: int, pair: int
                ) -> list[dict]:
    """A start-up pair run whole: an uninstrumented run and a profiled one whose time from its
    first step is the uninstrumented one's, plus its writes, plus its events at the true costs
    (the CPU-side ones scaled by how much slower its iterations ran than calibration's, with the
    same events per iteration), plus ``continuous_ns`` per CUDA API call."""
    from rlscope.analyze.calibration import applied_costs, window_iteration
    from rlscope.collect.calibrate import PROFILED_STARTUP, STARTUP

    base = 30e9 + 1e9 * (rep + pair)  # the machine drifts between pairs
    events = {"annotation": 4_000, "python_call": 6_000, "cuda_api": 3_000, "gpu_activity": 1_000}
    writes = 2e8
    raw = base + writes + continuous_ns * events["cuda_api"] + sum(
        n * applied_costs(TRUE_COSTS, speed_scale)[e] for e, n in events.items())
    iteration_ns, cpu_events = window_iteration([windows])
    startup = {"raw_ns": 5e9, "writes_ns": 0, "events": dict.fromkeys(events, 0)}
    return [{"config": STARTUP, "repetition": rep, "pair": pair, "startup_ns": 4e9, "steady_ns": base},
            {"config": PROFILED_STARTUP, "repetition": rep, "pair": pair, "startup": startup,
             "steady": {"raw_ns": raw, "writes_ns": writes, "events": events},
             "iteration": (iteration_ns * speed_scale, cpu_events)}]


def test_whole_run_pairs_recover_what_continuous_profiling_costs_per_cuda_call():
    from experiments.overhead.validate import window_costs
    from rlscope.collect.calibrate import WINDOWS, _derive

    windows = _windows(20, levels=(0, 1, 2, 3, 4))
    runs = [{"config": WINDOWS, "repetition": 0, "windows": [windows], "pair": 0, "startup": None}]
    continuous = 1200.0
    for pair, speed in ((1, 1.0), (2, 1.3)):  # one pair's iterations ran slower, as a profiled process's do
        runs += _whole_pair(continuous, speed, windows, 0, pair)
    calibration = _derive(runs)
    assert calibration.continuous_ns == pytest.approx(continuous)
    assert calibration.continuous_ci95_ns == pytest.approx(0, abs=1e-6)
    assert calibration.costs_ns["cuda_api"] == pytest.approx(TRUE_COSTS["cuda_api"] + continuous)
    assert window_costs(calibration)["cuda_api"] == pytest.approx(TRUE_COSTS["cuda_api"])  # what windows pay
    assert calibration.startup_ns == pytest.approx(1e9)  # the start-up pairs are unchanged by it
    without = _derive(runs[:1] + [_whole_pair(0.0, 1.0, windows, 0, 1)[0]])  # no profiled whole run: not measured
    assert without.continuous_ns is None and without.costs_ns["cuda_api"] == pytest.approx(TRUE_COSTS["cuda_api"])
    cpu_only = _derive([runs[0] | {"windows": [_windows(20)]}, *runs[1:]])  # no CUDA API cost: nothing measured
    assert cpu_only.continuous_ns is None and "cuda_api" not in cpu_only.costs_ns


def test_the_windows_check_takes_the_residual_off_its_unprofiled_windows():
    from experiments.overhead.validate import window_errors

    windows = [_windows(20, levels=(0, 4), residual_ns=800.0)]
    exact = window_errors(windows, TRUE_COSTS, unprofiled_ns={"cuda_api": 800.0})
    assert exact["window_corrected_error_pct"] == pytest.approx(0, abs=1e-9)
    assert window_errors(windows, TRUE_COSTS)["window_corrected_error_pct"] < 0  # against the slowed windows


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU is here: the probe would succeed")
def test_a_failed_residual_probe_is_reported_with_its_log(tmp_path):
    from rlscope.collect.calibrate import _measure_residual

    result, why = _measure_residual(tmp_path / "residual", timeout_s=120)  # no GPU or libcupti here
    assert result is None and "exit code 1" in why and str(tmp_path / "residual" / "log.txt") in why
    assert "rlscope: " in (tmp_path / "residual" / "log.txt").read_text()


def test_noise_gives_an_interval_and_one_repetition_gives_none():
    runs = _runs([2_000_000_000, 2_000_000_000, 2_000_000_000])
    runs[2]["wall_ns"] += 3_000_000  # repetition 0's transitions run was slower
    costs, ci, _ = derive_costs(runs)
    assert ci["python_call"] > 0 and ci["annotation"] == pytest.approx(0, abs=1e-6)
    _, ci_single, reps = derive_costs(_runs([2_000_000_000]))
    assert reps == 1 and all(v is None for v in ci_single.values())


def test_a_round_missing_a_run_is_left_out():
    runs = [r for r in _runs([1_000_000_000, 1_000_000_000])
            if not (r["repetition"] == 1 and r["config"] == "annotations")]
    _, _, reps = derive_costs(runs)
    assert reps == 1
    with pytest.raises(RlscopeError, match="no complete round"):
        derive_costs([{"config": "annotations", "repetition": 0, "wall_ns": 1, "counts": {}}])


def _calibration(**costs: float) -> Calibration:
    return Calibration(costs_ns=costs, ci95_ns=dict.fromkeys(costs), repetitions=3, machine=machine_fingerprint(),
                       command=["python", "train.py"], runs=[])


def _tables():
    keys = dict(process="p[1]", thread="main", phase="default")
    breakdown = pd.DataFrame([
        {**keys, "operation": "inference", "cpu": "Python", "gpu": False, "resources": "Python", "time_ns": 10_000},
        {**keys, "operation": "inference", "cpu": "CUDA API", "gpu": False, "resources": "CUDA API", "time_ns": 4_000},
        {**keys, "operation": "inference", "cpu": "CUDA API", "gpu": True, "resources": "CUDA API+GPU",
         "time_ns": 3_000},
        {**keys, "operation": "inference", "cpu": "none", "gpu": True, "resources": "GPU", "time_ns": 7_000},
        {**keys, "operation": "simulation", "cpu": "Python", "gpu": False, "resources": "Python", "time_ns": 500},
    ])
    transitions = pd.DataFrame([
        {**keys, "operation": "inference", "transition": t, "count": n, "iterations": 1, "per_iteration": n}
        for t, n in (("Annotations", 2), ("Python->Backend", 4), ("Backend->CUDA", 2), ("GPU kernels", 1))
    ] + [{**keys, "operation": "simulation", "transition": "Python->Simulator", "count": 10, "iterations": 1,
          "per_iteration": 10}])
    return breakdown, transitions


def test_correction_takes_each_cost_from_its_layer_and_never_below_zero():
    breakdown, transitions = _tables()
    out = correct_breakdown(breakdown, transitions, _calibration(annotation=100, python_call=1000, cuda_api=2500,
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


ALL_LEVELS = (0, 1, 2, 3, 4)
TOP_CORRECTION = sum(n * TRUE_COSTS[e] for e, n in _events_per_iteration(4).items())


def test_exact_costs_leave_the_correction_certain():
    windows = _windows(10, levels=ALL_LEVELS)
    _, ci, _ = derive_window_costs([windows])
    assert correction_uncertainty_pct([windows], ci, cost_correlation([windows])) == pytest.approx(0, abs=1e-9)


def test_noise_in_a_level_that_two_costs_share_mostly_cancels_in_the_correction():
    # Level 3's time enters the CUDA API cost (level 3 - level 2) and the GPU record's (level 4 -
    # level 3) with opposite signs; a correction of a profiled iteration adds both back together.
    windows = _windows(40, levels=ALL_LEVELS, noise_ns={3: 2_000.0, 4: 200.0})
    _, ci, _ = derive_window_costs([windows])
    per_it = _events_per_iteration(4)
    tau = 14_000 + TOP_CORRECTION
    bound = 100 * sum(n * ci[e] for e, n in per_it.items()) / tau  # the intervals added up
    correlation = cost_correlation([windows])
    assert correlation["cuda_api"]["gpu_activity"] < -0.5
    assert correction_uncertainty_pct([windows], ci, {}) == pytest.approx(bound, rel=0.1)  # no correlations: a bound
    assert 0 < correction_uncertainty_pct([windows], ci, correlation) < bound / 3


def test_the_correction_interval_covers_the_true_correction():
    # Independent noise on the top level: the estimated correction of a profiled iteration
    # (events x median costs) should lie within the reported half-width of the true one in most
    # calibrations (95% nominal; 16 of 20 asked; 18 of these 20 seeds are).
    per_it = _events_per_iteration(4)
    covered = 0
    for seed in range(20):
        windows = _windows(30, levels=ALL_LEVELS, seed=seed, noise_ns={4: 1_500.0})
        costs, ci, _ = derive_window_costs([windows])
        tops = [w for w in windows[10:] if w[0] == 4]
        tau = sum(w[1] for w in tops) / sum(w[2] for w in tops)
        half = correction_uncertainty_pct([windows], ci, cost_correlation([windows])) * tau / 100
        estimated = sum(n * costs[e] for e, n in per_it.items())
        covered += abs(estimated - TOP_CORRECTION) <= half
    assert covered >= 16


def test_correction_uncertainty_is_unknown_without_blocks_or_an_interval():
    windows = _windows(10, levels=ALL_LEVELS, noise_ns={4: 1_000.0})
    _, ci, _ = derive_window_costs([windows])
    correlation = cost_correlation([windows])
    assert correction_uncertainty_pct([windows], {**ci, "cuda_api": None}, correlation) is None  # no interval
    assert correction_uncertainty_pct([], ci, correlation) is None
    assert cost_correlation([_windows(5, levels=ALL_LEVELS)]) == {}  # too few blocks to say: intervals add up
    without_gpu = correction_uncertainty_pct([windows], {e: ci[e] for e in ("annotation", "python_call")}, correlation)
    assert without_gpu < correction_uncertainty_pct([windows], ci, correlation)  # costs not applied add nothing


def test_correction_reports_how_far_the_intervals_move_it():
    breakdown, transitions = _tables()
    calibration = _calibration(annotation=100, python_call=1000, cuda_api=2500, gpu_activity=1000)
    calibration.ci95_ns = {"annotation": 10.0, "python_call": 100.0, "cuda_api": 200.0, "gpu_activity": None}
    out = correct_breakdown(breakdown, transitions, calibration, speed=2.0).set_index(["operation", "resources"])
    # CPU-side half-widths scale with the speed as the costs do: inference 2*10*2 + 4*100*2, simulation 10*100*2
    assert out.loc[("inference", "Python"), "uncertainty_ns"] == 840
    assert out.loc[("simulation", "Python"), "uncertainty_ns"] == 2_000
    assert out.loc[("inference", "CUDA API"), "uncertainty_ns"] == 400  # 2 calls x 200; kernels have no interval
    assert out["uncertainty_ns"].sum() == 3_240


def test_correlated_costs_combine_by_their_correlation_in_an_operations_removal():
    breakdown, transitions = _tables()
    calibration = _calibration(annotation=100, python_call=1000, cuda_api=2500, gpu_activity=1000)
    calibration.ci95_ns = {"annotation": 10.0, "python_call": 100.0, "cuda_api": 200.0, "gpu_activity": 300.0}
    calibration.correlation = {"cuda_api": {"gpu_activity": -1.0}, "gpu_activity": {"cuda_api": -1.0},
                               "annotation": {"python_call": 0.0}, "python_call": {"annotation": 0.0}}
    out = correct_breakdown(breakdown, transitions, calibration).set_index(["operation", "resources"])
    # inference: 2 CUDA API calls x 200 against 1 kernel x 300, opposite errors: |400 - 300|
    assert out.loc[("inference", "CUDA API"), "uncertainty_ns"] == 100
    # independent: sqrt((2 x 10)^2 + (4 x 100)^2)
    assert out.loc[("inference", "Python"), "uncertainty_ns"] == round((20 ** 2 + 400 ** 2) ** 0.5)
    assert out.loc[("inference", "Python"), "corrected_ns"] == 10_000 - 2 * 100 - 4 * 1000  # costs unchanged


def test_start_up_cost_is_what_a_profiled_start_up_adds_beyond_its_events():
    from rlscope.analyze.calibration import startup_cost

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


def test_start_up_cost_comes_off_the_iterating_process_outside_operations():
    breakdown, transitions = _tables()
    other = dict(process="p[1]", thread="main", phase="default", operation="(unannotated)", gpu=False)
    breakdown = pd.concat([breakdown, pd.DataFrame([
        {**other, "cpu": "Python", "resources": "Python", "time_ns": 3_000},
        {**other, "cpu": "Backend", "resources": "Backend", "time_ns": 9_000},
        {**other, "process": "q[2]", "cpu": "Python", "resources": "Python", "time_ns": 9_000},
    ])], ignore_index=True)
    calibration = _calibration(annotation=0.0)
    calibration.startup_ns, calibration.startup_ci95_ns = 1_000.0, 300.0
    out = correct_breakdown(breakdown, transitions, calibration, speed=2.0, startup_process="p[1]")
    unannotated = out[out["operation"] == "(unannotated)"].set_index(["process", "cpu"])
    assert unannotated.loc[("p[1]", "Python"), "corrected_ns"] == 1_000  # 3000 - 2 x 1000 (scaled by speed)
    assert unannotated.loc[("p[1]", "Python"), "uncertainty_ns"] == 600
    assert unannotated.loc[("p[1]", "Backend"), "corrected_ns"] == 9_000  # imports' Python time only
    assert unannotated.loc[("q[2]", "Python"), "corrected_ns"] == 9_000  # not the process that iterates
    calibration.startup_ns = 1e9
    clipped = correct_breakdown(breakdown, transitions, calibration, startup_process="p[1]")
    assert (clipped["corrected_ns"] >= 0).all()
    assert correct_breakdown(breakdown, transitions, calibration)["corrected_ns"].equals(
        correct_breakdown(breakdown, transitions, _calibration(annotation=0.0))["corrected_ns"])


def test_start_up_runs_end_at_their_first_step(tmp_path):
    from rlscope.analyze.calibration import iterating_process, profiled_startup
    from rlscope.collect.launch import run_profiled
    from rlscope.trace.reader import read_trace

    # the first step inside an open operation, as SB3's loop runs inside "learn"
    script = ("import time, rlscope\ntime.sleep(0.05)\nwith rlscope.operation('loop'):\n"
              "    rlscope.step()\n    print('past the first step')\n")
    for name, wall_only in (("uninstrumented", True), ("profiled", False)):
        log = tmp_path / f"{name}.txt"
        with log.open("w") as out:
            _, code = run_profiled([sys.executable, "-c", script], tmp_path / name, wall_only=wall_only,
                                   gpu=False, until_first_step=True, stdout=out)
        assert code == 0 and "past the first step" not in log.read_text() and "Error" not in log.read_text()
        (process,) = read_trace(tmp_path / name)
        assert process.meta["complete"]
        if wall_only:
            assert process.meta["first_step_ns"] >= process.meta["start_ns"] + 50_000_000
        else:
            startup = profiled_startup(iterating_process([process]))
            assert startup["raw_ns"] >= 50_000_000 and startup["events"]["annotation"] == 0


def test_negative_costs_are_not_added():
    breakdown, transitions = _tables()
    out = correct_breakdown(breakdown, transitions, _calibration(annotation=-500))
    assert (out["corrected_ns"] == out["time_ns"]).all()


def test_calibration_file_round_trip_and_mismatch_warning(tmp_path):
    cal = _calibration(annotation=123.0)
    cal.save(tmp_path / "calibration.json")
    back = Calibration.load(tmp_path / "calibration.json")
    assert back == cal
    back.check_fits({"host": cal.machine["host"], "rlscope_version": cal.machine["rlscope"]})  # silent
    with pytest.warns(CalibrationWarning, match="host=.*trace has 'other-box'"):
        back.check_fits({"host": "other-box", "rlscope_version": cal.machine["rlscope"]})
    with pytest.warns(CalibrationWarning, match="rlscope"):
        back.check_fits({"host": cal.machine["host"], "rlscope_version": "0.0.1"})
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(RlscopeError, match="not a calibration file"):
        Calibration.load(tmp_path / "bad.json")


@pytest.mark.slow
def test_calibrate_then_analyze_corrected(tmp_path, cli_env):
    script = tmp_path / "loop.py"
    script.write_text(
        "import math, rlscope\n"
        "import numpy as np\n"
        "for i in range(60000):\n"  # ~60 windows of 1 ms per run: blocks to spare on a fast machine
        "    rlscope.step()\n"
        "    with rlscope.operation('work'):\n"
        "        np.zeros(2); math.floor(i / 3)\n")
    cal_dir = tmp_path / "cal"
    run = subprocess.run([sys.executable, "-m", "rlscope.cli", "calibrate", "--output", str(cal_dir), "-r", "2",
                          "--no-gpu", "--window-ms", "1", "--", sys.executable, str(script)], capture_output=True,
                         text=True, env=cli_env, timeout=300)
    assert run.returncode == 0, run.stderr
    cal = json.loads((cal_dir / "calibration.json").read_text())
    assert {r["config"] for r in cal["runs"]} == {"windows", "startup", "startup-profiled"} and cal["blocks"] >= 4
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
    assert "(from the costs' 95% intervals)" in out.stdout
    table = pd.read_csv(trace / "analysis" / "breakdown.csv")
    assert {"corrected_ns", "overhead_ns"} <= set(table.columns)
    assert (table["corrected_ns"] >= 0).all() and (table["corrected_ns"] <= table["time_ns"]).all()

    missing = subprocess.run([sys.executable, "-m", "rlscope.cli", "analyze", str(trace), "--corrected"],
                             capture_output=True, text=True, env=cli_env, timeout=300)
    assert missing.returncode == 2 and "rlscope calibrate" in missing.stderr and "Traceback" not in missing.stderr


def test_extend_adds_repetitions_to_a_calibration_and_refuses_another_command(tmp_path, cli_env):
    script = tmp_path / "loop.py"
    script.write_text("import rlscope\nimport numpy as np\nfor i in range(20000):\n    rlscope.step()\n"
                      "    with rlscope.operation('work'):\n        np.zeros(2)\n")
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
    assert after["blocks"] > before["blocks"]

    other = calibrate("--extend", cmd=["--", sys.executable, "-c", "pass"])
    assert other.returncode == 2 and "not `" in other.stderr and "Traceback" not in other.stderr
    assert json.loads((cal_dir / "calibration.json").read_text()) == after  # nothing already written is lost


@pytest.mark.slow
def test_precision_adds_runs_up_to_a_cap(tmp_path, cli_env):
    script = tmp_path / "loop.py"
    script.write_text("import rlscope\nimport numpy as np\nfor i in range(5000):\n    rlscope.step()\n"
                      "    np.zeros(2); sum(range(500))\n")
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


def test_speed_factor_compares_like_iterations_and_scales_only_the_cpu_side_costs():
    from rlscope.analyze.calibration import speed_factor

    cal = _calibration(annotation=0.0, python_call=100.0, cuda_api=1000.0)
    cal.iteration_ns, cal.cpu_events_per_iteration = 10_000.0, 5.0
    assert speed_factor(cal, (15_000.0, 5.2)) == pytest.approx(1.5)
    assert speed_factor(cal, (15_000.0, 7.0)) is None  # other work per iteration: not a speed
    assert speed_factor(cal, (310_000.0, 5.0)) is None  # warm-up iterations, not a machine 31x slower
    assert speed_factor(cal, (3_000.0, 5.0)) is None
    assert speed_factor(cal, None) is None
    cal.iteration_ns = 0.0  # calibrated with whole runs: no iterations to compare
    assert speed_factor(cal, (15_000.0, 5.0)) is None
    breakdown, transitions = _tables()
    out = correct_breakdown(breakdown, transitions, cal, speed=2.0).set_index(["operation", "resources"])
    assert out.loc[("inference", "Python"), "corrected_ns"] == 10_000 - 4 * 200  # scaled
    assert out.loc[("inference", "CUDA API"), "corrected_ns"] == 4_000 - 2 * 1000  # not scaled


def test_trace_iteration_leaves_out_trace_writes_and_the_last_span():
    from rlscope.analyze.calibration import trace_iteration
    from rlscope.trace.schema import Kind
    from tests.synthetic import CALL, MAIN, OP, STEP, make_trace

    ms = 1_000_000
    rows = []
    for i in range(100):  # 1 ms iterations, each an operation with two intercepted calls
        t = i * ms
        rows += [(STEP, t, t + ms, "default"), (OP, t + 10, t + 500, "step"),
                 (CALL, t + 20, t + 30, "a", 1), (CALL, t + 40, t + 50, "b", 1)]
    rows += [(STEP, 100 * ms, 150 * ms, "default")]  # the last: ends with profiling
    rows += [(Kind.PROFILER_WRITE, t, t + 100_000, "rlscope: trace write") for t in range(5 * ms, 100 * ms, 10 * ms)]
    rows += [(Kind.PROFILER_WRITE, 3 * ms, 8 * ms, "rlscope: trace write", 0, 0, MAIN + 1)]  # another thread's
    trace = make_trace(rows, end=150 * ms)
    iteration_ns, events = trace_iteration([trace], span_ns=10 * ms)
    assert iteration_ns == pytest.approx((10 * ms - 100_000) / 10)  # 10 iterations per span, less its write
    assert events == pytest.approx(3.0)
    assert trace_iteration([make_trace([(STEP, 0, 10, "default")])]) is None


def test_median_interval_is_distribution_free_and_ignores_outliers():
    from rlscope.analyze.calibration import median_ci95

    assert median_ci95(list(range(1, 11))) == (5.5, 3.5)  # between the 2nd and 9th of 10
    assert median_ci95([1.0, 2.0, 3.0, 4.0, 5.0])[1] is None  # 5 values: no 95% interval exists
    assert median_ci95([100.0] * 9 + [1e6]) == (100.0, 0.0)


def test_median_interval_of_many_blocks():
    from rlscope.analyze.calibration import median_ci95

    median, half = median_ci95([float(i) for i in range(2001)])  # a long calibration: thousands of blocks
    assert median == 1000.0 and 40 < half < 50  # about 1.96 * sqrt(2001) / 2 order statistics each side


def test_window_costs_are_robust_to_a_block_slowed_by_another_process():
    windows = _windows(30)
    windows[6 * 7 + 2][1] *= 3  # one transitions window of block 7 ran three times as long
    costs, _, _ = derive_window_costs([windows])
    assert costs["python_call"] == pytest.approx(TRUE_COSTS["python_call"])


def test_trace_writes_are_removed_whole_and_left_out_of_windows():
    import numpy as np

    from rlscope.analyze.calibration import write_time_in
    from rlscope.trace.schema import Kind

    breakdown, transitions = _tables()
    keys = dict(process="p[1]", thread="main", phase="default")
    breakdown = pd.concat([breakdown, pd.DataFrame([{**keys, "operation": "inference", "cpu": "Profiler",
                                                     "gpu": False, "resources": "Profiler", "time_ns": 2_500}])])
    out = correct_breakdown(breakdown, transitions, _calibration()).set_index(["operation", "resources"])
    assert out.loc[("inference", "Profiler"), "corrected_ns"] == 0
    assert out.loc[("inference", "Profiler"), "overhead_ns"] == 2_500
    events = pd.DataFrame({"kind": [int(Kind.PROFILER_WRITE)] * 2 + [int(Kind.CPU_CALL)], "tid": [1, 2, 1],
                           "start_ns": [90, 150, 100], "end_ns": [130, 160, 200]})
    spans = np.array([[0, 0, 100, 5], [2, 100, 200, 5]])
    assert write_time_in(spans, events, tid=1).tolist() == [10, 30]


def test_a_trace_far_from_the_calibrations_speed_warns():
    import warnings

    from rlscope.analyze.calibration import check_speed

    with pytest.warns(CalibrationWarning, match="1.60x as long"):
        check_speed(1.6)
    with pytest.warns(CalibrationWarning, match="cannot be compared with the calibration"):
        check_speed(None)
    with pytest.warns(CalibrationWarning, match="0.50x"):
        check_speed(0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_speed(1.1)


def test_uninstrumented_run_remembers_only_its_first_step(tmp_path):
    from rlscope.analyze.calibration import first_step_ns
    from rlscope.collect.launch import run_profiled
    from rlscope.trace.reader import read_trace

    script = "import time, rlscope\ntime.sleep(0.05)\nfor _ in range(3): rlscope.step()\n"
    _, code = run_profiled([sys.executable, "-c", script], tmp_path, wall_only=True)
    assert code == 0
    (process,) = read_trace(tmp_path)
    first = first_step_ns(process)
    assert process.meta["start_ns"] + 50_000_000 <= first <= process.meta["end_ns"]


class _Process:
    def __init__(self, meta: dict, events: pd.DataFrame | None = None) -> None:
        self.meta, self.events = meta, events


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
    calibration = _calibration(annotation=100)
    for command, error in ((["python", "-m", "experiments.overhead.loops", "jax_loop", "100000"], "not for gym_numpy"),
                           (["python", "train.py"], "not for gym_numpy"),
                           (["python", "-m", "experiments.overhead.loops", "gym_numpy", "200000"], "another length")):
        calibration.command = command
        calibration.save(path)
        with pytest.raises(ValueError, match=error):
            reused_calibration(path, "gym_numpy", 200_000)
    calibration.command = ["python", "-m", "experiments.overhead.loops", "gym_numpy", "100000"]
    calibration.save(path)
    assert reused_calibration(path, "gym_numpy", 200_000).costs_ns == {"annotation": 100}


def test_a_cached_calibration_is_made_once_per_command_and_machine(tmp_path, monkeypatch):
    import rlscope.collect.calibrate as calibrate_module

    made = []

    def fake_calibrate(command, output, progress=None, **options):
        made.append(command)
        calibration = _calibration(python_call=1000.0)
        calibration.command = list(command)
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


def test_a_failed_calibration_is_not_cached(tmp_path, monkeypatch):
    import rlscope.collect.calibrate as calibrate_module

    def failing(command, output, progress=None, **options):
        output.mkdir(parents=True, exist_ok=True)
        _calibration(python_call=1.0).save(output / "calibration.json")
        return _calibration(python_call=1.0), ["repetition 1, windows: exit 1 (see log.txt)"]

    monkeypatch.setattr(calibrate_module, "calibrate", failing)
    with pytest.raises(RlscopeError, match="calibration runs failed: repetition 1"):
        calibrate_module.cached_calibration(["python", "loop.py"], lambda: ["python", "loop.py"], tmp_path)
    assert not list(tmp_path.glob("*/calibration.json"))


def test_profiled_collection_with_calibrate_corrects_its_breakdown(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from experiments.datacollection.profiled import MIN_CALIBRATION_BLOCKS, profiled_collection

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    result = profiled_collection("torch", 16, 1, iterations=5, device="cpu", calibrate=True)
    layers = {row["layer"]: row for row in result["rows"] if row["table"] == "breakdown"}
    assert "Python" in layers and all("corrected_seconds_per_iteration" in r for r in layers.values())
    assert sum(r["corrected_share"] for r in layers.values()) == pytest.approx(1.0)
    assert sum(r["corrected_seconds_per_iteration"] for r in layers.values()) == pytest.approx(
        result["corrected_iteration_s"])
    assert result["calibration_uncertainty_pct"] == result["calibration_uncertainty_pct"]  # an interval, not NaN
    made = list((tmp_path / "rlscope" / "calibration").glob("*/calibration.json"))
    calibration = Calibration.load(made[0])
    command = calibration.command
    assert command[-5:-2] == ["torch", "16", "1"] and int(command[-2]) >= 10  # the loop, at least twice as long
    # 5 profiled iterations can all be warm-up (16 ms against 0.2 ms later): a calibration sized
    # from them alone had no complete block of windows, and no interval
    assert calibration.blocks >= MIN_CALIBRATION_BLOCKS
    profiled_collection("torch", 16, 1, iterations=5, device="cpu", calibrate=True)
    assert len(list((tmp_path / "rlscope" / "calibration").iterdir())) == 1  # the second run reused it


def test_a_calibration_sized_from_warm_up_iterations_is_made_again_longer(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from experiments.datacollection.profiled import MIN_CALIBRATION_BLOCKS, profiled_collection
    from rlscope.analyze import calibration as analysis

    measure = analysis.trace_iteration
    # sized from iterations 10x slower than even the warm-up's 16 ms: far too few blocks at first
    monkeypatch.setattr(analysis, "trace_iteration", lambda processes: (160e6, measure(processes)[1]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    result = profiled_collection("torch", 16, 1, iterations=5, device="cpu", calibrate=True)
    (made,) = (tmp_path / "rlscope" / "calibration").glob("*/calibration.json")
    calibration = Calibration.load(made)
    assert int(calibration.command[-2]) > 8.0 / 160e-3  # longer than that sizing called for
    assert calibration.blocks >= MIN_CALIBRATION_BLOCKS
    assert result["calibration_uncertainty_pct"] == result["calibration_uncertainty_pct"]


def test_the_breakdown_figure_says_whether_it_is_corrected():
    from rlscope.plot.datacollection import breakdown_vs_fused_steps

    rows = pd.DataFrame([{"status": "ok", "table": "breakdown", "backend": "torch", "num_envs": 16, "fused_steps": k,
                          "layer": layer, "seconds_per_iteration": s, "corrected_seconds_per_iteration": s / 2}
                         for k in (1, 10) for layer, s in (("Python", 2e-4), ("Backend", 1e-4))])
    title = breakdown_vs_fused_steps(rows, {"scale": "quick"})._suptitle.get_text()
    assert "corrected for profiling's overhead" in title
    raw = breakdown_vs_fused_steps(rows.drop(columns="corrected_seconds_per_iteration"), {"scale": "quick"})
    assert "as profiled, overhead included" in raw._suptitle.get_text()
