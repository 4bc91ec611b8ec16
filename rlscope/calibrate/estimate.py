"""Estimation: per-event costs and the calibration record from the measurements of its runs.

Costs come from alternating windows (``window_costs``) where the workload calls
``rlscope.step()``, else from a ladder of whole runs, each adding one layer, repeated and paired
per round::

    cost_k = (T_k - T_{k-1} - sum_{j<k} (N_kj - N_{k-1,j}) * cost_j) / N_kk

Three costs are measured beside those, because windows cannot see them:

- the start-up (interpreter start to the first ``rlscope.step()``): profiled start-ups less what
  their events are corrected by, against uninstrumented ones run beside them (``startup_cost``);
- what CUPTI's recording leaves on every later CUDA call (``rlscope.calibrate.residual``):
  windows that follow a recording all pay it, so their differences lack it (``add_residual``);
- what a process recording with CUPTI throughout pays per CUDA API call beyond the windows'
  costs, from whole profiled runs beside uninstrumented ones (``continuous_cost``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from rlscope.calibrate.correct import applied_costs, span_removed
from rlscope.calibrate.model import (
    CONFIGS,
    MIN_EVENTS,
    PROFILED_STARTUP,
    RESIDUAL,
    STARTUP,
    WINDOWS,
    Calibration,
)
from rlscope.calibrate.speed import speed_factor
from rlscope.calibrate.stats import mean_ci95
from rlscope.calibrate.window_costs import (
    correction_uncertainty_pct,
    cost_correlation,
    derive_window_costs,
    window_iteration,
)
from rlscope.errors import RlscopeError

__all__ = ["derive_calibration", "derive_costs", "add_residual", "add_cuda_api_cost", "startup_cost",
           "continuous_cost", "RESIDUAL_PROBE"]


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


# The residual probe (``rlscope.calibrate.residual``) whose cost is added to each recorded CUDA API
# call: kernel launches are most of the outermost API calls of RL workloads, PyTorch's and XLA's
# alike, and a launch keeps more of a residual than a stream query does.
RESIDUAL_PROBE = "driver_launch"


def add_residual(costs: dict[str, float], ci: dict[str, float | None], probes: dict[str, dict[str, Any]]
                 ) -> tuple[dict[str, float], dict[str, float | None], float | None, float | None]:
    """The window costs with what CUPTI's recording leaves on every later CUDA call added to the
    CUDA API cost (``RESIDUAL_PROBE`` of ``probes``, as ``rlscope.calibrate.residual``
    measures them), its half-width combined with the window cost's as independent errors; also
    the residual and its half-width (None, None where the probe is missing).

    Why: the windows' cost is the profiled windows' time less the unprofiled windows', and those
    follow a recording, so they pay the residual as well; a profiled process, against an
    uninstrumented one, pays it on every call, so without it GPU workloads are under-corrected."""
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
    iterations; a process that records with CUPTI throughout can pay more than that. Whole runs
    of the same command, one beside the other, measure it as it is paid; it is put on the CUDA
    API calls because only runs that record them pay it."""
    values = []
    for steady, speed, base in pairs:
        calls = steady["events"].get("cuda_api", 0)
        if calls > 0:
            values.append((steady["raw_ns"] - span_removed(steady, applied_costs(costs_ns, speed)) - base) / calls)
    return mean_ci95(values) if values else (None, None)


def derive_calibration(runs: list[dict[str, Any]], machine: dict[str, Any], command: list[str]) -> Calibration:
    """The calibration that the measurements ``runs`` give (``rlscope.calibrate.ladder`` makes
    them: alternating windows, start-up pairs, whole runs of each configuration, the residual
    probe), for ``command`` on ``machine``."""
    alternating = [w for r in runs if r["config"] == WINDOWS for w in r["windows"]]
    whole = [r for r in runs if r["config"] not in (WINDOWS, STARTUP, PROFILED_STARTUP, RESIDUAL)]
    costs, ci, blocks = derive_window_costs(alternating) if alternating else ({}, {}, 0)
    residual, residual_ci = None, None
    probe = next((r for r in runs if r["config"] == RESIDUAL), None)
    if probe is not None:
        costs, ci, residual, residual_ci = add_residual(costs, ci, probe["probes"])
    reps = len({r["repetition"] for r in runs if r["config"] == WINDOWS})
    if whole:
        more, more_ci, reps_whole = derive_costs(whole, known=costs)
        costs, ci = {**costs, **more}, {**ci, **more_ci}
        reps = min(reps, reps_whole) if alternating else reps_whole
    iteration_ns, cpu_events = window_iteration(alternating)  # the machine's speed while calibrating
    calibration = Calibration(costs_ns=costs, ci95_ns=ci, repetitions=reps, machine=machine, command=tuple(command),
                              runs=tuple(runs), blocks=blocks, iteration_ns=iteration_ns,
                              cpu_events_per_iteration=cpu_events, cupti_residual_ns=residual,
                              cupti_residual_ci95_ns=residual_ci)
    bases = {(r["repetition"], r["pair"]): r for r in runs if r["config"] == STARTUP}
    paired = [(r, bases[key]) for r in runs if r["config"] in (WINDOWS, PROFILED_STARTUP)
              and r.get("startup") and (key := (r["repetition"], r["pair"])) in bases]
    steady = [(r["steady"], speed_factor(calibration, tuple(r["iteration"]) if r["iteration"] else None) or 1.0,
               base["steady_ns"]) for r, base in paired if r.get("steady") and "steady_ns" in base]
    continuous, continuous_ci = None, None
    if "cuda_api" in costs and steady:
        continuous, continuous_ci = continuous_cost(steady, costs)
        if continuous is not None:
            costs, ci = add_cuda_api_cost(costs, ci, continuous, continuous_ci)
    correlation = cost_correlation(alternating) if alternating else {}
    startup, startup_ci = startup_cost([(r["startup"], base["startup_ns"]) for r, base in paired], costs)
    return dataclasses.replace(
        calibration, costs_ns=costs, ci95_ns=ci, correlation=correlation,
        uncertainty_pct=correction_uncertainty_pct(alternating, ci, correlation) if alternating else None,
        startup_ns=startup, startup_ci95_ns=startup_ci, continuous_ns=continuous, continuous_ci95_ns=continuous_ci)
