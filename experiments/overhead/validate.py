"""Overhead-correction validation (RL-Scope paper, Fig. 11), one workload per run.

Calibrate on runs of ``calibration_steps`` (with ``two_lengths``, also half that, to separate
per-process from per-event costs), then profile a run of ``validation_steps`` (a different
length, as RL-Scope's subtraction validation did) and compare its corrected total with an
uninstrumented run of the same length:

    error = (corrected - uninstrumented) / uninstrumented

Totals are process wall times (start of the interpreter to exit), summed over processes; for
the profiled run, the sum of its main threads' breakdown rows, which add up to that wall time.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from rlscope.errors import SkipRun

__all__ = ["overhead_correction"]


def _total_ns(breakdown: Any, column: str) -> float:
    return float(breakdown.loc[breakdown["thread"] == "main", column].sum())


def overhead_correction(workload: str, calibration_steps: int, validation_steps: int,
                        calibration_repetitions: int = 3, gpu: bool = True, two_lengths: bool = False
                        ) -> dict[str, Any]:
    """Calibrate, validate once; return the corrected and raw errors in percent."""
    from experiments.overhead.loops import GPU_WORKLOADS
    from rlscope.analyze import analyze_trace
    from rlscope.analyze.calibration import CALIBRATION_FILE
    from rlscope.collect.calibrate import calibrate, measure_run
    from rlscope.collect.cupti import gpu_unavailable_reason
    from rlscope.collect.launch import run_profiled

    if workload in GPU_WORKLOADS and (reason := gpu_unavailable_reason()) is not None:
        raise SkipRun(f"needs a GPU: {reason}")
    command = [sys.executable, "-m", "experiments.overhead.loops", workload]
    with tempfile.TemporaryDirectory(prefix="rlscope-overhead-") as tmp:
        root = Path(tmp)
        lengths = [str(calibration_steps // 2), str(calibration_steps)] if two_lengths else [str(calibration_steps)]
        calibration, failures = calibrate(command + ["{length}"] if two_lengths else command + lengths,
                                          root / "calibration", calibration_repetitions, gpu=gpu,
                                          progress=lambda line: None, lengths=lengths if two_lengths else None)
        if failures:
            raise RuntimeError("calibration runs failed: " + "; ".join(failures))
        validation = command + [str(validation_steps)]
        with (root / "base.log").open("w") as log:
            _, code = run_profiled(validation, root / "base", wall_only=True, stdout=log)
        if code != 0:
            raise RuntimeError(f"uninstrumented run failed: {(root / 'base.log').read_text()[-2000:]}")
        base_ns = measure_run(root / "base")["wall_ns"]
        with (root / "profiled.log").open("w") as log:
            _, code = run_profiled(validation, root / "profiled", gpu=gpu, stdout=log)
        if code != 0:
            raise RuntimeError(f"profiled run failed: {(root / 'profiled.log').read_text()[-2000:]}")
        breakdown = analyze_trace(root / "profiled", root / "calibration" / CALIBRATION_FILE)["breakdown"]
    raw, corrected = _total_ns(breakdown, "time_ns"), _total_ns(breakdown, "corrected_ns")
    return {
        "uninstrumented_s": base_ns / 1e9,
        "raw_s": raw / 1e9,
        "corrected_s": corrected / 1e9,
        "raw_error_pct": 100 * (raw - base_ns) / base_ns,
        "corrected_error_pct": 100 * (corrected - base_ns) / base_ns,
        **{f"cost_{event}_ns": cost for event, cost in calibration.costs_ns.items()},
        **{f"fixed_{event}_ms": fixed / 1e6 for event, fixed in calibration.fixed_ns.items()},
    }
