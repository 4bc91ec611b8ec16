"""Read trace bundles back as pandas DataFrames; a torn last chunk is dropped with a warning, a
corrupt chunk is an error that names it."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from rlscope.errors import TraceError
from rlscope.trace.schema import (
    EVENT_SCHEMA,
    EVENTS_FILE,
    GPU_NAMES_FILE,
    GPU_ROWS_FILE,
    META_FILE,
    ROW_FIELDS,
    SCHEMA_VERSION,
    UTILISATION_FILE,
    Category,
    Kind,
)

__all__ = ["ProcessTrace", "TraceWarning", "read_process", "read_trace"]


class TraceWarning(UserWarning):
    """A trace was readable only in part (e.g. the process crashed mid-write)."""


@dataclasses.dataclass(frozen=True)
class ProcessTrace:
    """One process's events: columns as in ``rlscope.trace.schema`` with ``name`` categorical.

    ``gpu`` holds the GPU collector's rows as recorded, in the same columns and name categories:
    CUDA API calls (with CUPTI's 32-bit thread ids), GPU work (not yet charged to a thread or
    operation) and the external-correlation records that link them. ``rlscope.analyze.attribution``
    joins them into ``events``; analyses read traces through it.
    """

    directory: Path
    meta: dict[str, Any]
    events: pd.DataFrame
    utilisation: pd.DataFrame | None = None  # NVML samples: time_ns, device, gpu_util_pct, sm_util_pct
    gpu: pd.DataFrame | None = None

    @property
    def process(self) -> str:
        return f"{self.meta['process']}[{self.meta['pid']}]"


def read_process(directory: Path, drop_corrupt: bool = False) -> ProcessTrace:
    """One process's trace. A torn last chunk (the process died while writing) is dropped with
    a warning; a corrupt chunk is a ``TraceError`` naming it, unless ``drop_corrupt`` keeps the
    chunks before it (with a warning)."""
    meta_path = directory / META_FILE
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as err:
        raise TraceError(f"{meta_path}: missing or corrupt; is {directory} a trace written by rlscope?") from err
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise TraceError(f"{meta_path}: trace schema version {meta.get('schema_version')} but this rlscope "
                         f"reads version {SCHEMA_VERSION}; analyze it with the rlscope version that wrote it")
    batches = _read_chunks(directory / EVENTS_FILE, drop_corrupt)
    if not meta.get("complete", False):
        warnings.warn(f"{directory}: the process did not finish profiling (crashed or killed); "
                      f"events up to its last flushed chunk are used", TraceWarning, stacklevel=2)
    table = pa.Table.from_batches(batches, schema=EVENT_SCHEMA)
    events = table.to_pandas()
    gpu = None
    if (directory / GPU_ROWS_FILE).exists():
        events, gpu = _read_gpu(directory, events, drop_corrupt)
    utilisation = None
    if (directory / UTILISATION_FILE).exists():
        utilisation = pd.read_csv(directory / UTILISATION_FILE)
    return ProcessTrace(directory, meta, events, utilisation, gpu)


def _read_chunks(path: Path, drop_corrupt: bool) -> list[pa.RecordBatch]:
    batches: list[pa.RecordBatch] = []
    try:
        with pa.OSFile(str(path)) as f:
            reader = pa.ipc.open_stream(f)
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                except (pa.ArrowInvalid, OSError) as err:
                    warnings.warn(f"{path}: dropped a torn chunk after {len(batches)} complete ones ({err}); "
                                  f"the process probably died while writing", TraceWarning, stacklevel=3)
                    break
                problem = _chunk_problem(batch)
                if problem is not None:
                    where = f"{path}: chunk {len(batches) + 1} (of events {sum(len(b) for b in batches)} onwards)"
                    if not drop_corrupt:
                        raise TraceError(f"{where} is corrupt: {problem}; `rlscope analyze --drop-corrupt` "
                                         f"analyses the {len(batches)} intact chunks before it")
                    warnings.warn(f"{where} is corrupt: {problem}; analysing the {len(batches)} chunks before it",
                                  TraceWarning, stacklevel=3)
                    break
                batches.append(batch)
    except (pa.ArrowInvalid, OSError) as err:
        if path.exists() and path.stat().st_size > 0:
            warnings.warn(f"{path}: unreadable header ({err}); no events kept", TraceWarning, stacklevel=3)
    return batches


_KINDS = np.array([int(k) for k in Kind])
_CATEGORIES = np.array([int(c) for c in Category])


def _chunk_problem(batch: pa.RecordBatch) -> str | None:
    """Why a chunk that Arrow could parse cannot be events rlscope wrote (bytes garbled on disk),
    or None. Checks what every later stage relies on: names resolve, kinds and categories are
    known, depths are not negative, intervals do not end before they start."""
    try:
        batch.validate(full=True)
    except pa.ArrowInvalid as err:
        return str(err)
    if batch.schema.remove_metadata() != EVENT_SCHEMA.remove_metadata():
        return "its columns are not rlscope's event schema"
    column = {name: batch.column(name).to_numpy(zero_copy_only=False) for name in ROW_FIELDS if name != "name"}
    checks = (
        (~np.isin(column["kind"], _KINDS), "unknown event kind"),
        (~np.isin(column["category"], _CATEGORIES), "unknown category"),
        (column["depth"] < 0, "negative depth"),
        (column["end_ns"] < column["start_ns"], "an interval that ends before it starts"),
        (column["operation"] < -1, "an operation id below -1"),
    )
    for bad, what in checks:
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            return f"{what} in row {row} ({', '.join(f'{k}={v[row]}' for k, v in column.items())})"
    return None


_WIDTH = len(ROW_FIELDS)


def _read_gpu(directory: Path, events: pd.DataFrame, drop_corrupt: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The GPU collector's rows as a frame of the event columns, and ``events`` with the name
    categories both share: GPU names come after the event file's own, so its codes (and operation
    ids) hold. A name index out of range reads as "(unknown)"; correlation records have none."""
    path = directory / GPU_ROWS_FILE
    raw = path.read_bytes()
    row_bytes = _WIDTH * 8
    if len(raw) % row_bytes:
        warnings.warn(f"{path}: dropped a torn last row; the process probably died while writing",
                      TraceWarning, stacklevel=3)
    rows = np.frombuffer(raw, dtype=np.int64, count=len(raw) // row_bytes * _WIDTH).reshape(-1, _WIDTH).copy()
    bad = np.flatnonzero(~np.isin(rows[:, 0], _KINDS) | (rows[:, 5] < rows[:, 4]))
    if len(bad):
        first = rows[bad[0]]
        where = f"{path}: row {bad[0]} of {len(rows)} is corrupt (kind {first[0]}, {first[4]}..{first[5]} ns)"
        if not drop_corrupt:
            raise TraceError(f"{where}; `rlscope analyze --drop-corrupt` analyses the {bad[0]} rows before it")
        warnings.warn(f"{where}; analysing the {bad[0]} rows before it", TraceWarning, stacklevel=3)
        rows = rows[:bad[0]]
    text = (directory / GPU_NAMES_FILE).read_text(errors="replace") if (directory / GPU_NAMES_FILE).exists() else ""
    gpu_names = text.split("\n")[:-1]  # every name ends with a newline; a torn last one is dropped

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


def read_trace(directory: str | Path, drop_corrupt: bool = False) -> list[ProcessTrace]:
    """Every process of a trace bundle, ordered by start time (``drop_corrupt``: as in ``read_process``)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise TraceError(f"{directory}: no such trace directory; create one with `rlscope prof -- python train.py`")
    processes = [read_process(p.parent, drop_corrupt) for p in sorted(directory.glob(f"*/{META_FILE}"))]
    if not processes:
        raise TraceError(f"{directory}: holds no process traces (no */{META_FILE}); "
                         f"was the script run under `rlscope prof` or `rlscope.profile()`?")
    return sorted(processes, key=lambda p: (p.meta["start_ns"], p.meta["pid"]))
