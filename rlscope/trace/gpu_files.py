"""The GPU collector's files of a process's trace: ``gpu.rows`` (raw int64 rows, the native
tracer's) and ``gpu.names``, each verified against its checksum records (``gpu.rows.crc``,
``gpu.names.crc``: ``rlscope.trace.schema`` says what they cover) where they exist, and joined with
the process's events into one set of name categories."""

from __future__ import annotations

import warnings
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from rlscope.trace.damage import Dropped, TraceWarning, corrupt
from rlscope.trace.schema import (
    EVENT_SCHEMA,
    GPU_CRC_RECORD,
    GPU_NAMES_CRC_FILE,
    GPU_NAMES_FILE,
    GPU_ROWS_CRC_FILE,
    GPU_ROWS_FILE,
    ROW_FIELDS,
    Kind,
)

__all__ = ["read_gpu"]

_KINDS = np.array([int(k) for k in Kind])
_WIDTH = len(ROW_FIELDS)
_ROW_BYTES = _WIDTH * 8


def _verified_gpu_rows(path: Path, raw: bytes, total: int, drop_corrupt: bool,
                       dropped: list[Dropped]) -> np.ndarray | None:
    """Which of the ``total`` rows of ``gpu.rows`` the records of ``gpu.rows.crc`` vouch for (a
    mask), or None where there is no such file (a version-1 trace). Rows after the last record
    were written by a process killed before it could add one: a torn end, dropped with a
    warning. Rows whose record is damaged (its own CRC fails) cannot be checked: corrupt."""
    sidecar = path.with_name(GPU_ROWS_CRC_FILE)
    if not sidecar.exists():
        return None
    data = sidecar.read_bytes()
    keep = np.zeros(total, dtype=bool)

    def bad_rows(first: int, end: int, problem: str) -> None:
        part = f"rows {first:,}..{end - 1:,} (bytes {first * _ROW_BYTES:,}..{end * _ROW_BYTES:,})"
        corrupt(path, part, end - first, problem, drop_corrupt, dropped)

    def unvouched(damaged: int | None) -> str:
        if damaged is None:
            return f"no record of {sidecar.name} covers them"
        return f"their checksum record (record {damaged} of {sidecar.name}) is damaged"

    pos = 0  # the first row no record has vouched for yet
    damaged: int | None = None  # the first of the damaged records since the last intact one
    size = GPU_CRC_RECORD.size
    for i in range(len(data) // size):
        record = data[i * size:(i + 1) * size]
        first, count, crc, own = GPU_CRC_RECORD.unpack(record)
        if zlib.crc32(record[:size - 4]) != own or first < pos or count < 0:
            damaged = i if damaged is None else damaged
            continue
        if first > pos:
            bad_rows(pos, min(first, total), unvouched(damaged))
        damaged = None
        end = first + count
        if end > total:
            bad_rows(first, end, f"{sidecar.name} vouches for {count:,} rows from row {first:,}, "
                                f"but the file ends at row {total:,}")
        elif zlib.crc32(raw[first * _ROW_BYTES:end * _ROW_BYTES]) != crc:
            bad_rows(first, end, f"checksum mismatch (record {i} of {sidecar.name})")
        else:
            keep[first:end] = True
        pos = end
    if pos < total:
        if damaged is not None:
            bad_rows(pos, total, unvouched(damaged))
        else:
            warnings.warn(f"{path}: dropped rows {pos:,}..{total - 1:,}, which no record of {sidecar.name} "
                          f"covers; the process probably died while writing them", TraceWarning, stacklevel=4)
    return keep


def _gpu_names(path: Path, drop_corrupt: bool, dropped: list[Dropped]) -> list[str]:
    """``gpu.names``, one name a line, checked against ``gpu.names.crc`` where there is one: a name
    in a damaged write reads as "(corrupt name)" with ``drop_corrupt`` (its rows keep their times),
    else the trace is refused. A torn last name (the process died while writing) is dropped."""
    raw = path.read_bytes() if path.exists() else b""
    sidecar = path.with_name(GPU_NAMES_CRC_FILE)
    if not sidecar.exists():
        return raw.decode(errors="replace").split("\n")[:-1]
    data = sidecar.read_bytes()
    size = GPU_CRC_RECORD.size
    names: list[str] = []
    offset = 0
    for i in range(len(data) // size):
        record = data[i * size:(i + 1) * size]
        first, count, crc, own = GPU_CRC_RECORD.unpack(record)
        if zlib.crc32(record[:size - 4]) != own or first != len(names) or count < 0:
            corrupt(sidecar, f"record {i}", 0, "its own checksum or position does not hold; the names from "
                                                  f"{len(names):,} on are not vouched for", drop_corrupt, dropped)
            break
        chunk = raw[offset:offset + count]
        following = GPU_CRC_RECORD.unpack(data[(i + 1) * size:(i + 2) * size])[0] \
            if len(data) >= (i + 2) * size else None
        if len(chunk) == count and zlib.crc32(chunk) == crc:
            names += chunk.decode(errors="replace").split("\n")[:-1]
        else:
            # The names a damaged write held: up to the next write's first; for the last write, as
            # many as its lines (rows naming one past them read as "(unknown)").
            lost = following - first if following is not None and following > first else max(1, chunk.count(b"\n"))
            corrupt(path, f"names {first:,}..{first + lost - 1:,} (bytes {offset:,}..{offset + count:,})", 0,
                     f"checksum mismatch (record {i} of {sidecar.name}); their rows read as \"(corrupt name)\"",
                     drop_corrupt, dropped)
            names += ["(corrupt name)"] * lost
        offset += count
    return names


def read_gpu(directory: Path, events: pd.DataFrame, drop_corrupt: bool,
              dropped: list[Dropped]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The GPU collector's rows as a frame of the event columns, and ``events`` with the name
    categories both share: GPU names come after the event file's own, so its codes (and operation
    ids) hold. A name index out of range reads as "(unknown)"; correlation records have none."""
    path = directory / GPU_ROWS_FILE
    raw = path.read_bytes()
    if len(raw) % _ROW_BYTES:
        warnings.warn(f"{path}: dropped a torn last row; the process probably died while writing",
                      TraceWarning, stacklevel=3)
    rows = np.frombuffer(raw, dtype=np.int64, count=len(raw) // _ROW_BYTES * _WIDTH).reshape(-1, _WIDTH)
    vouched = _verified_gpu_rows(path, raw, len(rows), drop_corrupt, dropped)
    rows = rows[vouched] if vouched is not None else rows.copy()
    bad = np.flatnonzero(~np.isin(rows[:, 0], _KINDS) | (rows[:, 5] < rows[:, 4]))
    if len(bad):
        first = rows[bad[0]]
        corrupt(path, f"row {bad[0]:,} of {len(rows):,}", len(rows) - int(bad[0]),
                 f"kind {first[0]}, {first[4]}..{first[5]} ns, and nothing after it can be trusted",
                 drop_corrupt, dropped)
        rows = rows[:bad[0]]
    gpu_names = _gpu_names(directory / GPU_NAMES_FILE, drop_corrupt, dropped)

    names = events["name"].cat.categories
    fresh = pd.Index(gpu_names).difference(names, sort=False).unique()
    categories = names.append(fresh)
    lookup = categories.get_indexer(pd.Index(gpu_names + ["(unknown)"]))
    named = rows[:, 0] != int(Kind.CORRELATION)
    gpu_name = rows[:, 6]
    gpu_name = np.where((gpu_name >= 0) & (gpu_name < len(gpu_names)), gpu_name, len(gpu_names))
    if (lookup[gpu_name[named]] < 0).any():
        categories = categories.append(pd.Index(["(unknown)"]))
        lookup = categories.get_indexer(pd.Index(gpu_names + ["(unknown)"]))
    codes = np.where(named, lookup[gpu_name], -1)
    gpu = pd.DataFrame({f.name: rows[:, i].astype(f.type.to_pandas_dtype()) for i, f in enumerate(EVENT_SCHEMA)
                        if f.name != "name"})
    gpu.insert(ROW_FIELDS.index("name"), "name", pd.Categorical.from_codes(codes, categories=categories))
    events = events.copy()
    events["name"] = events["name"].cat.set_categories(categories)
    return events, gpu
