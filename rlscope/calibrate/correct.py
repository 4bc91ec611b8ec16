"""Correction: subtract what profiling cost from the analysed breakdown.

Annotations and intercepted Python->native calls cost Python time of the operation they happen
in; recorded CUDA API calls and GPU activity records cost time inside CUDA API calls; rlscope's
own trace writes are timed as they happen and removed whole. GPU time is left as measured.

Each corrected time comes with the interval the removal's 95% interval gives it, bounded to what
is possible (no less than zero, no more than was measured); where even the low end of a removal
exceeds the time measured, the rows say so (``OVERCORRECTED``) instead of reading as a plain zero.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlscope.analyze.caveats import CAVEAT, OVERCORRECTED, add_caveat
from rlscope.analyze.overlap import UNANNOTATED
from rlscope.calibrate.model import EVENTS, PROFILER_LAYER, Calibration
from rlscope.calibrate.spans import iterating_process, trace_iteration
from rlscope.calibrate.speed import check_speed, speed_factor
from rlscope.calibrate.stats import joint_half_width
from rlscope.trace.reader import ProcessTrace

__all__ = ["analyze_corrected", "corrected_breakdown", "correct_breakdown", "applied_costs", "applied_startup_ns",
           "span_removed"]


def analyze_corrected(trace_dir: Path, calibration_file: Path | None,
                      drop_corrupt: bool = False) -> dict[str, pd.DataFrame]:
    """``rlscope.analyze.analyze_trace`` of ``trace_dir``, its breakdown corrected with
    ``calibration_file`` (``corrected_breakdown``) unless that is None."""
    from rlscope.analyze import analyze_processes
    from rlscope.analyze.attribution import read_attributed

    processes = read_attributed(trace_dir, drop_corrupt=drop_corrupt)
    tables = analyze_processes(processes)
    if calibration_file is not None:
        tables["breakdown"] = corrected_breakdown(processes, tables, calibration_file)
    return tables


def corrected_breakdown(processes: list[ProcessTrace], tables: dict[str, pd.DataFrame],
                        calibration_file: Path) -> pd.DataFrame:
    """The breakdown of ``tables`` (``rlscope.analyze.analyze_processes`` of ``processes``)
    corrected with the calibration in ``calibration_file``: ``correct_breakdown`` at the trace's
    speed against calibration's, the start-up cost taken from the process that iterates, and a
    ``speed_vs_calibration`` column (NaN where the speeds cannot be compared). Warns
    (``CalibrationWarning``) where the calibration may not fit the trace."""
    calibration = Calibration.load(calibration_file)
    for process in processes:
        calibration.check_fits(process.meta)
    speed = speed_factor(calibration, trace_iteration(processes))
    check_speed(speed)
    iterating = iterating_process(processes)
    out = correct_breakdown(tables["breakdown"], tables["transitions"], calibration, speed or 1.0,
                            startup_process=iterating.process if iterating is not None else None)
    out["speed_vs_calibration"] = speed if speed is not None else float("nan")
    return out


def applied_costs(costs_ns: dict[str, float], speed: float = 1.0) -> dict[str, float]:
    """Per event type, the cost the correction subtracts: none below zero, the CPU-side ones
    scaled by the trace's speed against the calibration's."""
    return {event: max(costs_ns.get(event, 0.0), 0.0) * (speed if layer == "Python" else 1.0)
            for event, (_, layer) in EVENTS.items()}


def applied_startup_ns(calibration: Calibration, speed: float = 1.0) -> tuple[float, float]:
    """The start-up cost the correction removes and its half-width: none below zero, scaled by
    the trace's speed as the other interpreter-side costs are."""
    return max(calibration.startup_ns or 0.0, 0.0) * speed, (calibration.startup_ci95_ns or 0.0) * speed


def span_removed(span: dict[str, Any], costs_ns: dict[str, float]) -> float:
    """What correction removes from a ``profiled_span`` by its events and writes alone, at
    ``costs_ns`` as ``applied_costs`` gives them."""
    return span["writes_ns"] + sum(costs_ns.get(e, 0.0) * n for e, n in span["events"].items())


def correct_breakdown(breakdown: pd.DataFrame, transitions: pd.DataFrame, calibration: Calibration,
                      speed: float = 1.0, startup_process: str | None = None) -> pd.DataFrame:
    """The breakdown with each operation's CPU time less the cost of the events recorded in it,
    taken from the layer the events inflate; rlscope's own trace writes (the ``Profiler`` layer,
    timed as they happened) are removed whole. Added columns:

    - ``corrected_ns``: the time less the removal (count x cost), no less than zero: the
      possible value nearest to that difference (a point moved into the interval, say to its
      middle, would assume a distribution of the costs' errors that calibration does not give);
    - ``corrected_low_ns``, ``corrected_high_ns``: the same with the removal at the high and the
      low end of its 95% interval, bounded to [0, ``time_ns``]; ``corrected_ns`` lies within;
    - ``uncertainty_ns``: the 95% half-width of the removal per operation and layer
      (``joint_half_width``), on the row the removal started from (summed over rows, a bound);
    - ``excess_ns``: what the removal could not take, since the layer's time ran out (on the
      same row; 0 almost everywhere);
    - ``overhead_ns``: what was removed (``time_ns - corrected_ns``);
    - ``caveat``: ``OVERCORRECTED`` added on the layer's rows where the low end of the removal
      exceeds the layer's time: its costs are too high for this workload, and a zero there says
      nothing of the uninstrumented time.

    Within an operation's layer, CPU-only rows give first, then the rows that overlap the GPU:
    GPU time is not inflated by profiling, so the CPU time the events add shows where the GPU has
    nothing to do; what the CPU-only rows cannot give comes from the same layer's time beside the
    GPU, which the same events inflate too. It never moves to another layer or operation, whose
    time those events did not inflate: where the whole layer runs out, the rest is ``excess_ns``.
    Where a row is reached by two removals (events, then start-up), their intervals add up: a
    bound.

    ``speed``: the trace's machine speed relative to the calibration's (``speed_factor``); it
    scales the costs of the CPU-side events (annotations, intercepted calls).
    ``startup_process``: the process whose start-up the calibration's start-up cost is removed
    from (``applied_startup_ns``): from its main thread's Python time outside operations, where
    imports run, largest row first.

    Example rows (one operation with 2 annotations at 100 ± 10 ns, 4 intercepted calls at
    1000 ± 100 ns and 2 CUDA API calls at 3600 ± 400 ns, the errors taken as adding up)::

        resources      time_ns corrected_ns corrected_low_ns corrected_high_ns uncertainty_ns excess_ns
        Python          10000         5800             5380              6220            420         0
        CUDA API         4000            0                0                 0            800       200
        CUDA API+GPU     3000            0                0               600              0         0
        GPU              7000         7000             7000              7000              0         0

    (7200 ± 800 ns from 7000 ns of CUDA API time: a zero, yet up to 600 ns may be left; had the
    low end of the removal, 6400 ns, exceeded the 7000 ns, both rows would carry
    ``OVERCORRECTED``.)
    """
    out = breakdown.copy()
    out["corrected_ns"] = out["time_ns"].astype(np.float64)
    out.loc[out["cpu"] == PROFILER_LAYER, "corrected_ns"] = 0.0  # measured, not estimated
    out["corrected_low_ns"] = out["corrected_ns"]
    out["corrected_high_ns"] = out["corrected_ns"]
    out["uncertainty_ns"] = 0.0
    out["excess_ns"] = 0.0
    if CAVEAT not in out:
        out[CAVEAT] = ""
    keys = ["process", "thread", "phase", "operation"]
    counts = transitions.set_index(keys + ["transition"])["count"] if not transitions.empty else None
    costs = applied_costs(calibration.costs_ns, speed)
    # (operation key, layer) -> ns removed, and per event its count x half-width
    removals: dict[tuple[Any, str], tuple[float, dict[str, float]]] = {}
    for event, (rows, layer) in EVENTS.items():
        cost = costs[event]
        if cost == 0.0 or counts is None:
            continue
        half = (calibration.ci95_ns.get(event) or 0.0) * (speed if layer == "Python" else 1.0)
        per_op = counts[counts.index.get_level_values("transition").isin(rows)].groupby(level=keys).sum()
        for key, n in per_op.items():
            removed, weighted = removals.setdefault((key, layer), (0.0, {}))
            weighted[event] = n * half
            removals[(key, layer)] = (removed + n * cost, weighted)
    for (key, layer), (removed, weighted) in removals.items():
        match = (out[keys] == pd.Series(key, index=keys)).all(axis=1) & (out["cpu"] == layer)
        _take(out, sorted(out.index[match], key=lambda i: bool(out.at[i, "gpu"])), removed,
              joint_half_width(weighted, calibration.correlation))
    remove, half = applied_startup_ns(calibration, speed)
    if startup_process is not None and remove > 0:
        match = ((out["process"] == startup_process) & (out["thread"] == "main") & (out["operation"] == UNANNOTATED)
                 & (out["cpu"] == "Python"))
        _take(out, list(out.loc[match, "corrected_ns"].sort_values(ascending=False).index), remove, half)
    out["overhead_ns"] = out["time_ns"] - out["corrected_ns"]
    for column in ("corrected_ns", "corrected_low_ns", "corrected_high_ns", "uncertainty_ns", "excess_ns"):
        out[column] = out[column].round().astype(np.int64)
    return out


def _take(out: pd.DataFrame, rows: list[Any], remove: float, half: float) -> None:
    """Remove ``remove`` ns, give or take ``half``, from ``rows`` of ``out`` in order: the point
    from ``corrected_ns``, ``remove + half`` from ``corrected_low_ns`` and ``remove - half`` from
    ``corrected_high_ns`` (each row's bounds are its value at either end of the removal); the
    first row carries ``half`` and what the point could not take. Rows the low end alone
    overdraws get the ``OVERCORRECTED`` caveat."""
    if not rows:
        return
    out.at[rows[0], "uncertainty_ns"] += half
    out.at[rows[0], "excess_ns"] += _take_in_order(out, rows, "corrected_ns", remove)
    _take_in_order(out, rows, "corrected_low_ns", remove + half)
    if _take_in_order(out, rows, "corrected_high_ns", max(remove - half, 0.0)) >= 1.0:  # 1 ns: not rounding
        add_caveat(out, OVERCORRECTED, out.index.isin(rows))


def _take_in_order(out: pd.DataFrame, rows: list[Any], column: str, remove: float) -> float:
    """Take ``remove`` ns from ``column`` of ``rows`` in order, none below zero; returns what
    the rows could not give."""
    for idx in rows:
        taken = min(out.at[idx, column], remove)
        out.at[idx, column] -= taken
        remove -= taken
        if remove <= 0:
            return 0.0
    return remove
