"""GPU-side tables: work per operation, and true GPU-bound time against what NVML reports.

"True GPU-bound time" is the union of kernel, copy and memset intervals on a device: the time
in which the GPU was doing anything at all for this process. nvidia-smi's ``utilization.gpu``
counts a sample period as busy if any kernel ran in it, so for RL's tiny kernels separated by
CPU work it reads far higher than the union; GPM's SM utilisation also weighs how many SMs the
kernels kept busy.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlscope.analyze.attribution import operation_at, outermost_per_thread
from rlscope.analyze.overlap import UNANNOTATED
from rlscope.trace.reader import ProcessTrace
from rlscope.trace.schema import GPU_WORK_KINDS, Kind

__all__ = ["gpu_by_operation", "utilisation_timeline", "union_ns", "gpu_use_across", "GPU_BOUND",
           "NVML_MEASURES"]

GPU_BOUND = "GPU-bound (kernels+copies)"
NVML_MEASURES = (("nvidia-smi utilization.gpu", "gpu_util_pct"), ("SM utilisation (GPM)", "sm_util_pct"))

_ACTIVITY = {
    int(Kind.GPU_KERNEL): "kernels",
    int(Kind.GPU_MEMCPY): "memcpy",
    int(Kind.GPU_MEMSET): "memset",
    int(Kind.CUDA_API): "CUDA API calls",
    int(Kind.CUDA_SYNC): "CUDA sync waits",
}


def _merged(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [start, end) as sorted disjoint blocks (starts, ends)."""
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    # An interval opens a new block when it starts after everything before it ended.
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    block_end = np.zeros(int(new.sum()), dtype=np.int64)
    np.maximum.at(block_end, np.cumsum(new) - 1, e)
    return s[new], block_end


def union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length of the union of intervals [start, end)."""
    if len(starts) == 0:
        return 0
    bs, be = _merged(starts, ends)
    return int((be - bs).sum())


def gpu_by_operation(trace: ProcessTrace) -> pd.DataFrame:
    """Per operation: count and time of kernels, copies, memsets, CUDA API calls and sync waits.

    GPU rows are charged to the operation that launched them (CUPTI external correlation).
    CUDA API calls belong to the operation innermost on their thread when they started (on the
    main thread, for threads that have no operations); only
    outermost calls count (cudaLaunchKernel, not also the cuLaunchKernel inside it), and their
    time is the union over threads. Columns: ``process, operation, activity, count, time_ns``.
    """
    ev = trace.events
    columns = ["process", "operation", "activity", "count", "time_ns"]
    kinds = ev["kind"].to_numpy()
    if not np.isin(kinds, list(_ACTIVITY)).any():
        return pd.DataFrame(columns=columns)
    names = ev["name"].cat.categories
    annotated = ev.loc[kinds == int(Kind.OPERATION), "tid"].unique()
    rows = []
    for kind, label in _ACTIVITY.items():
        sel = ev[kinds == kind]
        if sel.empty:
            continue
        start, end = sel["start_ns"].to_numpy(), sel["end_ns"].to_numpy()
        if kind in (int(Kind.CUDA_API), int(Kind.CUDA_SYNC)):
            # Calls from threads without operations (autograd's engine, XLA's dispatch) belong
            # to the operation open on the main thread, as the GPU work they launch does.
            tids = sel["tid"].to_numpy()
            ops = operation_at(ev, np.where(np.isin(tids, annotated), tids, trace.meta.get("main_tid", 0)), start)
            if kind == int(Kind.CUDA_API):
                keep = outermost_per_thread(tids, start, end)
                start, end, ops = start[keep], end[keep], ops[keep]
        else:
            ops = sel["operation"].to_numpy().astype(np.int64)
        for op in np.unique(ops):
            on = ops == op
            label_op = names[op] if op >= 0 else UNANNOTATED
            rows.append((trace.process, label_op, label, int(on.sum()), union_ns(start[on], end[on])))
    return pd.DataFrame(rows, columns=columns)


def utilisation_timeline(trace: ProcessTrace, bin_s: float = 0.5) -> pd.DataFrame:
    """Per device and time bin: true GPU-bound %, nvidia-smi's utilisation % and GPM SM %.

    Columns: ``process, device, time_s`` (bin start, from the start of profiling),
    ``measure`` (one of ``GPU-bound (kernels+copies)``, ``nvidia-smi utilization.gpu``,
    ``SM utilisation (GPM)``) and ``percent``.
    """
    columns = ["process", "device", "time_s", "measure", "percent"]
    ev = trace.events
    t0 = int(trace.meta["start_ns"])
    t1 = int(trace.meta.get("end_ns") or t0)
    gpu = ev[ev["kind"].isin(GPU_WORK_KINDS)]
    if gpu.empty and (trace.utilisation is None or trace.utilisation.empty):
        return pd.DataFrame(columns=columns)
    bin_ns = int(bin_s * 1e9)
    edges = np.arange(t0, max(t1, t0 + 1) + bin_ns, bin_ns)
    rows = []
    for device, work in gpu.groupby("category"):
        busy = _binned_union(work["start_ns"].to_numpy(), work["end_ns"].to_numpy(), edges)
        width = np.diff(edges).astype(np.float64)
        width[-1] = max(1, min(bin_ns, t1 - edges[-2]))
        for i, b in enumerate(busy):
            rows.append((trace.process, int(device), (edges[i] - t0) / 1e9, GPU_BOUND,
                         100.0 * b / width[i]))
    util = trace.utilisation
    if util is not None and not util.empty:
        util = util[(util["time_ns"] >= t0) & (util["time_ns"] <= t1)]
        which = np.clip(((util["time_ns"] - t0) // bin_ns).to_numpy(), 0, len(edges) - 2)
        for measure, column in NVML_MEASURES:
            values = pd.DataFrame({"device": util["device"].to_numpy(), "bin": which,
                                   "v": pd.to_numeric(util[column], errors="coerce").to_numpy()}).dropna()
            for (device, b), v in values.groupby(["device", "bin"])["v"].mean().items():
                rows.append((trace.process, int(device), (edges[b] - t0) / 1e9, measure, float(v)))
    return pd.DataFrame(rows, columns=columns)


def _binned_union(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per bin [edges[i], edges[i+1]): ns covered by the union of the intervals."""
    if len(starts) == 0:
        return np.zeros(len(edges) - 1)
    bs, be = _merged(starts, ends)
    # Covered length up to time x is a piecewise-linear function; evaluate it at the edges.
    cum = np.concatenate(([0], np.cumsum(be - bs)))  # covered length before each block
    k = np.searchsorted(bs, edges, side="right")  # blocks starting at or before each edge
    last = np.maximum(k - 1, 0)
    covered = np.where(k > 0, cum[last] + np.minimum(edges, be[last]) - bs[last], 0)
    return np.diff(covered).astype(np.float64)


def gpu_use_across(processes: list[ProcessTrace], start_ns: int, end_ns: int) -> pd.DataFrame:
    """Per GPU, over the window [start_ns, end_ns) of processes that share it: the true GPU-bound
    share (the union of every process's kernel, copy and memset intervals, clipped to the window;
    work of two processes at once counts once), against the mean of nvidia-smi's
    ``utilization.gpu`` and of GPM's SM utilisation sampled in the window.

    Columns: ``device, measure`` (as ``utilisation_timeline`` names them), ``percent``, ``samples``
    (intervals for the GPU-bound share, NVML samples for the others).
    """
    columns = ["device", "measure", "percent", "samples"]
    if end_ns <= start_ns:
        raise ValueError(f"empty window: [{start_ns}, {end_ns})")
    work = [p.events[p.events["kind"].isin(GPU_WORK_KINDS)] for p in processes]
    work = pd.concat([w for w in work if not w.empty] or [pd.DataFrame(columns=["category", "start_ns", "end_ns"])])
    rows = []
    for device, group in work.groupby("category"):
        starts = np.clip(group["start_ns"].to_numpy(np.int64), start_ns, end_ns)
        ends = np.clip(group["end_ns"].to_numpy(np.int64), start_ns, end_ns)
        inside = ends > starts
        busy = union_ns(starts[inside], ends[inside])
        rows.append((int(device), GPU_BOUND, 100.0 * busy / (end_ns - start_ns), int(inside.sum())))
    # Every process samples the same devices, each on its own wake-ups: read one process's samples,
    # the one with most in the window (the longest-lived), so that each sample counts once.
    windowed = [u[(u["time_ns"] >= start_ns) & (u["time_ns"] < end_ns)]
                for u in (p.utilisation for p in processes) if u is not None and not u.empty]
    if windowed:
        util = max(windowed, key=len)
        for measure, column in NVML_MEASURES:
            values = pd.DataFrame({"device": util["device"], "v": pd.to_numeric(util[column], errors="coerce")})
            for device, v in values.dropna().groupby("device")["v"]:
                rows.append((int(device), measure, float(v.mean()), len(v)))
    return pd.DataFrame(rows, columns=columns)
