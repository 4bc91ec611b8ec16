"""Costs from alternating windows: exact under drift, robust to outliers, and how uncertain a corrected iteration is."""

from __future__ import annotations


import pytest

from rlscope.calibrate.window_costs import correction_uncertainty_pct, cost_correlation, derive_window_costs
from tests.calibration_helpers import (
    ALL_LEVELS,
    TOP_CORRECTION,
    TRUE_COSTS,
    events_per_iteration,
    windows_with_costs,
)


def test_window_costs_are_recovered_exactly_despite_drift():
    costs, ci, blocks = derive_window_costs([windows_with_costs(30), windows_with_costs(20, seed=1)])
    assert blocks == 50
    for event in ("annotation", "python_call"):
        assert costs[event] == pytest.approx(TRUE_COSTS[event])
        assert ci[event] == pytest.approx(0, abs=1e-6)  # linear drift within a block cancels


def test_gpu_layer_costs_are_recovered_from_windows_too():
    costs, ci, blocks = derive_window_costs([windows_with_costs(20, levels=(0, 1, 2, 3, 4))])
    assert blocks == 20
    for event, cost in TRUE_COSTS.items():
        assert costs[event] == pytest.approx(cost)
        assert ci[event] == pytest.approx(0, abs=1e-6)


def test_windows_of_an_older_layout_without_gpu_columns_stillderive():
    rows = [w[:5] for w in windows_with_costs(10)]
    costs, _, _ = derive_window_costs([rows])
    assert costs["python_call"] == pytest.approx(TRUE_COSTS["python_call"])


def test_windows_without_annotations_switched_give_only_the_call_cost():
    costs, _, _ = derive_window_costs([windows_with_costs(30, levels=(1, 2))])
    assert set(costs) == {"python_call"} and costs["python_call"] == pytest.approx(TRUE_COSTS["python_call"])
    costs, _, _ = derive_window_costs([windows_with_costs(30, calls_per_it=0.0)])  # no calls switched in: no cost
    assert set(costs) == {"annotation"}


def test_window_costs_are_robust_to_a_block_slowed_by_another_process():
    windows = windows_with_costs(30)
    windows[6 * 7 + 2][1] *= 3  # one transitions window of block 7 ran three times as long
    costs, _, _ = derive_window_costs([windows])
    assert costs["python_call"] == pytest.approx(TRUE_COSTS["python_call"])


def test_exact_costs_leave_the_correction_certain():
    windows = windows_with_costs(10, levels=ALL_LEVELS)
    _, ci, _ = derive_window_costs([windows])
    assert correction_uncertainty_pct([windows], ci, cost_correlation([windows])) == pytest.approx(0, abs=1e-9)


def test_noise_in_a_level_that_two_costs_share_mostly_cancels_in_the_correction():
    # Level 3's time enters the CUDA API cost (level 3 - level 2) and the GPU record's (level 4 -
    # level 3) with opposite signs; a correction of a profiled iteration adds both back together.
    windows = windows_with_costs(40, levels=ALL_LEVELS, noise_ns={3: 2_000.0, 4: 200.0})
    _, ci, _ = derive_window_costs([windows])
    per_it = events_per_iteration(4)
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
    per_it = events_per_iteration(4)
    covered = 0
    for seed in range(20):
        windows = windows_with_costs(30, levels=ALL_LEVELS, seed=seed, noise_ns={4: 1_500.0})
        costs, ci, _ = derive_window_costs([windows])
        tops = [w for w in windows[10:] if w[0] == 4]
        tau = sum(w[1] for w in tops) / sum(w[2] for w in tops)
        half = correction_uncertainty_pct([windows], ci, cost_correlation([windows])) * tau / 100
        estimated = sum(n * costs[e] for e, n in per_it.items())
        covered += abs(estimated - TOP_CORRECTION) <= half
    assert covered >= 16


def test_correction_uncertainty_is_unknown_without_blocks_or_an_interval():
    windows = windows_with_costs(10, levels=ALL_LEVELS, noise_ns={4: 1_000.0})
    _, ci, _ = derive_window_costs([windows])
    correlation = cost_correlation([windows])
    assert correction_uncertainty_pct([windows], {**ci, "cuda_api": None}, correlation) is None  # no interval
    assert correction_uncertainty_pct([], ci, correlation) is None
    assert cost_correlation([windows_with_costs(5, levels=ALL_LEVELS)]) == {}  # too few blocks to say: intervals add up
    without_gpu = correction_uncertainty_pct([windows], {e: ci[e] for e in ("annotation", "python_call")}, correlation)
    assert without_gpu < correction_uncertainty_pct([windows], ci, correlation)  # costs not applied add nothing
