"""Analyses of trace bundles: pure functions of the trace, each returning a tidy DataFrame."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from rlscope.analyze.calibration import (
    Calibration,
    check_speed,
    correct_breakdown,
    iterating_process,
    speed_factor,
    trace_iteration,
)
from rlscope.analyze.gpu import gpu_by_operation, utilisation_timeline
from rlscope.analyze.overlap import analyze_process, breakdown, transitions
from rlscope.harness.files import write_atomic
from rlscope.trace.reader import read_trace

__all__ = ["analyze_trace", "write_tables", "breakdown", "transitions", "ANALYSIS_DIR", "TABLES"]

ANALYSIS_DIR = "analysis"
TABLES = ("breakdown", "transitions", "gpu", "utilisation")


def analyze_trace(directory: Path, calibration: Path | None = None) -> dict[str, pd.DataFrame]:
    """Every table over every process of the trace at ``directory``: breakdown, transitions,
    gpu (work per operation) and utilisation (GPU-bound vs NVML over time); the last two are
    empty for a trace without GPU activity. With a ``calibration`` file the breakdown gains
    ``corrected_ns`` and ``overhead_ns`` (rlscope's own overhead removed)."""
    processes = read_trace(directory)
    tables = [analyze_process(p) for p in processes]
    out = {
        "breakdown": pd.concat([b for b, _ in tables], ignore_index=True),
        "transitions": pd.concat([t for _, t in tables], ignore_index=True),
        "gpu": pd.concat([gpu_by_operation(p) for p in processes], ignore_index=True),
        "utilisation": pd.concat([utilisation_timeline(p) for p in processes], ignore_index=True),
    }
    if calibration is not None:
        cal = Calibration.load(calibration)
        for p in processes:
            cal.check_fits(p.meta)
        speed = speed_factor(cal, trace_iteration(processes))
        check_speed(speed)
        iterating = iterating_process(processes)
        out["breakdown"] = correct_breakdown(out["breakdown"], out["transitions"], cal, speed or 1.0,
                                             startup_process=iterating.process if iterating is not None else None)
        out["breakdown"]["speed_vs_calibration"] = speed if speed is not None else float("nan")
    return out


def write_tables(tables: dict[str, pd.DataFrame], out_dir: Path) -> list[Path]:
    """Write each table as CSV (to read) and Parquet (to load fast), atomically."""
    written = []
    for name, frame in tables.items():
        text = io.StringIO()
        frame.to_csv(text, index=False)
        write_atomic(out_dir / f"{name}.csv", text.getvalue())
        blob = io.BytesIO()
        frame.to_parquet(blob, index=False)
        write_atomic(out_dir / f"{name}.parquet", blob.getvalue())
        written += [out_dir / f"{name}.csv", out_dir / f"{name}.parquet"]
    return written
