"""A trace's speed against its calibration's."""

from __future__ import annotations

from dataclasses import replace


import pytest

from rlscope.calibrate import CalibrationWarning
from rlscope.calibrate.correct import correct_breakdown
from tests.calibration_helpers import (
    breakdown_tables,
    calibration_of,
)


def test_speed_factor_compares_like_iterations_and_scales_only_the_cpu_side_costs():
    from rlscope.calibrate.speed import speed_factor

    cal = calibration_of(annotation=0.0, python_call=100.0, cuda_api=1000.0)
    cal = replace(cal, iteration_ns=10_000.0, cpu_events_per_iteration=5.0)
    assert speed_factor(cal, (15_000.0, 5.2)) == pytest.approx(1.5)
    assert speed_factor(cal, (15_000.0, 7.0)) is None  # other work per iteration: not a speed
    assert speed_factor(cal, (310_000.0, 5.0)) is None  # warm-up iterations, not a machine 31x slower
    assert speed_factor(cal, (3_000.0, 5.0)) is None
    assert speed_factor(cal, None) is None
    cal = replace(cal, iteration_ns=0.0)  # calibrated with whole runs: no iterations to compare
    assert speed_factor(cal, (15_000.0, 5.0)) is None
    breakdown, transitions = breakdown_tables()
    out = correct_breakdown(breakdown, transitions, cal, speed=2.0).set_index(["operation", "resources"])
    assert out.loc[("inference", "Python"), "corrected_ns"] == 10_000 - 4 * 200  # scaled
    assert out.loc[("inference", "CUDA API"), "corrected_ns"] == 4_000 - 2 * 1000  # not scaled


def test_a_trace_far_from_the_calibrations_speed_warns():
    import warnings

    from rlscope.calibrate.speed import check_speed

    with pytest.warns(CalibrationWarning, match="1.60x as long"):
        check_speed(1.6)
    with pytest.warns(CalibrationWarning, match="cannot be compared with the calibration"):
        check_speed(None)
    with pytest.warns(CalibrationWarning, match="0.50x"):
        check_speed(0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_speed(1.1)
