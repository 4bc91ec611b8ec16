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

A process's start-up (interpreter start to its first ``rlscope.step()``: imports, CUDA
initialisation) is slowed by more than its counted events: on 3.11 the profile function fires
on every Python call of the imports, of which almost none is a counted transition. Calibration
measures that directly (``startup_cost``): profiled start-ups (the alternating runs', and runs
that end at their first step), less what their events and writes there are corrected by,
against uninstrumented start-ups run beside them; correction removes the mean from the
start-up of the process that iterates.

Where a GPU is traced, a process that records with CUPTI throughout paid more per iteration than
the windows' costs add up to (SB3 PPO on CUDA on the H100: 43% over uninstrumented runs, the
windows 19%). Calibration measures that too, with whole runs beside uninstrumented ones
(``continuous_cost``): from the first step to the end, the profiled run less what its events
and writes are corrected by, less the uninstrumented run, per recorded CUDA API call; it is
added to the CUDA API cost.

Corrected time never goes below zero; GPU time is left as measured. rlscope's writes of its
buffered events are not estimated: the trace times each one (``Kind.PROFILER_WRITE``), the
breakdown shows them as the ``Profiler`` layer, correction removes them whole, and calibration
leaves them out of its windows, so no per-event cost counts them twice.
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
from rlscope.analyze.overlap import UNANNOTATED, outermost
from rlscope.errors import RlscopeError
from rlscope.trace.schema import Kind

__all__ = ["CONFIGS", "EVENTS", "Calibration", "CalibrationWarning", "event_counts", "derive_costs",
           "derive_window_costs", "window_blocks", "WINDOW_COLUMNS", "mean_ci95", "median_ci95", "event_times",
           "write_time_in", "window_iteration", "correction_uncertainty_pct", "cost_correlation", "joint_half_width",
           "trace_iteration", "speed_factor", "check_speed", "applied_costs", "correct_breakdown", "CALIBRATION_FILE",
           "PROFILER_LAYER", "first_step_ns", "profiled_span", "profiled_startup", "profiled_steady", "span_removed",
           "startup_cost", "continuous_cost", "add_cuda_api_cost", "applied_startup_ns", "iterating_process",
           "add_residual", "RESIDUAL_PROBE"]

CALIBRATION_FILE = "calibration.json"
PROFILER_LAYER = "Profiler"  # the breakdown's CPU layer of rlscope's own trace writes

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
    # How fast the machine ran the workload while calibrating: the profiled windows' time per
    # iteration (median over blocks) and the CPU-side events in one (``window_iteration``).
    iteration_ns: float = 0.0
    cpu_events_per_iteration: float = 0.0
    # How the costs' errors go together (``cost_correlation``: event -> event -> coefficient, from
    # the window blocks); a pair absent is taken as 1, which makes its intervals add up (a bound).
    correlation: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    # How uncertain a corrected profiled iteration is, in % of its time (``correction_uncertainty_pct``);
    # None where some cost has no interval.
    uncertainty_pct: float | None = None
    # What profiling adds to the start-up (interpreter start to the first rlscope.step()) beyond
    # the costs of its counted events, with its 95% half-width (``startup_cost``); None: not measured.
    startup_ns: float | None = None
    startup_ci95_ns: float | None = None
    # What a process that has recorded with CUPTI keeps paying on each CUDA call
    # (``rlscope.collect.cupti_residual``), with its 95% half-width: the part of the CUDA API
    # cost that alternating windows cannot see, already added to ``costs_ns["cuda_api"]``.
    # None: not measured (no GPU, or costs from whole runs, which contain it).
    cupti_residual_ns: float | None = None
    cupti_residual_ci95_ns: float | None = None
    # What a continuously profiled process pays per recorded CUDA API call beyond the windows'
    # costs and the residual (``continuous_cost``, from whole-run pairs), with its 95%
    # half-width; already added to ``costs_ns["cuda_api"]``. None: not measured (no GPU, or
    # fewer than two start-up pairs per repetition).
    continuous_ns: float | None = None
    continuous_ci95_ns: float | None = None

    def save(self, path: Path) -> None:
        from rlscope.harness.files import write_json_atomic

        write_json_atomic(path, dataclasses.asdict(self))

    @classmethod
    def load(cls, path: Path) -> Calibration:
        try:
            data = json.loads(Path(path).read_text())
            known = {f.name for f in dataclasses.fields(cls)}
            return cls(**{k: v for k, v in data.items() if k in known})  # an older version's extra keys
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


# Beyond this ratio of speeds (either way) the calibration saw a machine unlike the trace's.
SPEED_WARNING = 1.25
# Iterations whose CPU-side events differ by more than this (relative) are not the same work:
# their times say nothing about the machine's speed.
SHAPE_TOLERANCE = 0.1
# Beyond this ratio (either way) iterations are not the same work either, whatever their events:
# identical processes on a shared machine differed by up to 1.6x, while a short run's warm-up
# iterations (the torch data-collection loop's first 5 take 16 ms, later ones 0.2 ms) would
# scale the CPU-side costs 30-fold.
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


def machine_fingerprint() -> dict[str, Any]:
    return {"host": platform.node(), "rlscope": rlscope.__version__, "python": platform.python_version(),
            "processor": platform.processor() or platform.machine()}


def mean_ci95(values: list[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its 95% confidence interval (Student's t; None for one value)."""
    if len(values) < 2:
        return float(np.mean(values)), None
    return float(np.mean(values)), float(_T975[min(len(values), 31) - 2] * np.std(values, ddof=1)
                                         / math.sqrt(len(values)))


def median_ci95(values: list[float]) -> tuple[float, float | None]:
    """Median and half the width of its distribution-free 95% confidence interval (between the
    order statistics that binomial tails of 2.5% give; None for fewer than 6 values).

    Why the median: on a shared machine a window now and then loses milliseconds to another
    process, and such outliers set the mean of 20-200 blocks off by more than the cost's own
    spread (gym_numpy: the per-call cost's mean moved by 29% between runs, its median by 4%)."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    n = len(ordered)
    median = float(np.median(ordered))
    # k: how many order statistics each side lie outside the interval, the largest with
    # P(Binomial(n, 1/2) < k) <= 2.5%; in integers (40 * count <= 2**n), exact for any n.
    k, count = 0, 0
    while 40 * (count + math.comb(n, k)) <= 2 ** n:
        count += math.comb(n, k)
        k += 1
    if k == 0:
        return median, None
    return median, float(ordered[n - k] - ordered[k - 1]) / 2


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


# The residual probe (``rlscope.collect.cupti_residual``) whose cost is added to each recorded CUDA
# API call: kernel launches are most of the outermost API calls of RL workloads, PyTorch's and
# XLA's alike, and on the H100 a launch kept +0.7-1.0 µs after recording, a stream query +0.2-0.4 µs.
RESIDUAL_PROBE = "driver_launch"


def add_residual(costs: dict[str, float], ci: dict[str, float | None], probes: dict[str, dict[str, Any]]
                 ) -> tuple[dict[str, float], dict[str, float | None], float | None, float | None]:
    """The window costs with what CUPTI's recording leaves on every later CUDA call added to the
    CUDA API cost (``RESIDUAL_PROBE`` of ``probes``, as ``rlscope.collect.cupti_residual``
    measures them), its half-width combined with the window cost's as independent errors; also
    the residual and its half-width (None, None where the probe is missing).

    Why: the windows' cost is the profiled windows' time less the unprofiled windows', and those
    follow a recording, so they pay the residual as well; a profiled process, against an
    uninstrumented one, pays it on every call (SB3 PPO on CUDA: corrected runs +5-10% without it)."""
    found = probes.get(RESIDUAL_PROBE)
    if found is None or "cuda_api" not in costs:
        return costs, ci, None, None
    residual, half = float(found["residual_ns"]), found.get("ci95_ns")
    return *add_cuda_api_cost(costs, ci, residual, half), residual, half


def add_cuda_api_cost(costs: dict[str, float], ci: dict[str, float | None], extra_ns: float,
                      extra_ci95_ns: float | None) -> tuple[dict[str, float], dict[str, float | None]]:
    """``costs`` and ``ci`` with ``extra_ns`` added to the CUDA API cost, the half-widths
    combined as independent errors (None where either is missing)."""
    half = ci.get("cuda_api")
    combined = None if half is None or extra_ci95_ns is None else math.hypot(half, extra_ci95_ns)
    return {**costs, "cuda_api": costs["cuda_api"] + extra_ns}, {**ci, "cuda_api": combined}


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


def _block_costs(block: dict[int, tuple[float, dict[str, float]]]) -> dict[str, float]:
    """One block's costs: per level, the time per iteration it adds over the level below, less
    the costs already known of the events that also grew, over the growth of its own events."""
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
    return costs


def _switched_events(runs: list[list[list[float]]]) -> set[str]:
    """Event types whose layer's windows saw at least ``MIN_EVENTS`` of them: the others (e.g.
    annotations never switched, because the loop runs inside an operation) get no cost."""
    totals: dict[str, float] = {}
    for windows in runs:
        for row in windows:
            if int(row[0]) in WINDOW_EVENTS:
                event = WINDOW_EVENTS[int(row[0])]
                totals[event] = totals.get(event, 0.0) + row[WINDOW_COLUMNS.index(event)]
    return {e for e, total in totals.items() if total >= MIN_EVENTS}


def derive_window_costs(runs: list[list[list[float]]]) -> tuple[dict[str, float], dict[str, float | None], int]:
    """Per-event costs from alternating-window runs: per block, the time per iteration a level
    adds over the level below, less the known costs of the events that also grew, divided by the
    growth of its own events per iteration (``_block_costs``). Returns costs (the median over all
    blocks of all runs), 95% half-widths (``median_ci95``) and the number of blocks.

    A layer whose events total fewer than ``MIN_EVENTS`` gets no cost (``_switched_events``).
    """
    blocks = [block for windows in runs for block in window_blocks(windows)]
    switched = _switched_events(runs)
    samples: dict[str, list[float]] = {}
    for block in blocks:
        for event, cost in _block_costs(block).items():
            if event in switched:
                samples.setdefault(event, []).append(cost)
    stats = {e: median_ci95(v) for e, v in samples.items()}
    return {e: m for e, (m, _) in stats.items()}, {e: h for e, (_, h) in stats.items()}, len(blocks)


def event_times(events: pd.DataFrame) -> list[np.ndarray]:
    """When each counted event happened, per event type of ``WINDOW_COLUMNS``, counted as the
    transitions table counts them: operations and native calls at their start, outermost CUDA
    API calls per thread at theirs, kernels at the start of the API call that launched them
    (what recording a kernel costs is paid at its launch)."""
    kind = events["kind"].to_numpy()
    start, end = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    tid, correlation = events["tid"].to_numpy(), events["correlation"].to_numpy()
    api = np.flatnonzero(kind == int(Kind.CUDA_API))
    per_thread = [api[tid[api] == t] for t in np.unique(tid[api])]
    outer = np.concatenate([ids[outermost(start[ids], end[ids])] for ids in per_thread]) if len(api) else api
    order = np.argsort(correlation[api], kind="stable")
    kernels = np.flatnonzero(kind == int(Kind.GPU_KERNEL))
    at = np.searchsorted(correlation[api][order], correlation[kernels])
    launched = at < len(api)
    launched[launched] = correlation[api][order][at[launched]] == correlation[kernels][launched]
    kernel_times = start[kernels].copy()
    kernel_times[launched] = start[api][order][at[launched]]
    return [start[kind == int(Kind.OPERATION)],
            start[(kind == int(Kind.CPU_CALL)) & (events["category"].to_numpy() > 0)],
            start[outer], kernel_times]


def write_time_in(spans: np.ndarray, events: pd.DataFrame, tid: int) -> np.ndarray:
    """Per span (rows ``[level, start_ns, end_ns, iterations]``), how long thread ``tid`` spent
    writing the trace out (``Kind.PROFILER_WRITE`` intervals, clipped to the span)."""
    writes = events[(events["kind"] == int(Kind.PROFILER_WRITE)) & (events["tid"] == tid)]
    out = np.zeros(len(spans), dtype=np.int64)
    for start, end in zip(writes["start_ns"].to_numpy(), writes["end_ns"].to_numpy()):
        out += np.maximum(np.minimum(spans[:, 2], end) - np.maximum(spans[:, 1], start), 0)
    return out


_CPU_EVENTS = ("annotation", "python_call")


def window_iteration(runs: list[list[list[float]]]) -> tuple[float, float]:
    """How fast the profiled windows ran: the median over blocks of the top level's time per
    iteration, and of its CPU-side events (annotations, intercepted calls) per iteration."""
    tops = [block[max(block)] for windows in runs for block in window_blocks(windows)]
    if not tops:
        return 0.0, 0.0
    return (float(np.median([tau for tau, _ in tops])),
            float(np.median([sum(eps.get(e, 0.0) for e in _CPU_EVENTS) for _, eps in tops])))


BOOTSTRAP_RESAMPLES = 2000


def cost_correlation(runs: list[list[list[float]]]) -> dict[str, dict[str, float]]:
    """How the window costs' errors go together: the correlation of their medians over 2000
    bootstrap resamples of whole blocks (each block gives every cost at once), event -> event ->
    coefficient. Empty with fewer than 6 blocks.

    Why: adding the costs' intervals, as calibration did until 2026-11-23, assumes they all err
    the same way at once. Over resampled blocks they are nearly independent (SB3 PPO on CUDA:
    -0.05 to -0.36), adjacent layers' costs sharing one level's time with opposite signs; so a
    90-block calibration of PPO on CUDA is uncertain to ±5.2% of an iteration, not ±11.8%."""
    blocks = [block for windows in runs for block in window_blocks(windows)]
    events = sorted(_switched_events(runs))
    if len(blocks) < 6 or len(events) < 2:
        return {}
    costs = np.array([[_block_costs(block).get(e, np.nan) for e in events] for block in blocks])
    picks = np.random.default_rng(0).integers(0, len(blocks), size=(BOOTSTRAP_RESAMPLES, len(blocks)))
    with warnings.catch_warnings():  # a resample without any block of some layer: dropped below
        warnings.simplefilter("ignore", RuntimeWarning)
        medians = np.nanmedian(costs[picks], axis=1)
        matrix = np.corrcoef(medians[~np.isnan(medians).any(axis=1)], rowvar=False)
    return {a: {b: float(matrix[i, j]) for j, b in enumerate(events) if not np.isnan(matrix[i, j])}
            for i, a in enumerate(events)}


def joint_half_width(weighted: dict[str, float], correlation: dict[str, dict[str, float]]) -> float:
    """The 95% half-width of a sum of costs times counts, from each term's own half-width
    (``weighted``: event -> count x the cost's half-width) and the costs' correlations:
    ``sqrt(w' R w)``. A pair without a coefficient counts as 1, so their half-widths add up."""
    events = list(weighted)
    total = sum(weighted[a] * weighted[b] * (1.0 if a == b else correlation.get(a, {}).get(b, 1.0))
                for a in events for b in events)
    return math.sqrt(max(total, 0.0))


def correction_uncertainty_pct(runs: list[list[list[float]]], ci95_ns: dict[str, float | None],
                               correlation: dict[str, dict[str, float]]) -> float | None:
    """How uncertain the correction of a profiled iteration is, in % of its time: for the top
    level's median events per iteration, the 95% half-width of ``sum(events x cost)``
    (``joint_half_width`` with the costs' ``correlation``), against that level's median time
    per iteration. None without blocks, or where an event type that happens has a cost without
    an interval.

    Why: this, not the number of blocks, says whether a calibration can resolve a few % at all.
    SB3 PPO on CUDA (~160 ms iterations, 6 blocks per run) had its CUDA API cost to ±0.35 µs in
    one calibration of 48 blocks and to ±1.5 µs in another, and its windows check missed by -12%
    in the second."""
    tops = [block[max(block)] for windows in runs for block in window_blocks(windows)]
    if not tops:
        return None
    weighted = {}
    for event, half in ci95_ns.items():
        per_iteration = float(np.median([eps.get(event, 0.0) for _, eps in tops]))
        if per_iteration <= 0:
            continue  # it does not happen (or has no cost): the correction does not touch it
        if half is None:
            return None
        weighted[event] = per_iteration * half
    tau = float(np.median([t for t, _ in tops]))
    return 100 * joint_half_width(weighted, correlation) / tau if tau > 0 else None


def trace_iteration(processes: list[Any], span_ns: float = 10e6) -> tuple[float, float] | None:
    """The same for a profiled trace: its main process's (the one with most iterations)
    ``rlscope.step()`` iterations, grouped into consecutive spans of at least ``span_ns`` as
    calibration's windows are, less trace writes; the median over spans of the time per
    iteration, and the CPU-side events per iteration. None without enough iterations."""
    best = iterating_process(processes)
    if best is None:
        return None
    main = best.meta.get("main_tid")
    steps = best.events[(best.events["kind"] == int(Kind.STEP)) & (best.events["tid"] == main)].sort_values("start_ns")
    if len(steps) < 2:
        return None
    start, end = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
    cuts = [0]
    for i in range(1, len(start)):
        if start[i] - start[cuts[-1]] >= span_ns:
            cuts.append(i)
    spans = np.array([[0, start[a], end[b - 1], b - a] for a, b in zip(cuts, [*cuts[1:], len(start)])],
                     dtype=np.int64)
    spans = spans[:-1] if len(spans) > 1 else spans  # the last ends with profiling: teardown, not an iteration
    times = (spans[:, 2] - spans[:, 1] - write_time_in(spans, best.events, main)) / spans[:, 3]
    counted = dict(zip(WINDOW_COLUMNS[3:], event_times(best.events[best.events["tid"] == main])))
    events = sum(int(((t >= spans[0, 1]) & (t < spans[-1, 2])).sum()) for e, t in counted.items() if e in _CPU_EVENTS)
    return float(np.median(times)), events / float(spans[:, 3].sum())


def speed_factor(calibration: Calibration, iteration: tuple[float, float] | None) -> float | None:
    """How much slower (>1) or faster the trace's iterations ran than the calibration's profiled
    windows, where they are the same work (CPU-side events per iteration within
    ``SHAPE_TOLERANCE``, time within ``SPEED_LIMIT``); None where they cannot be compared.

    Why: an intercepted call costs interpreter time, so its cost moves with the machine's speed;
    across calibration processes on a shared machine both moved by up to 1.6x. Scaling the
    CPU-side costs by the iteration time (rather than by the durations of the native calls, as
    before) halved the spread of the windowed correction for gym_numpy on this 2-core machine
    (docs/results/overhead.md)."""
    if iteration is None or calibration.iteration_ns <= 0 or iteration[0] <= 0:
        return None
    reference = calibration.cpu_events_per_iteration
    if abs(iteration[1] - reference) > SHAPE_TOLERANCE * max(reference, 1e-9):
        return None
    speed = iteration[0] / calibration.iteration_ns
    return speed if 1 / SPEED_LIMIT <= speed <= SPEED_LIMIT else None


def applied_costs(costs_ns: dict[str, float], speed: float = 1.0) -> dict[str, float]:
    """Per event type, the cost the correction subtracts: none below zero, the CPU-side ones
    scaled by the trace's speed against the calibration's."""
    return {event: max(costs_ns.get(event, 0.0), 0.0) * (speed if layer == "Python" else 1.0)
            for event, (_, layer) in EVENTS.items()}


def first_step_ns(process: Any) -> int | None:
    """When a process first called rlscope.step() (profiled or wall-clock only), or None."""
    if process.meta.get("wall_only"):
        return process.meta.get("first_step_ns")
    events = process.events
    steps = events.loc[events["kind"] == int(Kind.STEP), "start_ns"]
    return int(steps.min()) if len(steps) else None


def profiled_span(process: Any, start_ns: int, end_ns: int) -> dict[str, Any]:
    """A profiled process's main thread from ``start_ns`` to ``end_ns``: ``{"raw_ns",
    "writes_ns", "events": {event type: count}}``."""
    main = process.meta["main_tid"]
    own = process.events[process.events["tid"] == main]
    span = np.array([[0, start_ns, end_ns, 0]], dtype=np.int64)
    return {"raw_ns": end_ns - start_ns, "writes_ns": int(write_time_in(span, own, main)[0]),
            "events": {e: int(((t >= start_ns) & (t < end_ns)).sum())
                       for e, t in zip(WINDOW_COLUMNS[3:], event_times(own))}}


def profiled_startup(process: Any) -> dict[str, Any] | None:
    """A profiled process's start-up, interpreter start to its first ``rlscope.step()``
    (``profiled_span``), or None where it made no step."""
    first = first_step_ns(process)
    return None if first is None else profiled_span(process, int(process.meta["start_ns"]), first)


def profiled_steady(process: Any) -> dict[str, Any] | None:
    """A profiled process from its first ``rlscope.step()`` to its end (``profiled_span``), or
    None where it made no step."""
    first = first_step_ns(process)
    return None if first is None else profiled_span(process, first, int(process.meta["end_ns"]))


def span_removed(span: dict[str, Any], costs_ns: dict[str, float]) -> float:
    """What correction removes from a ``profiled_span`` by its events and writes alone, at
    ``costs_ns`` as ``applied_costs`` gives them."""
    return span["writes_ns"] + sum(costs_ns.get(e, 0.0) * n for e, n in span["events"].items())


def startup_cost(pairs: list[tuple[dict[str, Any], float]], costs_ns: dict[str, float]
                 ) -> tuple[float | None, float | None]:
    """What profiling adds to a start-up beyond its counted events: per pair of a
    ``profiled_startup`` and an uninstrumented start-up (ns), the profiled one less
    ``span_removed``, less the uninstrumented one; the mean and its 95% half-width (None for
    one pair), or (None, None) without pairs.

    Why pairs: a start-up happens once per process, so it cannot be alternated within one;
    the two runs of a repetition run one after the other and share the machine's state."""
    costs = applied_costs(costs_ns)
    residuals = [p["raw_ns"] - span_removed(p, costs) - base for p, base in pairs]
    return mean_ci95(residuals) if residuals else (None, None)


def continuous_cost(pairs: list[tuple[dict[str, Any], float, float]], costs_ns: dict[str, float]
                    ) -> tuple[float | None, float | None]:
    """What a continuously profiled process pays per recorded CUDA API call beyond the costs
    its events are corrected by: per pair of a ``profiled_steady`` (with the speed of its
    iterations against calibration's, ``speed_factor``) and an uninstrumented run's time from
    its first step (ns), the profiled one less ``span_removed`` less the uninstrumented one, over
    the profiled one's CUDA API calls; the mean and its 95% half-width (None for one pair), or
    (None, None) where no pair recorded a CUDA API call.

    Why: alternating windows see what a layer costs while it is switched on for a few
    iterations. A process that records with CUPTI throughout paid more on the H100: SB3 PPO on
    CUDA's whole profiled runs ran 43% over uninstrumented ones where the windows accounted for
    19% (docs/results/overhead.md). Whole runs of the same command, one beside the other,
    measure it as it is paid; it is put on the CUDA API calls because only runs that record
    them pay it (the CPU workloads' corrected runs meet ±5% without it)."""
    values = []
    for steady, speed, base in pairs:
        calls = steady["events"].get("cuda_api", 0)
        if calls > 0:
            values.append((steady["raw_ns"] - span_removed(steady, applied_costs(costs_ns, speed)) - base) / calls)
    return mean_ci95(values) if values else (None, None)


def applied_startup_ns(calibration: Calibration, speed: float = 1.0) -> tuple[float, float]:
    """The start-up cost the correction removes and its half-width: none below zero, scaled by
    the trace's speed as the other interpreter-side costs are."""
    return max(calibration.startup_ns or 0.0, 0.0) * speed, (calibration.startup_ci95_ns or 0.0) * speed


def iterating_process(processes: list[Any]) -> Any:
    """The process of a trace that made the most ``rlscope.step()`` iterations on its main
    thread (the training loop's), or None where none did."""
    best, most = None, 0
    for process in processes:
        events = process.events
        n = int(((events["kind"] == int(Kind.STEP)) & (events["tid"] == process.meta.get("main_tid"))).sum())
        if n > most:
            best, most = process, n
    return best


def correct_breakdown(breakdown: pd.DataFrame, transitions: pd.DataFrame, calibration: Calibration,
                      speed: float = 1.0, startup_process: str | None = None) -> pd.DataFrame:
    """The breakdown with a ``corrected_ns`` column: each operation's CPU time less the cost of
    the events recorded in it, taken from the layer the events inflate (CPU-only rows first,
    then rows that overlap the GPU), never below zero; rlscope's own trace writes (the
    ``Profiler`` layer, timed as they happened) are removed whole. Also ``overhead_ns``: what
    was removed, and ``uncertainty_ns``: the 95% half-width of what was removed per operation
    and layer (``joint_half_width``, on the row the removal started from; summed over
    rows, a bound).

    ``speed``: the trace's machine speed relative to the calibration's (``speed_factor``); it
    scales the costs of the CPU-side events (annotations, intercepted calls).
    ``startup_process``: the process whose start-up the calibration's start-up cost is removed
    from (``applied_startup_ns``): from its main thread's Python time outside operations, where
    imports run, largest row first."""
    out = breakdown.copy()
    out["corrected_ns"] = out["time_ns"].astype(np.float64)
    out.loc[out["cpu"] == PROFILER_LAYER, "corrected_ns"] = 0.0  # measured, not estimated
    keys = ["process", "thread", "phase", "operation"]
    counts = transitions.set_index(keys + ["transition"])["count"] if not transitions.empty else None
    out["uncertainty_ns"] = 0.0
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
    out["corrected_ns"] = out["corrected_ns"].round().astype(np.int64)
    out["uncertainty_ns"] = out["uncertainty_ns"].round().astype(np.int64)
    return out


def _take(out: pd.DataFrame, rows: list[Any], remove: float, half: float) -> None:
    """Remove ``remove`` ns from ``rows`` of ``out``'s ``corrected_ns`` in order, none below zero;
    the first row carries the removal's uncertainty ``half``."""
    if rows:
        out.at[rows[0], "uncertainty_ns"] += half
    for idx in rows:
        taken = min(out.at[idx, "corrected_ns"], remove)
        out.at[idx, "corrected_ns"] -= taken
        remove -= taken
        if remove <= 0:
            break
