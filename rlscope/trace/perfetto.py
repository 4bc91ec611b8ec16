"""Export a trace bundle as Chrome trace-event JSON in Kineto's vocabulary.

ui.perfetto.dev, chrome://tracing and Holistic Trace Analysis read it: operations are
``user_annotation`` slices, calls into native modules ``cpu_op`` (Backend) or
``python_function`` (Simulator, which Kineto has no word for), CUDA API calls
``cuda_runtime``, GPU work ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` on a GPU track, with
``ac2g`` flow arrows from each launch to its kernel sharing the ``correlation`` id.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rlscope.errors import TraceError
from rlscope.files import write_atomic
from rlscope.trace.reader import ProcessTrace
from rlscope.trace.schema import GPU_WORK_KINDS, Category, Kind

__all__ = ["to_chrome_trace", "export_perfetto"]

_CATEGORY = {
    int(Kind.OPERATION): "user_annotation",
    int(Kind.CUDA_API): "cuda_runtime",
    int(Kind.GPU_KERNEL): "kernel",
    int(Kind.GPU_MEMCPY): "gpu_memcpy",
    int(Kind.GPU_MEMSET): "gpu_memset",
    int(Kind.CUDA_SYNC): "cuda_sync",
    int(Kind.PROFILER_OVERHEAD): "overhead",
    int(Kind.PROFILER_WRITE): "overhead",
}
_GPU_PID_OFFSET = 1 << 24  # GPU tracks get their own pseudo-process, as in Kineto traces


def _process_events(trace: ProcessTrace, base_ns: int) -> list[dict[str, Any]]:
    pid = int(trace.meta["pid"])
    main = trace.meta.get("main_tid")
    out: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": trace.process}},
        {"ph": "M", "name": "process_name", "pid": pid + _GPU_PID_OFFSET, "tid": 0,
         "args": {"name": f"GPU ({trace.process})"}},
    ]
    ev = trace.events
    if ev.empty:
        return out
    names = ev["name"].astype(str).to_numpy()
    categories = list(ev["name"].cat.categories)
    ts = (ev["start_ns"].to_numpy() - base_ns) / 1e3
    dur = np.maximum(ev["end_ns"].to_numpy() - ev["start_ns"].to_numpy(), 0) / 1e3
    tid_map: dict[int, int] = {}
    iteration = 0
    for i, row in enumerate(ev.itertuples(index=False)):
        kind = int(row.kind)
        if kind in (int(Kind.PHASE), int(Kind.CORRELATION)):
            continue
        if kind == int(Kind.STEP):  # Kineto's iteration marker, so HTA can split by iteration
            tid = tid_map.setdefault(int(row.tid), 1 if row.tid == main else len(tid_map) + 2)
            out.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{iteration}", "pid": pid,
                        "tid": tid, "ts": float(ts[i]), "dur": float(dur[i]), "args": {"phase": names[i]}})
            iteration += 1
            continue
        if kind == int(Kind.CPU_CALL):
            cat = "cpu_op" if row.category == int(Category.BACKEND) else "python_function"
        else:
            cat = _CATEGORY[kind]
        tid = int(row.tid)
        if kind not in GPU_WORK_KINDS:
            tid = tid_map.setdefault(tid, 1 if tid == main else len(tid_map) + 2)
        event: dict[str, Any] = {"ph": "X", "cat": cat, "name": names[i], "pid": pid, "tid": tid,
                                 "ts": float(ts[i]), "dur": float(dur[i]), "args": {}}
        if kind == int(Kind.CPU_CALL):
            event["args"]["layer"] = Category(int(row.category)).name.title()
        if kind in GPU_WORK_KINDS:
            event["pid"] = pid + _GPU_PID_OFFSET
            event["tid"] = int(row.depth)  # the CUDA stream
            event["args"].update({"correlation": int(row.correlation), "stream": int(row.depth)})
            if row.operation >= 0:
                event["args"]["External id"] = int(row.operation)
                event["args"]["operation"] = categories[int(row.operation)]
            out.append({"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g", "id": int(row.correlation),
                        "pid": event["pid"], "tid": event["tid"], "ts": float(ts[i])})
        elif kind == int(Kind.CUDA_API):
            event["args"]["correlation"] = int(row.correlation)
            out.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": int(row.correlation), "pid": pid,
                        "tid": tid, "ts": float(ts[i])})
        out.append(event)
    for tid, track in tid_map.items():
        label = "main thread" if tid == main else f"thread {tid}"
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": track, "args": {"name": label}})
    return out


def to_chrome_trace(processes: list[ProcessTrace]) -> dict[str, Any]:
    """The trace-event JSON object; times in microseconds from the first process's start.
    ``processes`` must have their GPU work attributed (``rlscope.analyze.read_attributed``)."""
    if any(p.gpu is not None for p in processes):
        raise TraceError("GPU rows not attributed: read the trace with rlscope.analyze.read_attributed")
    base = min(int(p.meta["start_ns"]) for p in processes)
    events: list[dict[str, Any]] = []
    for process in processes:
        events += _process_events(process, base)
    return {
        "schemaVersion": 1,
        "displayTimeUnit": "ns",
        "deviceProperties": [],
        "distributedInfo": {"rank": 0, "world_size": 1},
        "traceEvents": events,
        "baseTimeNanoseconds": base,
    }


def export_perfetto(processes: list[ProcessTrace], out: Path) -> Path:
    """Write ``processes`` (with their GPU work attributed: ``rlscope.analyze.read_attributed``) to
    ``out`` as Chrome trace-event JSON."""
    write_atomic(out, json.dumps(to_chrome_trace(processes)))
    return out
