"""Who did what: GPU work charged to the thread and operation that launched it, the operation open
on a thread at a time, and which CUDA API calls count (the outermost ones).

The trace reader returns what the collectors recorded; every analysis reads traces through
:func:`read_attributed`, so GPU work is attributed once, here, the same way for every table.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from rlscope.analyze.jax_scopes import join_scopes
from rlscope.trace.reader import ProcessTrace, read_trace
from rlscope.trace.schema import LAUNCHED_KINDS, Kind

__all__ = ["read_attributed", "attribute_gpu", "operation_at", "outermost", "outermost_per_thread",
           "launching_call"]


def read_attributed(directory: str | Path, drop_corrupt: bool = False) -> list[ProcessTrace]:
    """Every process of a trace bundle (``read_trace``), its GPU work attributed (``attribute_gpu``)."""
    return [attribute_gpu(process) for process in read_trace(directory, drop_corrupt=drop_corrupt)]


def attribute_gpu(process: ProcessTrace, nvtx: bool = True) -> ProcessTrace:
    """The process's events with the GPU collector's rows joined in.

    CUPTI links records by correlation id: a kernel to the API call that launched it (whose
    thread becomes the kernel's ``tid``) and that call to the external correlation id pushed by
    the innermost ``rlscope.operation`` (which becomes the kernel's ``operation``). GPU work
    launched from a thread without operations (e.g. a framework's dispatch thread) is charged
    to the operation open on the main thread when it was launched, and placed on that thread.
    The external-correlation records themselves are dropped: they are links, not events. A
    process profiled with ``--jax-scopes`` then has its jitted kernels joined to their
    ``jax.named_scope`` (``rlscope.analyze.jax_scopes``), by XLA's NVTX ranges where recorded and
    ``nvtx``, else by name.
    """
    gpu = process.gpu
    if gpu is None:
        return process
    events = process.events
    main_tid = process.meta.get("main_tid", 0)
    kind = gpu["kind"].to_numpy()
    tid = gpu["tid"].to_numpy().astype(np.int64)
    start = gpu["start_ns"].to_numpy()
    correlation = gpu["correlation"].to_numpy()
    operation = gpu["operation"].to_numpy().astype(np.int64)

    # CUPTI reports the low 32 bits of pthread_self(); map them back to Python's thread idents.
    api = kind == int(Kind.CUDA_API)
    on_thread = api | (kind == int(Kind.NVTX_RANGE))  # rows CUPTI gives a 32-bit thread id
    py_tids = np.unique(events["tid"].to_numpy()).astype(np.int64) if len(events) else np.zeros(0, np.int64)
    tid[on_thread] = _lookup(py_tids & 0xFFFFFFFF, py_tids, tid[on_thread], tid[on_thread])

    ext = kind == int(Kind.CORRELATION)
    act = np.isin(kind, LAUNCHED_KINDS)
    launch = launching_call(correlation[api], correlation[act])
    launch_tid = np.where(launch >= 0, tid[api][np.maximum(launch, 0)], main_tid) if api.any() \
        else np.full(int(act.sum()), main_tid, dtype=np.int64)
    op = _lookup(correlation[ext], operation[ext], correlation[act], -1, keep="last")
    unresolved = op < 0
    if unresolved.any():
        at = launch[unresolved]
        launched = np.where(at >= 0, start[api][np.maximum(at, 0)], -1) if api.any() else np.full(len(at), -1)
        op[unresolved] = operation_at(events, np.full(len(launched), main_tid), launched)
        launch_tid[unresolved] = main_tid
    tid[act] = launch_tid
    operation[act] = op
    gpu = gpu.assign(tid=tid.astype(gpu["tid"].dtype), operation=operation.astype(gpu["operation"].dtype))[~ext]
    merged = pd.concat([events, gpu], ignore_index=True)
    return join_scopes(dataclasses.replace(process, events=merged, gpu=None), nvtx)


def launching_call(api_correlation: np.ndarray, correlation: np.ndarray) -> np.ndarray:
    """For each GPU record's ``correlation``, the position in ``api_correlation`` of the CUDA API
    call that launched it (the first with that id), or -1 where none did."""
    return _lookup(api_correlation, np.arange(len(api_correlation)), correlation, -1)


def _lookup(keys: np.ndarray, values: np.ndarray, queries: np.ndarray, default: np.ndarray | int,
            keep: str = "first") -> np.ndarray:
    """values[keys == q] for each query q (``default`` where absent), exact for int64 values."""
    index = pd.Index(keys)
    unique = ~index.duplicated(keep=keep)
    pos = index[unique].get_indexer(queries)
    return np.where(pos >= 0, np.asarray(values)[unique][np.maximum(pos, 0)] if unique.any() else default, default)


def operation_at(events: pd.DataFrame, tids: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Symbol id of the innermost operation open on thread ``tids[i]`` at ``times[i]``; -1 for none
    (or time -1). Operations of one thread and depth are disjoint, so each level is a binary search."""
    out = np.full(len(times), -1, dtype=np.int64)
    ops = events[events["kind"] == int(Kind.OPERATION)]
    for (tid, _depth), level in ops.groupby(["tid", "depth"], sort=True):  # deeper levels overwrite
        on = np.flatnonzero((tids == tid) & (times >= 0))
        if len(on) == 0:
            continue
        level = level.sort_values("start_ns")
        starts, ends = level["start_ns"].to_numpy(), level["end_ns"].to_numpy()
        t = times[on]
        idx = np.searchsorted(starts, t, side="right") - 1
        hit = (idx >= 0) & (t < ends[np.maximum(idx, 0)])
        out[on[hit]] = level["name"].cat.codes.to_numpy()[idx[hit]]
    return out


def outermost(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Mask of intervals not inside an earlier-starting one: of a runtime API call and the driver
    calls made inside it, only the runtime call (one transition, one CUDA API time)."""
    order = np.lexsort((-ends, starts))  # at equal starts the longer (outer) one first
    reach = np.maximum.accumulate(ends[order])
    inside = np.zeros(len(starts), dtype=bool)
    inside[order[1:]] = ends[order][1:] <= reach[:-1]
    return ~inside


def outermost_per_thread(tids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``outermost`` among the calls of each thread (calls of two threads may overlap in time)."""
    keep = np.zeros(len(starts), dtype=bool)
    for tid in np.unique(tids):
        on = np.flatnonzero(tids == tid)
        keep[on[outermost(starts[on], ends[on])]] = True
    return keep
