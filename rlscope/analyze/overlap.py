"""Overlap sweep: where each operation's time went, as sets of active resources.

The timeline of one thread is cut at every event boundary into elementary segments. For each
segment the sweep knows the innermost operation, the CPU layer (CUDA API inside a native call
inside Python: the innermost wins), whether GPU work of that operation is running, and the
phase. Summing segment durations by (phase, operation, CPU layer, GPU) gives the breakdown;
the CPU-side rows of a thread sum exactly to its profiled wall time. GPU work launched by one
operation while the CPU is in another is charged to the launching operation as a GPU-only row.

Everything is vectorised with NumPy: a sort of the boundaries, then linear passes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from rlscope.analyze.attribution import outermost
from rlscope.analyze.caveats import add_caveat, dropped_events_caveat, mark_rows
from rlscope.trace.reader import ProcessTrace
from rlscope.trace.schema import GPU_WORK_KINDS, Category, Kind

__all__ = ["CPU_LAYERS", "UNANNOTATED", "analyze_process", "breakdown", "transitions", "ThreadSweep",
           "sweep_thread"]

# "Profiler": rlscope writing its buffered events out (Kind.PROFILER_WRITE), measured exactly.
CPU_LAYERS = ("Python", "Backend", "Simulator", "CUDA API", "Profiler", "none")
_PYTHON, _BACKEND, _SIMULATOR, _CUDA_API, _PROFILER, _NO_CPU = range(6)
UNANNOTATED = "(unannotated)"


def _paint(nseg: int, lo: np.ndarray, hi: np.ndarray, value: np.ndarray, depth: np.ndarray,
           base: int) -> np.ndarray:
    """Per segment, the value of the deepest interval covering it, ``base`` where none does.

    Interval k covers segments lo[k] .. hi[k]-1. Intervals of one depth are disjoint (nesting
    guarantees it) and every endpoint has its own position in the sweep's order, so marks are
    assigned, not accumulated: one scatter and one cumulative sum per nesting level.
    """
    if len(depth) == 0:
        return np.full(nseg, base, dtype=np.int32)
    low, high = int(depth.min()), int(depth.max())
    out = None
    for d in range(low, high + 1):
        m = depth == d if high > low else slice(None)
        delta = np.zeros(nseg + 1, dtype=np.int32)  # name codes: int32 halves the memory traffic
        delta[lo[m]] = value[m] - base
        delta[hi[m]] = base - value[m]
        painted = np.cumsum(delta[:nseg], dtype=np.int32)
        if out is None:
            painted += base
            out = painted
        else:
            covered = painted != 0
            out[covered] = painted[covered] + base
    return out


def _covered(nseg: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per segment, whether any interval (overlapping ones allowed) covers it."""
    delta = np.zeros(nseg + 1, dtype=np.int32)
    delta[lo] = 1
    delta[hi] = -1
    return np.cumsum(delta[:nseg], dtype=np.int32) > 0


@dataclasses.dataclass(frozen=True)
class _Events:
    """The columns of one process (or thread) as NumPy arrays; ``name`` as integer codes."""

    kind: np.ndarray
    category: np.ndarray
    tid: np.ndarray
    depth: np.ndarray
    start: np.ndarray
    end: np.ndarray
    name: np.ndarray
    operation: np.ndarray

    @classmethod
    def of(cls, trace: ProcessTrace) -> tuple[_Events, list[str]]:
        ev = trace.events
        if ev.empty:
            empty = np.zeros(0, dtype=np.int64)
            return cls(*(empty,) * 8), []
        # The writer's name dictionary only grows, so categorical codes equal its symbol ids:
        # the ``operation`` column of GPU events (a symbol id) indexes the same names.
        names = list(ev["name"].cat.categories)
        return cls(ev["kind"].to_numpy(), ev["category"].to_numpy(), ev["tid"].to_numpy(),
                   ev["depth"].to_numpy(), ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy(),
                   ev["name"].cat.codes.to_numpy().astype(np.int32), ev["operation"].to_numpy()), names

    def select(self, mask: np.ndarray) -> _Events:
        return _Events(*(getattr(self, f.name)[mask] for f in dataclasses.fields(self)))


@dataclasses.dataclass(frozen=True)
class ThreadSweep:
    """The per-segment state of one thread's timeline (inputs to breakdown and transitions)."""

    bounds: np.ndarray  # segment boundaries, ns (len = segments + 1)
    op: np.ndarray  # innermost operation's dense index per segment (the last index outside operations)
    cpu: np.ndarray  # CPU layer index per segment
    phase: np.ndarray  # phase dense index per segment (the last index outside phases)
    gpu_ops: dict[int, np.ndarray]  # operation index -> segments where its GPU work runs
    lo: np.ndarray  # per event: index of the segment it starts in



def sweep_thread(ev: _Events, phases: _Events, start_ns: int, end_ns: int, op_index: np.ndarray,
                 phase_index: np.ndarray) -> ThreadSweep:
    """Cut one thread's events into elementary segments and label each segment.

    Every endpoint gets its own position in one sorted order (key ``2 * t + is_start``: at
    equal times ends come first, so adjacent intervals never overlap), and segments run
    between consecutive positions; duplicates make zero-length segments, which weigh nothing.
    ``op_index`` / ``phase_index`` map name codes (and -1, their last entry) to dense indices,
    the last dense index meaning "none".
    """
    starts, ends = ev.start, ev.end
    if len(starts) and (starts.min() < start_ns or ends.max() > end_ns):
        starts, ends = np.clip(starts, start_ns, end_ns), np.clip(ends, start_ns, end_ns)
    n, n_ph = len(starts), len(phases.start)
    keys = np.concatenate((starts * 2 + 1, ends * 2, phases.start * 2 + 1, phases.end * 2,
                           [start_ns * 2, end_ns * 2 + 1]))
    order = np.argsort(keys, kind="stable")  # runs of sorted times: timsort is near-linear
    pos = np.empty_like(order)
    pos[order] = np.arange(len(order))
    bounds = keys[order] >> 1
    nseg = len(bounds) - 1
    lo, hi = pos[:n], pos[n:2 * n]
    plo, phi = pos[2 * n:2 * n + n_ph], pos[2 * n + n_ph:2 * n + 2 * n_ph]

    is_op = ev.kind == int(Kind.OPERATION)
    op = _paint(nseg, lo[is_op], hi[is_op], op_index[ev.name[is_op]], ev.depth[is_op], int(op_index[-1]))
    # CPU layer indices equal Category values (Python 0, Backend 1, Simulator 2).
    is_call = ev.kind == int(Kind.CPU_CALL)
    cpu = _paint(nseg, lo[is_call], hi[is_call], ev.category[is_call], ev.depth[is_call],
                 _PYTHON)
    is_api = ev.kind == int(Kind.CUDA_API)
    if is_api.any():
        cpu[_covered(nseg, lo[is_api], hi[is_api])] = _CUDA_API
    is_write = ev.kind == int(Kind.PROFILER_WRITE)
    if is_write.any():
        cpu[_covered(nseg, lo[is_write], hi[is_write])] = _PROFILER
    phase = _paint(nseg, plo, phi, phase_index[phases.name], np.zeros(n_ph, dtype=np.int16), int(phase_index[-1]))

    is_gpu = np.isin(ev.kind, GPU_WORK_KINDS)
    gpu_ops = {int(op_index[o]): _covered(nseg, lo[is_gpu & (ev.operation == o)], hi[is_gpu & (ev.operation == o)])
               for o in np.unique(ev.operation[is_gpu])}
    return ThreadSweep(bounds, op, cpu, phase, gpu_ops, lo)


_TRANSITIONS = {
    "Annotations": (int(Kind.OPERATION), None),  # not a transition: rlscope's own events, for overhead correction
    "Python->Backend": (int(Kind.CPU_CALL), int(Category.BACKEND)),
    "Python->Simulator": (int(Kind.CPU_CALL), int(Category.SIMULATOR)),
    "Backend->CUDA": (int(Kind.CUDA_API), None),
    "GPU kernels": (int(Kind.GPU_KERNEL), None),
}


def _dense(codes: np.ndarray, n_names: int) -> tuple[np.ndarray, np.ndarray]:
    """Name codes used -> dense indices; returns (index of length n_names + 1, codes used)."""
    used = np.unique(codes[codes >= 0])
    index = np.full(n_names + 1, len(used), dtype=np.int32)  # the last entry serves code -1
    index[used] = np.arange(len(used), dtype=np.int32)
    return index, used


def analyze_process(trace: ProcessTrace) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both tables of one process from one sweep per thread: (breakdown, transitions)."""
    events, names = _Events.of(trace)
    start = int(trace.meta["start_ns"])
    end = int(trace.meta.get("end_ns") or (events.end.max() if len(events.end) else start))
    main = trace.meta.get("main_tid")
    is_phase = events.kind == int(Kind.PHASE)
    is_step = events.kind == int(Kind.STEP)
    is_gpu = np.isin(events.kind, GPU_WORK_KINDS)
    phases = events.select(is_phase)
    op_index, op_codes = _dense(np.concatenate((events.name[events.kind == int(Kind.OPERATION)],
                                                events.operation[is_gpu])), len(names))
    phase_index, phase_codes = _dense(np.concatenate((phases.name, events.name[is_step])), len(names))
    op_labels = [names[c] for c in op_codes] + [UNANNOTATED]
    phase_labels = [names[c] for c in phase_codes] + [UNANNOTATED]
    iterations = np.bincount(phase_index[events.name[is_step]], minlength=len(phase_labels))
    # Phase and step events stay in the timeline: their endpoints only add empty boundaries.
    tids = np.unique(events.tid) if len(events.tid) and events.tid.min() != events.tid.max() else events.tid[:1]
    threads = [main] + sorted(set(tids.tolist()) - {main, 0})
    b_rows: list[tuple] = []
    t_rows: list[tuple] = []
    for tid in threads:
        ev = events if len(threads) == 1 else events.select(events.tid == tid)
        if tid != main and not (ev.kind == int(Kind.OPERATION)).any():
            continue
        sw = sweep_thread(ev, phases, start, end, op_index, phase_index)
        thread = "main" if tid == main else str(tid)
        b_rows += _breakdown_rows(sw, op_labels, phase_labels, drop_unannotated=tid != main,
                                  process=trace.process, thread=thread)
        t_rows += _transition_rows(sw, ev, op_index, op_labels, phase_labels, iterations, trace.process, thread)
    frame = pd.DataFrame(b_rows, columns=["process", "thread", "phase", "operation", "cpu", "gpu", "resources",
                                          "time_ns"])
    frame["time_s"] = frame["time_ns"] / 1e9
    counts = pd.DataFrame(t_rows, columns=["process", "thread", "phase", "operation", "transition", "count",
                                           "iterations", "per_iteration"])
    counts = mark_rows(frame, counts, trace.meta, dict(zip(phase_labels, iterations.tolist())))
    for table in (frame, counts):
        add_caveat(table, dropped_events_caveat(trace.dropped_events))
    return frame, counts


def _breakdown_rows(sw: ThreadSweep, op_labels: list[str], phase_labels: list[str], drop_unannotated: bool,
                    process: str, thread: str) -> list[tuple]:
    n_ops, n_cpu, none = len(op_labels), len(CPU_LAYERS), len(op_labels) - 1
    seg_dt = np.diff(sw.bounds)
    op, phase = sw.op.astype(np.int64), sw.phase.astype(np.int64)
    dt = np.where(op == none, 0, seg_dt) if drop_unannotated else seg_dt  # other threads: their operations only
    own_gpu = np.zeros(len(dt), dtype=np.int64)
    keys, weights = [], []
    for o, cov in sw.gpu_ops.items():
        own_gpu |= cov & (op == o)
        foreign = cov & (op != o)
        keys.append(((phase[foreign] * n_ops + o) * n_cpu + _NO_CPU) * 2 + 1)
        weights.append(seg_dt[foreign])
    keys.insert(0, ((phase * n_ops + op) * n_cpu + sw.cpu) * 2 + own_gpu)
    weights.insert(0, dt)
    # Exact in float64: every partial sum is an integer number of ns far below 2**53.
    sums = np.bincount(np.concatenate(keys), weights=np.concatenate(weights).astype(np.float64))
    rows = []
    for k in np.flatnonzero(sums):
        gpu = bool(k % 2)
        cpu_i = (k // 2) % n_cpu
        op_i = (k // 2 // n_cpu) % n_ops
        ph_i = k // 2 // n_cpu // n_ops
        cpu_name = CPU_LAYERS[cpu_i]
        resources = "+".join(([cpu_name] if cpu_i != _NO_CPU else []) + (["GPU"] if gpu else []))
        rows.append((process, thread, phase_labels[ph_i], op_labels[op_i], cpu_name, gpu, resources,
                     int(round(sums[k]))))
    return rows


def _transition_rows(sw: ThreadSweep, ev: _Events, op_index: np.ndarray, op_labels: list[str],
                     phase_labels: list[str], iterations: np.ndarray, process: str, thread: str) -> list[tuple]:
    rows = []
    n_ops = len(op_labels)
    for transition, (kind, category) in _TRANSITIONS.items():
        mask = ev.kind == kind
        if category is not None:
            mask &= ev.category == category
        if not mask.any():
            continue
        if kind == int(Kind.CUDA_API):  # a runtime call and the driver calls inside it are one transition
            api = np.flatnonzero(mask)
            mask[api[~outermost(ev.start[api], ev.end[api])]] = False
        seg = np.minimum(sw.lo[mask], len(sw.op) - 1)
        op = op_index[ev.operation[mask]] if kind == int(Kind.GPU_KERNEL) else sw.op[seg]
        counts = np.bincount(sw.phase[seg].astype(np.int64) * n_ops + op)
        for k in np.flatnonzero(counts):
            ph_i, op_i = divmod(int(k), n_ops)
            n_it = int(iterations[ph_i])
            count = int(counts[k])
            rows.append((process, thread, phase_labels[ph_i], op_labels[op_i], transition, count, n_it,
                         count / n_it if n_it else float("nan")))
    return rows


def breakdown(trace: ProcessTrace) -> pd.DataFrame:
    """Time per process x thread x phase x operation x resource set.

    Columns: ``process, thread, phase, operation, cpu, gpu, resources, time_ns, time_s, caveat``
    where ``cpu`` is one of Python / Backend / Simulator / CUDA API / Profiler (rlscope writing its
    events out) / none, ``resources`` names the set and ``caveat`` says why a row may be wrong
    ("" where nothing is known to be: ``rlscope.analyze.caveats``), e.g.::

        process      thread phase    operation  cpu      gpu   resources    time_ns  caveat
        train[4242]  main   default  inference  Backend  False Backend      812345
        train[4242]  main   default  inference  Python   False Python       402100
    """
    return analyze_process(trace)[0]


def transitions(trace: ProcessTrace) -> pd.DataFrame:
    """Transition counts per process x thread x phase x operation, total and per iteration.

    Columns: ``process, thread, phase, operation, transition, count, iterations, per_iteration,
    caveat`` (as the breakdown's) with transition one of ``Python->Backend``, ``Python->Simulator``,
    ``Backend->CUDA`` (outermost CUDA API calls) and ``GPU kernels``, plus ``Annotations`` (the operation's own
    enter/exit pairs, which overhead correction needs). A transition belongs to the operation
    innermost at its start; iterations are the ``rlscope.step()`` intervals of the phase.
    """
    return analyze_process(trace)[1]
