"""Per-event costs from alternating windows (``rlscope.collect.windows``).

One process switches rlscope's layers on and off every few milliseconds. Windows are grouped
into palindromic blocks; per block, the time per iteration a level adds over the level below,
less the known costs of the other events that grew with it, over the growth of its own events
per iteration, is one sample of that level's cost. Neighbouring windows share the machine's
state, so these samples are far tighter than differences between whole runs.
"""

from __future__ import annotations

import warnings

import numpy as np

from rlscope.calibrate.model import CPU_EVENTS, MIN_EVENTS, WINDOW_COLUMNS
from rlscope.calibrate.stats import joint_half_width, median_ci95

__all__ = ["WINDOW_EVENTS", "window_blocks", "derive_window_costs", "window_iteration", "cost_correlation",
           "correction_uncertainty_pct"]

# Alternating windows (rlscope.collect.windows): level -> the event type whose cost it adds.
WINDOW_EVENTS = {1: "annotation", 2: "python_call", 3: "cuda_api", 4: "gpu_activity"}


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


def window_iteration(runs: list[list[list[float]]]) -> tuple[float, float]:
    """How fast the profiled windows ran: the median over blocks of the top level's time per
    iteration, and of its CPU-side events (annotations, intercepted calls) per iteration."""
    tops = [block[max(block)] for windows in runs for block in window_blocks(windows)]
    if not tops:
        return 0.0, 0.0
    return (float(np.median([tau for tau, _ in tops])),
            float(np.median([sum(eps.get(e, 0.0) for e in CPU_EVENTS) for _, eps in tops])))


BOOTSTRAP_RESAMPLES = 2000


def cost_correlation(runs: list[list[list[float]]]) -> dict[str, dict[str, float]]:
    """How the window costs' errors go together: the correlation of their medians over 2000
    bootstrap resamples of whole blocks (each block gives every cost at once), event -> event ->
    coefficient. Empty with fewer than 6 blocks.

    Why: adding the costs' intervals assumes they all err the same way at once. Over resampled
    blocks they are nearly independent or anti-correlated (adjacent layers' costs share one
    level's time with opposite signs), so added intervals would overstate the uncertainty."""
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


def correction_uncertainty_pct(runs: list[list[list[float]]], ci95_ns: dict[str, float | None],
                               correlation: dict[str, dict[str, float]]) -> float | None:
    """How uncertain the correction of a profiled iteration is, in % of its time: for the top
    level's median events per iteration, the 95% half-width of ``sum(events x cost)``
    (``joint_half_width`` with the costs' ``correlation``), against that level's median time
    per iteration. None without blocks, or where an event type that happens has a cost without
    an interval.

    Why: this, not the number of blocks, says whether a calibration can resolve a few % at all:
    two calibrations of one slow workload with as many blocks can pin its costs to very different
    precision (measured in docs/results/overhead.md)."""
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
