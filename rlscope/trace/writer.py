"""Append-only writer of one process's events: bounded memory, readable after a crash.

Rows accumulate in one ``array('q')`` (nine int64s each: cheap to append from a hot callback)
and are written as one Arrow IPC record batch every ``chunk_events`` rows. Names are
dictionary-encoded with delta dictionaries, so each batch carries only the new names. Each
batch is flushed to the OS as it is written: a crash loses at most the rows still buffered, and
a torn final batch is dropped by the reader.
"""

from __future__ import annotations

import array
from pathlib import Path

import numpy as np
import pyarrow as pa

from rlscope.trace.schema import EVENT_SCHEMA, ROW_FIELDS

__all__ = ["TraceWriter"]

_WIDTH = len(ROW_FIELDS)


class TraceWriter:
    def __init__(self, path: Path, chunk_events: int = 1 << 16) -> None:
        self.path = path
        self.chunk_events = chunk_events
        self.rows = array.array("q")  # hot paths call rows.extend((...9 ints...)) directly
        self._names: list[str] = []
        self._ids: dict[str, int] = {}
        self._file = open(path, "wb")
        options = pa.ipc.IpcWriteOptions(emit_dictionary_deltas=True)
        self._stream = pa.ipc.new_stream(self._file, EVENT_SCHEMA, options=options)
        self.events_written = 0

    def symbol(self, name: str) -> int:
        """The id of ``name`` in this file's name dictionary."""
        sid = self._ids.get(name)
        if sid is None:
            sid = self._ids[name] = len(self._names)
            self._names.append(name)
        return sid

    def record(self, kind: int, start_ns: int, end_ns: int, name: str, *, category: int = 0, tid: int = 0,
               depth: int = 0, correlation: int = 0, operation: int = -1) -> None:
        """Append one event (the convenient path; collectors on hot paths extend ``rows``)."""
        self.rows.extend((kind, category, tid, depth, start_ns, end_ns, self.symbol(name), correlation, operation))
        if len(self.rows) >= self.chunk_events * _WIDTH:
            self.flush()

    def maybe_flush(self) -> None:
        if len(self.rows) >= self.chunk_events * _WIDTH:
            self.flush()

    def flush(self) -> None:
        """Write buffered rows as one record batch and hand it to the OS."""
        if not self.rows:
            return
        table = np.frombuffer(self.rows, dtype=np.int64).reshape(-1, _WIDTH)
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
        del table  # release the buffer export so the array can shrink
        del self.rows[:]

    def close(self) -> None:
        if self._file.closed:
            return
        self.flush()
        self._stream.close()
        self._file.close()

    def abandon(self) -> None:
        """Close the file without writing (a forked child must not write its parent's buffer)."""
        del self.rows[:]
        self._file.close()
