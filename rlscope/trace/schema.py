"""The event schema of trace files (version 2) and the checksums that make every chunk verifiable.

Every event is an interval on one thread, in nanoseconds of one clock (``time.perf_counter_ns``,
CLOCK_MONOTONIC on Linux). In memory a row is nine int64s, in the order of ``ROW_FIELDS``;
on disk the same columns are narrowed and ``name`` is dictionary-encoded.

``depth`` is the nesting depth for operations and native calls; for GPU events (kernels,
copies, memsets) it holds the CUDA stream, ``category`` the device, and ``tid`` the thread
that launched them. GPU-side rows (CUDA API calls and later kinds) are written by the native
CUPTI collector to ``gpu.rows`` (raw int64 rows in this layout) with their names in
``gpu.names``; the reader returns them as recorded and ``rlscope.analyze.attribution`` joins
them with the process's events.

Checksums (version 2; version 1 traces have none and are read unverified). Each record batch of
``events.arrows`` carries in its custom metadata (``chunk_checksums``) its row count, a CRC-32
(zlib's) of its columns as written (the row count, every column's null count, the narrowed value
buffers and the name column's dictionary codes), the length of the name dictionary after it and
a CRC-32 of the names new in it (what its delta dictionary message holds). The names get their
own checksum so that a damaged delta condemns exactly the chunks that use its names, not every
later one; the row count is stored so that a damaged chunk's dropped events can be counted. A
version-2 chunk without these is corrupt. ``gpu.rows`` has a sidecar, ``gpu.rows.crc``: after
each write of rows the native tracer appends one ``GPU_CRC_RECORD`` (first row, rows, CRC-32 of
those rows' bytes, CRC-32 of the record's first 20 bytes), all little-endian.
"""

from __future__ import annotations

import enum
import struct
import zlib
from typing import Annotated, Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["SCHEMA_VERSION", "Kind", "Category", "ROW_FIELDS", "EVENT_SCHEMA", "EVENTS_FILE", "META_FILE",
           "SAMPLES_FILE", "XLA_DIR", "XLA_MODULE_GLOB", "XLA_COMPILES_FILE", "GPU_ROWS_FILE", "GPU_NAMES_FILE",
           "GPU_ROWS_CRC_FILE", "GPU_NAMES_CRC_FILE",
           "GPU_CRC_RECORD", "UTILISATION_FILE", "SamplesFile", "GPU_WORK_KINDS", "LAUNCHED_KINDS", "READABLE_VERSIONS",
           "CHECKSUM_KEYS", "chunk_checksums", "ProcessMeta"]

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)  # version 1: no checksums
EVENTS_FILE = "events.arrows"
META_FILE = "meta.json"
SAMPLES_FILE = "samples.json"  # a sampled process's windows (rlscope.collect.sampling)
# jax-scopes (rlscope.collect.jax_scopes): XLA's dump of each compiled module's optimised HLO
# (module_<id>.<name>.<platform>_after_optimizations.txt) and when each backend compile ran.
XLA_DIR = "xla"
XLA_MODULE_GLOB = "module_*after_optimizations.txt"
XLA_COMPILES_FILE = "compiles.jsonl"  # one JSON line per backend compile: start_ns, end_ns, tid, function


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
    NVTX_RANGE = 12  # an NVTX range on a CPU thread (jax-scopes' precise mode: XLA's per-thunk annotations)


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
GPU_NAMES_CRC_FILE = "gpu.names.crc"  # per write of names: (index of its first name, bytes, CRC-32, own CRC)
GPU_ROWS_CRC_FILE = "gpu.rows.crc"  # the native tracer names it after GPU_ROWS_FILE: rows path + ".crc"
GPU_CRC_RECORD = struct.Struct("<qqII")  # first row, rows, CRC-32 of their bytes, CRC-32 of the 20 bytes before
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

CHECKSUM_KEYS = ("rlscope.rows", "rlscope.crc32", "rlscope.names", "rlscope.names_crc32")


def chunk_checksums(batch: pa.RecordBatch, names_before: int) -> dict[str, str]:
    """The custom metadata of a chunk of ``events.arrows`` (``CHECKSUM_KEYS``): its row count, the
    CRC-32 of its columns, the name dictionary's length and the CRC-32 of the names from
    ``names_before`` (the dictionary's length after the chunk before) on.

    Computed from the arrays' logical contents (offsets and slices resolved), so the writer's
    arrays and the reader's, zero-copy views into the file, give the same values."""
    crc = zlib.crc32(struct.pack("<q", batch.num_rows))
    dictionary = None
    for column in batch.columns:
        if isinstance(column, pa.DictionaryArray):
            dictionary = column.dictionary
            column = column.indices
        crc = zlib.crc32(struct.pack("<q", column.null_count), crc)
        width = column.type.bit_width // 8
        crc = zlib.crc32(memoryview(column.buffers()[1])[column.offset * width:(column.offset + len(column)) * width],
                         crc)
    names = 0 if dictionary is None else len(dictionary)
    names_crc = 0
    if dictionary is not None and names > names_before:
        fresh = dictionary.slice(names_before)
        _, offsets, data = fresh.buffers()
        bounds = np.frombuffer(offsets, dtype=np.int32)[fresh.offset:fresh.offset + len(fresh) + 1]
        names_crc = zlib.crc32((bounds - bounds[0]).astype("<i4").tobytes(),
                               zlib.crc32(struct.pack("<q", fresh.null_count)))
        names_crc = zlib.crc32(memoryview(data)[bounds[0]:bounds[-1]] if data is not None else b"", names_crc)
    return {"rlscope.rows": str(batch.num_rows), "rlscope.crc32": f"{crc:08x}", "rlscope.names": str(names),
            "rlscope.names_crc32": f"{names_crc:08x}"}


# perf_counter_ns values: never negative, and within the int64 columns of the events.
Timestamp = Annotated[int, Field(ge=0, lt=2**63)]


class UnseenCalls(BaseModel):
    """A target whose calls the interpreter's hook could not see (``rlscope.collect.unseen``)."""

    model_config = ConfigDict(strict=True)

    category: Literal["backend", "simulator"]
    examples: list[str] = []


class ProcessMeta(BaseModel):
    """``meta.json`` of one process's trace: the fields analysis reads (a session writes more,
    kept as they are). Strict: a pid of ``"12"`` or ``true`` is a damaged file, not a pid."""

    model_config = ConfigDict(extra="allow", strict=True)

    schema_version: int
    process: str
    pid: int
    start_ns: Timestamp
    end_ns: Timestamp | None = None
    complete: bool = False
    main_tid: int | None = None
    events: int | None = None
    wall_only: bool = False
    first_step_ns: int | None = None
    host: str | None = None
    rlscope_version: str | None = None
    unseen_calls: dict[str, UnseenCalls] = {}  # Python 3.11: targets whose calls its hook cannot see

    @model_validator(mode="after")
    def _ends_after_it_starts(self) -> ProcessMeta:
        if self.end_ns is not None and self.end_ns < self.start_ns:
            raise ValueError(f"end_ns {self.end_ns} is before start_ns {self.start_ns}")
        return self


class SamplesFile(BaseModel):
    """``samples.json`` of a sampled process (``rlscope.collect.sampling``): its windows
    ``[first_iteration, start_ns, end_ns, iterations]``, the block each one's gap was drawn from,
    and ``[call, time_ns]`` of the ``rlscope.step()`` calls the estimate needs, in order."""

    model_config = ConfigDict(extra="allow", strict=True)

    spec: dict[str, int | None]
    complete: bool
    windows: list[tuple[int, Timestamp, Timestamp, Annotated[int, Field(ge=1)]]]
    blocks: list[Annotated[int, Field(ge=1)]]
    calls: list[tuple[Annotated[int, Field(ge=1)], Timestamp]]

    @model_validator(mode="after")
    def _consistent(self) -> SamplesFile:
        if len(self.blocks) != len(self.windows):
            raise ValueError(f"{len(self.blocks)} blocks for {len(self.windows)} windows")
        if any(end <= start for _, start, end, _ in self.windows):
            raise ValueError("a window ends before it starts")
        numbers = [n for n, _ in self.calls]
        if any(b <= a for a, b in zip(numbers, numbers[1:])) or any(
                b[1] < a[1] for a, b in zip(self.calls, self.calls[1:])):
            raise ValueError("the calls are out of order")
        if self.windows and not self.calls:
            raise ValueError("windows but no calls")
        return self

