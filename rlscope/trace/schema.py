"""The event schema of trace files (version 1).

Every event is an interval on one thread, in nanoseconds of one clock (``time.perf_counter_ns``,
CLOCK_MONOTONIC on Linux). In memory a row is nine int64s, in the order of ``ROW_FIELDS``;
on disk the same columns are narrowed and ``name`` is dictionary-encoded.

``depth`` is the nesting depth for operations and native calls; for GPU events (kernels,
copies, memsets) it holds the CUDA stream, ``category`` the device, and ``tid`` the thread
that launched them. GPU-side rows (CUDA API calls and later kinds) are written by the native
CUPTI collector to ``gpu.rows`` (raw int64 rows in this layout) with their names in
``gpu.names``; the reader returns them as recorded and ``rlscope.analyze.attribution`` joins
them with the process's events.
"""

from __future__ import annotations

import enum

import pyarrow as pa

__all__ = ["SCHEMA_VERSION", "Kind", "Category", "ROW_FIELDS", "EVENT_SCHEMA", "EVENTS_FILE", "META_FILE",
           "GPU_ROWS_FILE", "GPU_NAMES_FILE", "UTILISATION_FILE", "GPU_WORK_KINDS", "LAUNCHED_KINDS"]

SCHEMA_VERSION = 1
EVENTS_FILE = "events.arrows"
META_FILE = "meta.json"


class Kind(enum.IntEnum):
    """What an interval is."""

    OPERATION = 0  # a user's rlscope.operation(); name is the operation
    PHASE = 1  # a phase of training (rlscope.set_phase); name is the phase
    STEP = 2  # one iteration, from rlscope.step() to the next
    CPU_CALL = 3  # Python calling into a native module; category says which kind
    CUDA_API = 4  # a CUDA runtime/driver API call on the CPU
    GPU_KERNEL = 5
    GPU_MEMCPY = 6
    GPU_MEMSET = 7
    CORRELATION = 8  # CUPTI external correlation: API call ``correlation`` ran inside operation ``operation``
    CUDA_SYNC = 9  # the CPU waiting for the GPU (stream/event/context synchronize); inside a CUDA_API call
    PROFILER_OVERHEAD = 10  # time CUPTI reports spending on itself (buffer flushes, instrumentation)
    PROFILER_WRITE = 11  # rlscope writing buffered events out, on the thread whose event filled the buffer


# What keeps a GPU busy: kernels, copies, memsets.
GPU_WORK_KINDS = (int(Kind.GPU_KERNEL), int(Kind.GPU_MEMCPY), int(Kind.GPU_MEMSET))
# What a CUDA API call launches, and so is charged to the thread and operation that made the call.
LAUNCHED_KINDS = (*GPU_WORK_KINDS, int(Kind.CUDA_SYNC))


class Category(enum.IntEnum):
    """Which layer a CPU_CALL enters."""

    NONE = 0
    BACKEND = 1  # ML backend C/C++: torch._C, jaxlib, numpy, ...
    SIMULATOR = 2  # simulator native code: mujoco, ale_py, rlscope._cartpole_cpu, ...


GPU_ROWS_FILE = "gpu.rows"
GPU_NAMES_FILE = "gpu.names"
UTILISATION_FILE = "utilisation.csv"

ROW_FIELDS = ("kind", "category", "tid", "depth", "start_ns", "end_ns", "name", "correlation", "operation")

EVENT_SCHEMA = pa.schema(
    [
        pa.field("kind", pa.int8()),
        pa.field("category", pa.int8()),
        pa.field("tid", pa.int64()),
        pa.field("depth", pa.int16()),
        pa.field("start_ns", pa.int64()),
        pa.field("end_ns", pa.int64()),
        pa.field("name", pa.dictionary(pa.int32(), pa.string())),
        pa.field("correlation", pa.int64()),
        # GPU events: name id of the operation that launched them (via CUPTI external
        # correlation), -1 if none; other kinds: -1 (their operation follows from time).
        pa.field("operation", pa.int32()),
    ],
    metadata={"rlscope.schema_version": str(SCHEMA_VERSION)},
)
