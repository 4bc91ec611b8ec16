"""Profiling overhead: per-event costs from calibration runs, and the correction they allow.

Each layer of instrumentation (``CONFIGS``: annotations, Python->native transitions, CUDA API
tracing, GPU activity records) adds time; divided by that layer's events it is a cost per
event. Two measurements give it:

- **Alternating windows** (when the workload calls ``rlscope.step()``): one process switches
  annotations, transitions, CUDA API and GPU activity recording on and off every few
  milliseconds (``rlscope.collect.windows``); per palindromic block of windows, the time per
  iteration a level adds over the level below, over the events per iteration it adds. Whole
  runs differ by 10-50% on a shared machine; neighbouring windows share the machine's state,
  so the costs come out an order of magnitude tighter.
- **Whole runs** (a workload without iterations): a ladder of runs, each adding one layer,
  repeated and interleaved, paired per round::

      cost_k = (T_k - T_{k-1} - sum_{j<k} (N_kj - N_{k-1,j}) * cost_j) / N_kk

Both give a 95% confidence interval (over blocks, over rounds). Events are counted exactly as
the analysis counts them (the transitions table), so correction subtracts ``count x cost`` with
the same counts it was derived from:

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
from rlscope.errors import RlscopeError
from rlscope.trace.schema import Kind

__all__ = ["CONFIGS", "EVENTS", "Calibration", "CalibrationWarning", "event_counts", "derive_costs",
           "derive_window_costs", "window_blocks", "WINDOW_COLUMNS", "mean_ci95", "call_medians", "pool_call_medians",
           "trace_call_medians", "speed_factor", "check_speed", "applied_costs", "correct_breakdown",
           "CALIBRATION_FILE"]

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
    runs: list[dict[str, Any]]  # one per configuration x repetition: config, repetition, wall_ns, counts
    blocks: int = 0  # palindromic blocks of alternating windows behind the costs; 0: whole runs
    # native callee -> [median duration ns, calls]: how fast this machine ran while calibrating
    call_medians_ns: dict[str, list[float]] = dataclasses.field(default_factory=dict)

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


# Beyond this ratio of speeds (either way) the scaled costs over-corrected in validation.
SPEED_WARNING = 1.25


def check_speed(speed: float) -> None:
    """Warn when the trace ran at a speed the calibration did not see (``speed_factor``)."""
    if not 1 / SPEED_WARNING <= speed <= SPEED_WARNING:
        warnings.warn(f"the trace's native calls ran {speed:.2f}x as long as during calibration: the machine's "
                      f"speed changed, and the corrected times are less reliable (validation saw errors of 15-40% "
                      f"beyond {SPEED_WARNING}x); calibrate again while the machine runs as it did for this trace",
                      CalibrationWarning, stacklevel=3)


def machine_fingerprint() -> dict[str, Any]:
    return {"host": platform.node(), "rlscope": rlscope.__version__, "python": platform.python_version(),
            "processor": platform.processor() or platform.machine()}


def mean_ci95(values: list[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its 95% confidence interval (Student's t; None for one value)."""
    if len(values) < 2:
        return float(np.mean(values)), None
    return float(np.mean(values)), float(_T975[min(len(values), 31) - 2] * np.std(values, ddof=1)
                                         / math.sqrt(len(values)))


def _mean_ci(samples: dict[str, list[float]]) -> tuple[dict[str, float], dict[str, float | None]]:
    stats = {e: mean_ci95(v) for e, v in samples.items()}
    return {e: m for e, (m, _) in stats.items()}, {e: h for e, (_, h) in stats.items()}


def derive_costs(runs: list[dict[str, Any]], known: dict[str, float] | None = None
                 ) -> tuple[dict[str, float], dict[str, float | None], int]:
    """Per-event costs from whole calibration runs (see the module docstring), with 95%
    half-widths and the number of complete repetitions.

    ``runs``: dicts with ``config``, ``repetition``, ``wall_ns`` and ``counts`` (event type ->
    count). ``known``: costs already measured (by alternating windows), used to take their
    events' share out of the later layers' time. Configurations absent from the runs (no GPU)
    give no cost.
    """
    present = [c for c in CONFIGS if c in {r["config"] for r in runs}]
    per_rep: dict[str, list[float]] = {}
    for rep in sorted({r["repetition"] for r in runs}):
        rows = {r["config"]: r for r in runs if r["repetition"] == rep}
        if any(c not in rows for c in present):
            continue  # a failed run breaks this round's pairing
        costs: dict[str, float] = dict(known or {})
        for prev, config in zip(present, present[1:]):
            event = CONFIGS[config][2]
            before, after = rows[prev], rows[config]
            delta = after["wall_ns"] - before["wall_ns"]
            delta -= sum((after["counts"].get(e, 0) - before["counts"].get(e, 0)) * c for e, c in costs.items())
            count = after["counts"].get(event, 0) - before["counts"].get(event, 0)
            costs[event] = delta / count if count >= MIN_EVENTS else 0.0
            per_rep.setdefault(event, []).append(costs[event])
    if not per_rep:
        raise RlscopeError("no complete round of calibration runs (every configuration of one repetition); "
                           "see the failed runs' logs and calibrate again")
    means, ci = _mean_ci(per_rep)
    return means, ci, min(len(v) for v in per_rep.values())


# Alternating windows (rlscope.collect.windows): level -> the event type whose cost it adds.
WINDOW_EVENTS = {1: "annotation", 2: "python_call", 3: "cuda_api", 4: "gpu_activity"}
WINDOW_COLUMNS = ("level", "duration_ns", "iterations", "annotation", "python_call", "cuda_api", "gpu_activity")


def window_blocks(windows: list[list[float]]) -> list[dict[int, tuple[float, dict[str, float]]]]:
    """Group one run's windows into palindromic blocks (the first block, warm-up, dropped): per
    block and level, the time per iteration and the events of each type per iteration.

    ``windows``: rows laid out as ``WINDOW_COLUMNS`` (event columns missing at the end: none).
    """
    levels = sorted({int(w[0]) for w in windows})
    size = 2 * len(levels)
    events = WINDOW_COLUMNS[3:len(windows[0])] if windows else ()
    blocks = []
    for first in range(size, len(windows) - size + 1, size):
        block: dict[int, tuple[float, dict[str, float]]] = {}
        for level in levels:
            rows = np.array([w for w in windows[first:first + size] if int(w[0]) == level], dtype=np.float64)
            if len(rows) == 0 or rows[:, 2].sum() == 0:
                break
            iterations = rows[:, 2].sum()
            block[level] = (rows[:, 1].sum() / iterations,
                            {e: rows[:, 3 + i].sum() / iterations for i, e in enumerate(events)})
        else:
            blocks.append(block)
    return blocks


def derive_window_costs(runs: list[list[list[float]]]) -> tuple[dict[str, float], dict[str, float | None], int]:
    """Per-event costs from alternating-window runs: per block, the time per iteration a level
    adds over the level below, less the known costs of the events that also grew, divided by the
    growth of its own events per iteration. Returns costs, 95% half-widths over all blocks of all
    runs, and the number of blocks.

    A layer whose events total fewer than ``MIN_EVENTS`` (annotations never switched, because
    the loop runs inside an operation) gets no cost.
    """
    samples: dict[str, list[float]] = {}
    totals: dict[str, float] = {}
    n_blocks = 0
    for windows in runs:
        blocks = window_blocks(windows)
        n_blocks += len(blocks)
        for block in blocks:
            levels = sorted(block)
            costs: dict[str, float] = {}
            for lo, hi in zip(levels, levels[1:]):
                event = WINDOW_EVENTS[hi]
                (tau_lo, eps_lo), (tau_hi, eps_hi) = block[lo], block[hi]
                grown = eps_hi.get(event, 0.0) - eps_lo.get(event, 0.0)
                if grown <= 0:
                    continue
                delta = tau_hi - tau_lo - sum((eps_hi[e] - eps_lo[e]) * c for e, c in costs.items())
                costs[event] = delta / grown
                samples.setdefault(event, []).append(costs[event])
        for row in windows:
            if int(row[0]) in WINDOW_EVENTS:
                event = WINDOW_EVENTS[int(row[0])]
                totals[event] = totals.get(event, 0.0) + row[WINDOW_COLUMNS.index(event)]
    samples = {e: v for e, v in samples.items() if totals.get(e, 0.0) >= MIN_EVENTS}
    means, ci = _mean_ci(samples)
    return means, ci, n_blocks


# Callees with fewer calls than this, in the calibration or the trace, do not count towards speed.
MIN_SPEED_CALLS = 100


def call_medians(events: pd.DataFrame) -> dict[str, list[float]]:
    """Per native callee (Python->backend/simulator calls): median duration in ns and count."""
    calls = events[(events["kind"] == int(Kind.CPU_CALL)) & (events["category"] > 0)]
    if calls.empty:
        return {}
    grouped = (calls["end_ns"] - calls["start_ns"]).groupby(calls["name"].astype(str))
    medians, sizes = grouped.median(), grouped.size()
    return {str(n): [float(medians[n]), int(sizes[n])] for n in medians.index}


def pool_call_medians(parts: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Medians from several runs: the median of the runs' medians, the calls summed."""
    names = {n for part in parts for n in part}
    return {n: [float(np.median([p[n][0] for p in parts if n in p])), int(sum(p[n][1] for p in parts if n in p))]
            for n in sorted(names)}


def trace_call_medians(processes: list[Any]) -> dict[str, list[float]]:
    """``call_medians`` over the processes of one trace (``ProcessTrace`` objects), pooled."""
    return pool_call_medians([call_medians(p.events) for p in processes])


def speed_factor(reference: dict[str, list[float]], observed: dict[str, list[float]]) -> float:
    """How much slower (>1) or faster the machine ran the trace than the calibration: the
    count-weighted geometric mean, over callees both called often, of the ratio of their median
    durations. Across calibration processes on a shared machine the cost of an intercepted call
    moved with the machine's speed (both by up to 1.6x), so the CPU-side costs are scaled by it;
    validation finds that right in some runs and an over-correction where the factor is far
    from 1 (docs/results/overhead.md), so the factor is also reported. 1.0 when nothing is in
    common."""
    pairs = [(min(reference[n][1], observed[n][1]), math.log(observed[n][0] / reference[n][0]))
             for n in reference.keys() & observed.keys()
             if min(reference[n][1], observed[n][1]) >= MIN_SPEED_CALLS and reference[n][0] > 0 and observed[n][0] > 0]
    if not pairs:
        return 1.0
    weights = sum(w for w, _ in pairs)
    return float(math.exp(sum(w * r for w, r in pairs) / weights))


def applied_costs(costs_ns: dict[str, float], speed: float = 1.0) -> dict[str, float]:
    """Per event type, the cost the correction subtracts: none below zero, the CPU-side ones
    scaled by the trace's speed against the calibration's."""
    return {event: max(costs_ns.get(event, 0.0), 0.0) * (speed if layer == "Python" else 1.0)
            for event, (_, layer) in EVENTS.items()}


def correct_breakdown(breakdown: pd.DataFrame, transitions: pd.DataFrame, calibration: Calibration,
                      speed: float = 1.0) -> pd.DataFrame:
    """The breakdown with a ``corrected_ns`` column: each operation's CPU time less the cost of
    the events recorded in it, taken from the layer the events inflate (CPU-only rows first,
    then rows that overlap the GPU), never below zero. Also ``overhead_ns``: what was removed.

    ``speed``: the trace's machine speed relative to the calibration's (``speed_factor``); it
    scales the costs of the CPU-side events (annotations, intercepted calls)."""
    out = breakdown.copy()
    out["corrected_ns"] = out["time_ns"].astype(np.float64)
    keys = ["process", "thread", "phase", "operation"]
    counts = transitions.set_index(keys + ["transition"])["count"] if not transitions.empty else None
    costs = applied_costs(calibration.costs_ns, speed)
    for event, (rows, layer) in EVENTS.items():
        cost = costs[event]
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
    out["overhead_ns"] = out["time_ns"] - out["corrected_ns"]
    out["corrected_ns"] = out["corrected_ns"].round().astype(np.int64)
    return out
