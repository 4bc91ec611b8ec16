"""Profiling overhead: per-event costs from calibration runs, and the correction they allow.

Calibration runs one workload under a ladder of instrumentation configurations, each adding
one layer (``CONFIGS``), repeated and interleaved so that drift hits every configuration alike.
The wall time a layer adds, divided by the events of that layer, is its cost per event:

    cost_k = (T_k - T_{k-1} - sum_{j<k} (N_kj - N_{k-1,j}) * cost_j) / N_kk

per repetition (configurations of one round are paired), with a 95% confidence interval over
repetitions. Events are counted exactly as the analysis counts them (the transitions table),
so correction subtracts ``count x cost`` with the same counts it was derived from:

- annotations (``rlscope.operation`` enter/exit) and intercepted Python->native calls cost
  Python time of the operation they happen in;
- recorded CUDA API calls and GPU activity records cost time inside CUDA API calls.

Corrected time never goes below zero; GPU time is left as measured.
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import rlscope
from rlscope.analyze.overlap import UNANNOTATED
from rlscope.errors import RlscopeError

__all__ = ["CONFIGS", "EVENTS", "Calibration", "CalibrationWarning", "event_counts", "derive_costs",
           "correct_breakdown", "CALIBRATION_FILE"]

CALIBRATION_FILE = "calibration.json"

# name -> (transitions, GPU layers, event type whose cost this configuration adds); the first is
# the uninstrumented run (rlscope measures only the process's wall time, records nothing).
CONFIGS: dict[str, tuple[bool | None, str, str | None]] = {
    "uninstrumented": (None, "0", None),
    "annotations": (False, "0", "annotation"),
    "transitions": (True, "0", "python_call"),
    "cuda_api": (True, "runtime,driver", "cuda_api"),
    "gpu_activities": (True, "runtime,driver,kernels", "gpu_activity"),
}
GPU_CONFIGS = ("cuda_api", "gpu_activities")

# event type -> (transitions-table rows counted, CPU layer whose time it inflates)
EVENTS: dict[str, tuple[tuple[str, ...], str]] = {
    "annotation": (("Annotations",), "Python"),
    "python_call": (("Python->Backend", "Python->Simulator"), "Python"),
    "cuda_api": (("Backend->CUDA",), "CUDA API"),
    "gpu_activity": (("GPU kernels",), "CUDA API"),
}

# A layer with fewer events than this in a calibration run gets no cost: the run-to-run noise of
# a whole process's wall time (tens of ms) divided by a handful of events is meaningless.
MIN_EVENTS = 1000

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


class CalibrationWarning(UserWarning):
    """A calibration may not fit the trace it corrects, or has no confidence interval."""


def event_counts(transitions: pd.DataFrame) -> dict[str, int]:
    """Events of each type in a trace, from its transitions table."""
    totals = transitions.groupby("transition")["count"].sum() if not transitions.empty else pd.Series(dtype=int)
    return {event: int(sum(totals.get(row, 0) for row in rows)) for event, (rows, _) in EVENTS.items()}


@dataclasses.dataclass
class Calibration:
    """Per-event costs (ns) with 95% confidence half-widths, and where they were measured."""

    costs_ns: dict[str, float]
    ci95_ns: dict[str, float | None]
    repetitions: int
    machine: dict[str, Any]
    command: list[str]
    runs: list[dict[str, Any]]  # one per configuration x repetition (x length): config, repetition, wall_ns, counts
    fixed_ns: dict[str, float] = dataclasses.field(default_factory=dict)  # per process, per layer (two lengths)

    def save(self, path: Path) -> None:
        from rlscope.harness.files import write_json_atomic

        write_json_atomic(path, dataclasses.asdict(self))

    @classmethod
    def load(cls, path: Path) -> Calibration:
        try:
            data = json.loads(Path(path).read_text())
            return cls(**data)
        except (OSError, ValueError, TypeError) as err:
            raise RlscopeError(f"{path}: not a calibration file ({err}); make one with "
                               f"`rlscope calibrate -- python train.py ARGS`") from err

    def check_fits(self, meta: dict[str, Any]) -> None:
        """Warn when the trace comes from another machine or rlscope version."""
        trace_machine = {"host": meta.get("host"), "rlscope": meta.get("rlscope_version")}
        for key, value in trace_machine.items():
            if value is not None and self.machine.get(key) != value:
                warnings.warn(f"calibration measured with {key}={self.machine.get(key)!r}, trace has {value!r}: "
                              f"costs per event may not carry over; calibrate on this machine and version",
                              CalibrationWarning, stacklevel=3)


def machine_fingerprint() -> dict[str, Any]:
    return {"host": platform.node(), "rlscope": rlscope.__version__, "python": platform.python_version(),
            "processor": platform.processor() or platform.machine()}


def derive_costs(runs: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, float | None], int,
                                                   dict[str, float]]:
    """Per-event costs from calibration runs (see the module docstring), with 95% half-widths,
    the number of complete repetitions, and per-process fixed costs.

    ``runs``: dicts with ``config``, ``repetition``, ``wall_ns``, ``counts`` (event type ->
    count) and optionally ``length`` (the workload's size). Runs at one length give costs per
    event only. Runs at two lengths also separate what a layer costs once per process (set-up,
    first calls of each call site) from what it costs per event: the difference between the
    lengths is all per-event cost. Configurations absent from the runs (no GPU) give no cost.
    """
    frame = pd.DataFrame(runs)
    if "length" not in frame:
        frame["length"] = 0
    present = [c for c in CONFIGS if c in set(frame["config"])]
    lengths = sorted(set(frame["length"]))
    per_rep: dict[str, list[float]] = {}
    fixed_rep: dict[str, list[float]] = {}
    for rep in sorted(set(frame["repetition"])):
        rows = {(r["config"], r.get("length", 0)): r for r in runs if r["repetition"] == rep}
        if any((c, n) not in rows for c in present for n in lengths):
            continue  # a failed run breaks this round's pairing
        costs: dict[str, float] = {}
        for prev, config in zip(present, present[1:]):
            event = CONFIGS[config][2]
            deltas, counts = [], []
            for length in (lengths[0], lengths[-1]):
                before, after = rows[(prev, length)], rows[(config, length)]
                delta = after["wall_ns"] - before["wall_ns"]
                delta -= sum((after["counts"].get(e, 0) - before["counts"].get(e, 0)) * c for e, c in costs.items())
                deltas.append(delta)
                counts.append(after["counts"].get(event, 0))
            if len(lengths) > 1:
                grown = counts[1] - counts[0]
                costs[event] = (deltas[1] - deltas[0]) / grown if grown >= MIN_EVENTS else 0.0
                fixed_rep.setdefault(event, []).append(deltas[0] - costs[event] * counts[0])
            else:
                costs[event] = deltas[0] / counts[0] if counts[0] >= MIN_EVENTS else 0.0
        for event, cost in costs.items():
            per_rep.setdefault(event, []).append(cost)
    if not per_rep:
        raise RlscopeError("no complete round of calibration runs (every configuration of one repetition); "
                           "see the failed runs' logs and calibrate again")
    means = {e: float(np.mean(v)) for e, v in per_rep.items()}
    ci = {e: (float(_T975[min(len(v), 31) - 2] * np.std(v, ddof=1) / math.sqrt(len(v))) if len(v) > 1 else None)
          for e, v in per_rep.items()}
    fixed = {e: float(np.mean(v)) for e, v in fixed_rep.items()}
    return means, ci, min(len(v) for v in per_rep.values()), fixed


def correct_breakdown(breakdown: pd.DataFrame, transitions: pd.DataFrame, calibration: Calibration) -> pd.DataFrame:
    """The breakdown with a ``corrected_ns`` column: each operation's CPU time less the cost of
    the events recorded in it, taken from the layer the events inflate (CPU-only rows first,
    then rows that overlap the GPU), never below zero. Also ``overhead_ns``: what was removed."""
    out = breakdown.copy()
    out["corrected_ns"] = out["time_ns"].astype(np.float64)
    keys = ["process", "thread", "phase", "operation"]
    counts = transitions.set_index(keys + ["transition"])["count"] if not transitions.empty else None
    for event, (rows, layer) in EVENTS.items():
        cost = max(calibration.costs_ns.get(event, 0.0), 0.0)
        if cost == 0.0 or counts is None:
            continue
        per_op = counts[counts.index.get_level_values("transition").isin(rows)].groupby(level=keys).sum()
        for key, n in per_op.items():
            remove = n * cost
            match = (out[keys] == pd.Series(key, index=keys)).all(axis=1) & (out["cpu"] == layer)
            for idx in sorted(out.index[match], key=lambda i: bool(out.at[i, "gpu"])):
                taken = min(out.at[idx, "corrected_ns"], remove)
                out.at[idx, "corrected_ns"] -= taken
                remove -= taken
                if remove <= 0:
                    break
    fixed = sum(max(v, 0.0) for v in calibration.fixed_ns.values())
    if fixed > 0:  # once per process: from its main thread's Python time, start-up ("(unannotated)") first
        for process in out["process"].unique():
            remove = fixed
            python = out[(out["process"] == process) & (out["thread"] == "main") & (out["cpu"] == "Python")]
            order = sorted(python.index, key=lambda i: (out.at[i, "operation"] != UNANNOTATED, -out.at[i, "time_ns"]))
            for idx in order:
                taken = min(out.at[idx, "corrected_ns"], remove)
                out.at[idx, "corrected_ns"] -= taken
                remove -= taken
                if remove <= 0:
                    break
    out["overhead_ns"] = out["time_ns"] - out["corrected_ns"]
    out["corrected_ns"] = out["corrected_ns"].round().astype(np.int64)
    return out
