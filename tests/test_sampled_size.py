"""bench/sampled_size.py: growth per hour from a timeline, and sampled shares against full traces."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

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
