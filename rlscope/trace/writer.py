"""Append-only writer of one process's events: bounded memory, readable after a crash.

Rows accumulate as tuples of nine ints in a list (appending a tuple is the cheapest thing a hot
Python path can do) or as ready-made N x 9 int64 blocks from native collectors, and are written
as one Arrow IPC record batch every ``chunk_events`` rows, or sooner when the session's flusher
thread finds the last write a second old (``rlscope.collect.flusher``). Names are
dictionary-encoded with delta dictionaries, so each batch carries only the new names. Each batch
carries its checksums (``rlscope.trace.schema.chunk_checksums``) and is flushed to the OS as it is
written: a crash loses at most the rows still buffered, and a torn final batch is dropped by the
reader.

Threads: recording threads append to ``rows`` without a lock while another thread may be
writing, so a write takes the rows there when it begins and deletes exactly those; writes, and
the hand-over of native blocks, are serialised by ``lock`` (re-entrant: a session drains its
native buffers and writes under one hold).

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

from rlscope.trace.schema import EVENT_SCHEMA, ROW_FIELDS, Kind, chunk_checksums

__all__ = ["TraceWriter", "WRITE_NAME"]

WRITE_NAME = "rlscope: trace write"

_WIDTH = len(ROW_FIELDS)
_WRITE = int(Kind.PROFILER_WRITE)


class TraceWriter:
    def __init__(self, path: Path, chunk_events: int = 1 << 16) -> None:
        self.path = path
        self.chunk_events = chunk_events
        self.rows: list[tuple[int, ...]] = []  # hot paths call rows.append((...9 ints...)) directly
        self._blocks: list[np.ndarray] = []
        self._block_rows = 0
        self._names: list[str] = []
        self._ids: dict[str, int] = {}
        self._new_name = threading.Lock()  # two threads naming two new things must not get one id
        self._names_written = 0  # the dictionary's length after the last batch
        self.lock = threading.RLock()
        self._file = open(path, "wb")
        options = pa.ipc.IpcWriteOptions(emit_dictionary_deltas=True)
        self._stream = pa.ipc.new_stream(self._file, EVENT_SCHEMA, options=options)
        self.events_written = 0
        self.last_write_ns = time.perf_counter_ns()
        self._abandoned = False

    def symbol(self, name: str) -> int:
        """The id of ``name`` in this file's name dictionary."""
        sid = self._ids.get(name)
        if sid is None:
            with self._new_name:
                sid = self._ids.get(name)
                if sid is None:
                    self._names.append(name)
                    sid = self._ids[name] = len(self._names) - 1
        return sid

    def record(self, kind: int, start_ns: int, end_ns: int, name: str, *, category: int = 0, tid: int = 0,
               depth: int = 0, correlation: int = 0, operation: int = -1) -> None:
        """Append one event (the convenient path; collectors on hot paths append to ``rows``)."""
        self.rows.append((kind, category, tid, depth, start_ns, end_ns, self.symbol(name), correlation, operation))
        self.maybe_flush()

    def append_block(self, block: np.ndarray) -> None:
        """Append an N x 9 int64 array of rows (from a native collector)."""
        if len(block) and not self._abandoned:
            with self.lock:
                self._blocks.append(block)
                self._block_rows += len(block)

    @property
    def pending(self) -> int:
        return len(self.rows) + self._block_rows

    @property
    def unwritten(self) -> bool:
        """Whether rows wait to be written other than the record of the last write alone (call
        with ``lock`` held)."""
        rows = self.rows
        return bool(self._blocks) or len(rows) > 1 or (len(rows) == 1 and rows[0][0] != _WRITE)

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
        with self.lock:
            n, k = len(self.rows), len(self._blocks)  # rows appended from here on wait for the next batch
            if not n and not k:
                return
            start = time.perf_counter_ns() if started_ns is None else started_ns
            parts = self._blocks[:k]
            if n:
                flat = np.fromiter(itertools.chain.from_iterable(self.rows[:n]), dtype=np.int64, count=_WIDTH * n)
                parts.append(flat.reshape(-1, _WIDTH))
            table = parts[0] if len(parts) == 1 else np.concatenate(parts)
            names = self._names[:]  # after the rows: every name they use is in it
            columns = []
            for i, field in enumerate(EVENT_SCHEMA):
                if field.name == "name":
                    dictionary = pa.array(names, type=pa.string())
                    columns.append(pa.DictionaryArray.from_arrays(pa.array(table[:, i].astype(np.int32)), dictionary))
                else:
                    columns.append(pa.array(table[:, i].astype(field.type.to_pandas_dtype())))
            batch = pa.RecordBatch.from_arrays(columns, schema=EVENT_SCHEMA)
            self._stream.write_batch(batch, custom_metadata=chunk_checksums(batch, self._names_written))
            self._file.flush()
            self._names_written = len(names)
            self.events_written += len(table)
            del self.rows[:n]
            del self._blocks[:k]
            self._block_rows -= len(table) - n
            self.last_write_ns = end = time.perf_counter_ns()
            self.rows.append((_WRITE, 0, threading.get_ident(), 0, start, end, self.symbol(WRITE_NAME), 0, -1))

    def close(self) -> None:
        if self._file.closed:  # also abandoned: its lock may be held by a thread a fork left behind
            return
        with self.lock:
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
