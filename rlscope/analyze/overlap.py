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

from rlscope.trace.reader import ProcessTrace
from rlscope.trace.schema import Category, Kind

__all__ = ["CPU_LAYERS", "UNANNOTATED", "breakdown", "transitions", "ThreadSweep", "sweep_thread"]

CPU_LAYERS = ("Python", "Backend", "Simulator", "CUDA API", "none")
_PYTHON, _BACKEND, _SIMULATOR, _CUDA_API, _NO_CPU = range(5)
UNANNOTATED = "(unannotated)"
_GPU_KINDS = (int(Kind.GPU_KERNEL), int(Kind.GPU_MEMCPY), int(Kind.GPU_MEMSET))


def _paint(nseg: int, lo: np.ndarray, hi: np.ndarray, value: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Per segment, the value of the deepest interval covering it (-1 if none).

    Intervals of one depth must be disjoint, which nesting guarantees. ``lo``/``hi`` are
    segment indices: interval k covers segments lo[k] .. hi[k]-1.
    """
    out = np.full(nseg, -1, dtype=np.int64)
    for d in np.unique(depth):
        m = depth == d
        weight = value[m].astype(np.float64) + 1.0
        delta = np.bincount(lo[m], weights=weight, minlength=nseg + 1)
        delta -= np.bincount(hi[m], weights=weight, minlength=nseg + 1)
        painted = np.rint(np.cumsum(delta[:nseg])).astype(np.int64)
        covered = painted > 0
        out[covered] = painted[covered] - 1
    return out


def _covered(nseg: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per segment, whether any interval (overlapping ones allowed) covers it."""
    delta = np.bincount(lo, minlength=nseg + 1) - np.bincount(hi, minlength=nseg + 1)
    return np.cumsum(delta[:nseg]) > 0


@dataclasses.dataclass(frozen=True)
class ThreadSweep:
    """The per-segment state of one thread's timeline (inputs to breakdown and transitions)."""

    bounds: np.ndarray  # segment boundaries, ns (len = segments + 1)
    op: np.ndarray  # innermost operation name code per segment, -1 = none
    cpu: np.ndarray  # CPU layer index per segment
    phase: np.ndarray  # phase name code per segment, -1 = none
    gpu_ops: dict[int, np.ndarray]  # operation code -> segments where its GPU work runs

    def segment_of(self, t: np.ndarray) -> np.ndarray:
        return np.clip(np.searchsorted(self.bounds, t, side="right") - 1, 0, len(self.bounds) - 2)


def sweep_thread(ev: pd.DataFrame, phases: pd.DataFrame, start_ns: int, end_ns: int) -> ThreadSweep:
    """Cut one thread's events (``ev``; name as integer codes) into segments and label them."""
    kind = ev["kind"].to_numpy()
    starts = np.clip(ev["start_ns"].to_numpy(), start_ns, end_ns)
    ends = np.clip(ev["end_ns"].to_numpy(), start_ns, end_ns)
    p_starts = np.clip(phases["start_ns"].to_numpy(), start_ns, end_ns)
    p_ends = np.clip(phases["end_ns"].to_numpy(), start_ns, end_ns)
    bounds = np.concatenate(([start_ns, end_ns], starts, ends, p_starts, p_ends))
    bounds.sort(kind="stable")  # near-sorted input: timsort is close to linear
    bounds = bounds[np.concatenate(([True], bounds[1:] != bounds[:-1]))]
    nseg = len(bounds) - 1
    lo = np.searchsorted(bounds, starts)
    hi = np.searchsorted(bounds, ends)
    name = ev["name"].to_numpy()
    depth = ev["depth"].to_numpy()

    is_op = kind == int(Kind.OPERATION)
    op = _paint(nseg, lo[is_op], hi[is_op], name[is_op], depth[is_op])

    cpu = np.full(nseg, _PYTHON, dtype=np.int64)
    is_call = kind == int(Kind.CPU_CALL)
    category = ev["category"].to_numpy()
    call_cat = _paint(nseg, lo[is_call], hi[is_call], category[is_call], depth[is_call])
    cpu[call_cat == int(Category.BACKEND)] = _BACKEND
    cpu[call_cat == int(Category.SIMULATOR)] = _SIMULATOR
    is_api = kind == int(Kind.CUDA_API)
    cpu[_covered(nseg, lo[is_api], hi[is_api])] = _CUDA_API

    plo, phi = np.searchsorted(bounds, p_starts), np.searchsorted(bounds, p_ends)
    phase = _paint(nseg, plo, phi, phases["name"].to_numpy(), np.zeros(len(phases), dtype=np.int64))

    is_gpu = np.isin(kind, _GPU_KINDS)
    gpu_op = ev["operation"].to_numpy()
    gpu_ops = {int(o): _covered(nseg, lo[is_gpu & (gpu_op == o)], hi[is_gpu & (gpu_op == o)])
               for o in np.unique(gpu_op[is_gpu])}
    return ThreadSweep(bounds, op, cpu, phase, gpu_ops)


def _codes(trace: ProcessTrace) -> tuple[pd.DataFrame, list[str]]:
    events = trace.events.copy()
    names = list(events["name"].cat.categories) if len(events) else []
    # The writer's name dictionary only grows, so categorical codes equal its symbol ids: the
    # ``operation`` column of GPU events (a symbol id) indexes ``names`` too.
    events["name"] = events["name"].cat.codes.astype(np.int64) if len(events) else events["name"]
    return events, names


def _process_frames(trace: ProcessTrace) -> tuple[pd.DataFrame, list[str], pd.DataFrame, int, int]:
    events, names = _codes(trace)
    start = int(trace.meta["start_ns"])
    end = int(trace.meta.get("end_ns") or (events["end_ns"].max() if len(events) else start))
    phases = events[events["kind"] == int(Kind.PHASE)]
    return events, names, phases, start, end


def breakdown(trace: ProcessTrace) -> pd.DataFrame:
    """Time per process x thread x phase x operation x resource set.

    Columns: ``process, thread, phase, operation, cpu, gpu, resources, time_ns, time_s`` where
    ``cpu`` is one of Python / Backend / Simulator / CUDA API / none and ``resources`` names the
    set, e.g.::

        process      thread phase    operation  cpu      gpu   resources    time_ns
        train[4242]  main   default  inference  Backend  False Backend      812345
        train[4242]  main   default  inference  Python   False Python       402100
    """
    events, names, phases, start, end = _process_frames(trace)
    main = trace.meta.get("main_tid")
    label = names + [UNANNOTATED]
    rows = []
    for tid in [main] + sorted(set(events["tid"].unique()) - {main, 0}):
        ev = events[(events["tid"] == tid) & (events["kind"] != int(Kind.PHASE)) & (events["kind"] != int(Kind.STEP))]
        if tid != main and not (ev["kind"] == int(Kind.OPERATION)).any():
            continue
        sw = sweep_thread(ev, phases, start, end)
        dt = np.diff(sw.bounds)
        op = np.where(sw.op < 0, len(names), sw.op)
        if tid != main:  # other threads: only what their operations cover
            dt = np.where(sw.op < 0, 0, dt)
        phase = np.where(sw.phase < 0, len(names), sw.phase)
        own_gpu = np.zeros(len(dt), dtype=bool)
        for o, cov in sw.gpu_ops.items():
            own_gpu |= cov & (op == (o if o >= 0 else len(names)))
        n_ops, n_cpu = len(label), len(CPU_LAYERS)
        key = ((phase * n_ops + op) * n_cpu + sw.cpu) * 2 + own_gpu
        extra_keys, extra_dt = [], []
        for o, cov in sw.gpu_ops.items():
            oo = o if o >= 0 else len(names)
            foreign = cov & (op != oo)
            extra_keys.append(((phase[foreign] * n_ops + oo) * n_cpu + _NO_CPU) * 2 + 1)
            extra_dt.append(np.diff(sw.bounds)[foreign])
        all_keys = np.concatenate([key, *extra_keys])
        all_dt = np.concatenate([dt, *extra_dt])
        sums = np.bincount(all_keys, weights=all_dt.astype(np.float64))
        for k in np.flatnonzero(sums):
            gpu = bool(k % 2)
            cpu_i = (k // 2) % n_cpu
            op_i = (k // 2 // n_cpu) % n_ops
            ph_i = k // 2 // n_cpu // n_ops
            cpu_name = CPU_LAYERS[cpu_i]
            resources = "+".join(([cpu_name] if cpu_i != _NO_CPU else []) + (["GPU"] if gpu else []))
            rows.append((trace.process, "main" if tid == main else str(tid), label[ph_i], label[op_i], cpu_name,
                         gpu, resources, int(round(sums[k]))))
    frame = pd.DataFrame(rows, columns=["process", "thread", "phase", "operation", "cpu", "gpu", "resources",
                                        "time_ns"])
    frame["time_s"] = frame["time_ns"] / 1e9
    return frame


def transitions(trace: ProcessTrace) -> pd.DataFrame:
    """Transition counts per process x thread x phase x operation, total and per iteration.

    Columns: ``process, thread, phase, operation, transition, count, iterations, per_iteration``
    with transition one of ``Python->Backend``, ``Python->Simulator``, ``Backend->CUDA``
    (CUDA API calls) and ``GPU kernels``. Iterations are the ``rlscope.step()`` intervals of
    the phase.
    """
    events, names, phases, start, end = _process_frames(trace)
    main = trace.meta.get("main_tid")
    label = names + [UNANNOTATED]
    steps = events[events["kind"] == int(Kind.STEP)]
    iterations = steps.groupby("name").size().to_dict()
    kinds = {
        "Python->Backend": (events["kind"] == int(Kind.CPU_CALL)) & (events["category"] == int(Category.BACKEND)),
        "Python->Simulator": (events["kind"] == int(Kind.CPU_CALL)) & (events["category"] == int(Category.SIMULATOR)),
        "Backend->CUDA": events["kind"] == int(Kind.CUDA_API),
        "GPU kernels": events["kind"] == int(Kind.GPU_KERNEL),
    }
    rows = []
    for tid in [main] + sorted(set(events["tid"].unique()) - {main, 0}):
        ev = events[(events["tid"] == tid) & (events["kind"] != int(Kind.PHASE)) & (events["kind"] != int(Kind.STEP))]
        sw = sweep_thread(ev, phases, start, end)
        for transition, mask in kinds.items():
            sel = ev[mask[ev.index]]
            if sel.empty:
                continue
            if transition == "GPU kernels":
                op = sel["operation"].to_numpy().astype(np.int64)
                seg = sw.segment_of(sel["start_ns"].to_numpy())
            else:
                seg = sw.segment_of(sel["start_ns"].to_numpy())
                op = sw.op[seg]
            op = np.where(op < 0, len(names), op)
            phase = np.where(sw.phase[seg] < 0, len(names), sw.phase[seg])
            counts = pd.Series(1, index=pd.MultiIndex.from_arrays([phase, op])).groupby(level=[0, 1]).sum()
            for (ph_i, op_i), count in counts.items():
                n_it = iterations.get(ph_i, 0)
                rows.append((trace.process, "main" if tid == main else str(tid), label[ph_i], label[op_i],
                             transition, int(count), n_it, count / n_it if n_it else float("nan")))
    return pd.DataFrame(rows, columns=["process", "thread", "phase", "operation", "transition", "count",
                                       "iterations", "per_iteration"])
