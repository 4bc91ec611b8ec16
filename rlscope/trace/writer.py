"""Append-only writer of one process's events: bounded memory, readable after a crash.

Rows accumulate as tuples of nine ints in a list (appending a tuple is the cheapest thing a hot
Python path can do) or as ready-made N x 9 int64 blocks from native collectors, and are written
as one Arrow IPC record batch every ``chunk_events`` rows. Names are dictionary-encoded with
delta dictionaries, so each batch carries only the new names. Each batch is flushed to the OS
as it is written: a crash loses at most the rows still buffered, and a torn final batch is
dropped by the reader.

Each write is itself recorded (``Kind.PROFILER_WRITE`` on the writing thread, in the next
batch): a write of 65,536 rows takes milliseconds at moments the workload does not choose, and
knowing exactly when lets analysis take it out of the profiled time instead of spreading it as
a cost over every event.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from rlscope.trace.schema import EVENT_SCHEMA, ROW_FIELDS, Kind

__all__ = ["TraceWriter", "WRITE_NAME"]

WRITE_NAME = "rlscope: trace write"

_WIDTH = len(ROW_FIELDS)


class TraceWriter:
    def __init__(self, path: Path, chunk_events: int = 1 << 16) -> None:
        self.path = path
        self.chunk_events = chunk_events
        self.rows: list[tuple[int, ...]] = []  # hot paths call rows.append((...9 ints...)) directly
        self._blocks: list[np.ndarray] = []
        self._block_rows = 0
        self._names: list[str] = []
        self._ids: dict[str, int] = {}
        self._file = open(path, "wb")
        options = pa.ipc.IpcWriteOptions(emit_dictionary_deltas=True)
        self._stream = pa.ipc.new_stream(self._file, EVENT_SCHEMA, options=options)
        self.events_written = 0
        self._abandoned = False

    def symbol(self, name: str) -> int:
        """The id of ``name`` in this file's name dictionary."""
        sid = self._ids.get(name)
        if sid is None:
            sid = self._ids[name] = len(self._names)
            self._names.append(name)
        return sid

    def record(self, kind: int, start_ns: int, end_ns: int, name: str, *, category: int = 0, tid: int = 0,
               depth: int = 0, correlation: int = 0, operation: int = -1) -> None:
        """Append one event (the convenient path; collectors on hot paths append to ``rows``)."""
        self.rows.append((kind, category, tid, depth, start_ns, end_ns, self.symbol(name), correlation, operation))
        self.maybe_flush()

    def append_block(self, block: np.ndarray) -> None:
        """Append an N x 9 int64 array of rows (from a native collector)."""
        if len(block):
            self._blocks.append(block)
            self._block_rows += len(block)

    @property
    def pending(self) -> int:
        return len(self.rows) + self._block_rows

    def maybe_flush(self) -> None:
        if len(self.rows) + self._block_rows >= self.chunk_events:
            self.flush()

    def flush(self, started_ns: int | None = None) -> None:
        """Write buffered rows as one record batch and hand it to the OS. ``started_ns``: when the
        write began, if before this call (draining the native buffers belongs to the write)."""
        if self._abandoned:
            self.rows.clear()
            self._blocks.clear()
            self._block_rows = 0
            return
        if not self.rows and not self._blocks:
            return
        start = time.perf_counter_ns() if started_ns is None else started_ns
        parts = list(self._blocks)
        if self.rows:
            flat = np.fromiter(itertools.chain.from_iterable(self.rows), dtype=np.int64, count=_WIDTH * len(self.rows))
            parts.append(flat.reshape(-1, _WIDTH))
        table = parts[0] if len(parts) == 1 else np.concatenate(parts)
        columns = []
        for i, field in enumerate(EVENT_SCHEMA):
            if field.name == "name":
                dictionary = pa.array(self._names, type=pa.string())
                columns.append(pa.DictionaryArray.from_arrays(pa.array(table[:, i].astype(np.int32)), dictionary))
            else:
                columns.append(pa.array(table[:, i].astype(field.type.to_pandas_dtype())))
        self._stream.write_batch(pa.RecordBatch.from_arrays(columns, schema=EVENT_SCHEMA))
        self._file.flush()
        self.events_written += len(table)
        self.rows.clear()
        self._blocks.clear()
        self._block_rows = 0
        self.rows.append((int(Kind.PROFILER_WRITE), 0, threading.get_ident(), 0, start, time.perf_counter_ns(),
                          self.symbol(WRITE_NAME), 0, -1))

    def close(self) -> None:
        if self._file.closed:
            return
        self.flush()  # after the session's end: the record of this last write is not kept
        self._stream.close()
        self._file.close()

    def abandon(self) -> None:
        """Stop writing for good, dropping what is buffered: a forked child shares its parent's
        open file, and must neither write the parent's buffered rows nor end its stream."""
        self._abandoned = True
        self.rows.clear()
        self._blocks.clear()
        self._block_rows = 0
        self._file.close()
