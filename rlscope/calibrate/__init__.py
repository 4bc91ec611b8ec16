"""Overhead calibration and correction: what each recorded event costs, and the breakdown
without it.

``rlscope calibrate`` runs a workload with rlscope's layers switched on and off (``ladder``),
estimates a cost per event from those runs (``estimate``, ``window_costs``, ``spans``) into a
frozen, versioned record (``model``), and ``rlscope analyze --corrected`` subtracts count x cost
from the operations where the events happened (``correct``).
"""

from rlscope.calibrate.correct import analyze_corrected, correct_breakdown, corrected_breakdown
from rlscope.calibrate.estimate import derive_calibration
from rlscope.calibrate.cache import cached_calibration, find_cached_calibration
from rlscope.calibrate.ladder import calibrate
from rlscope.calibrate.model import CALIBRATION_FILE, Calibration, CalibrationError, CalibrationWarning

__all__ = ["analyze_corrected", "calibrate", "cached_calibration", "find_cached_calibration", "derive_calibration",
           "corrected_breakdown", "correct_breakdown", "Calibration", "CalibrationError", "CalibrationWarning",
           "CALIBRATION_FILE"]
