"""How fast a trace ran against its calibration, and whether the two can be compared at all.

An intercepted call costs interpreter time, so its cost moves with the machine's speed: the
correction scales the CPU-side costs by the trace's time per iteration against calibration's,
where both iterations are the same work.
"""

from __future__ import annotations

import warnings

from rlscope.calibrate.model import Calibration, CalibrationWarning

__all__ = ["speed_factor", "check_speed", "SPEED_WARNING", "SHAPE_TOLERANCE", "SPEED_LIMIT"]

# Beyond this ratio of speeds (either way) the calibration saw a machine unlike the trace's.
SPEED_WARNING = 1.25


# Iterations whose CPU-side events differ by more than this (relative) are not the same work:
# their times say nothing about the machine's speed.
SHAPE_TOLERANCE = 0.1


# Beyond this ratio (either way) iterations are not the same work either, whatever their events:
# a shared machine's speed moves by less than this between processes, while a short run's warm-up
# iterations (JIT, allocation) can be tens of times slower than later ones.
SPEED_LIMIT = 2.0


def check_speed(speed: float | None) -> None:
    """Warn when the trace ran at a speed the calibration did not see, or its iterations cannot
    be compared with the calibration's (``speed_factor`` gave None)."""
    if speed is None:
        warnings.warn("the trace's iterations cannot be compared with the calibration's (another configuration, "
                      f"no rlscope.step(), or over {SPEED_LIMIT:g}x faster or slower, as a short run's warm-up "
                      "iterations are): the costs are applied as calibrated, not scaled to this run's speed; "
                      "profile more iterations of the calibrated command for a tighter correction",
                      CalibrationWarning, stacklevel=3)
    elif not 1 / SPEED_WARNING <= speed <= SPEED_WARNING:
        warnings.warn(f"the trace's iterations took {speed:.2f}x as long as during calibration: the machine's "
                      f"speed changed, and the costs, scaled by that, are less reliable; calibrate again while "
                      f"the machine runs as it did for this trace", CalibrationWarning, stacklevel=3)


def speed_factor(calibration: Calibration, iteration: tuple[float, float] | None) -> float | None:
    """How much slower (>1) or faster the trace's iterations ran than the calibration's profiled
    windows, where they are the same work (CPU-side events per iteration within
    ``SHAPE_TOLERANCE``, time within ``SPEED_LIMIT``); None where they cannot be compared.

    Why: an intercepted call costs interpreter time, so its cost moves with the machine's speed,
    and on a shared machine that speed differs between processes. The iteration time, where the
    work per iteration is the same, is the steadiest measure of it."""
    if iteration is None or calibration.iteration_ns <= 0 or iteration[0] <= 0:
        return None
    reference = calibration.cpu_events_per_iteration
    if abs(iteration[1] - reference) > SHAPE_TOLERANCE * max(reference, 1e-9):
        return None
    speed = iteration[0] / calibration.iteration_ns
    return speed if 1 / SPEED_LIMIT <= speed <= SPEED_LIMIT else None
