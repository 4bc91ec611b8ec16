"""Read trace bundles back as pandas DataFrames.

Every chunk is verified: a version-2 trace's ``events.arrows`` batches against the checksums in
their metadata, ``gpu.rows`` and ``gpu.names`` against their checksum records
(``rlscope.trace.gpu_files``; ``rlscope.trace.schema`` says what they cover); a version-1
trace's chunks, which carry none, only against what every later stage relies on
(``_chunk_problem``). A torn end (the process died while writing) is
dropped with a warning. A corrupt chunk is a ``TraceError`` naming the file, the chunk and its
bytes; with ``drop_corrupt`` it is left out, the chunks after it that Arrow can still parse are
kept, and what was dropped is in ``ProcessTrace.dropped`` and in one warning per file.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import ValidationError

from rlscope.errors import TraceError, schema_problem
from rlscope.trace.damage import Dropped, TraceWarning, corrupt
from rlscope.trace.gpu_files import read_gpu
from rlscope.trace.schema import (
    CHECKSUM_KEYS,
    EVENT_SCHEMA,
    EVENTS_FILE,
    GPU_NAMES_CRC_FILE,
    GPU_NAMES_FILE,
    GPU_ROWS_FILE,
    META_FILE,
    READABLE_VERSIONS,
    ProcessMeta,
    ROW_FIELDS,
    UTILISATION_FILE,
    Category,
    Kind,
    chunk_checksums,
)

__all__ = ["Dropped", "ProcessTrace", "TraceWarning", "read_process", "read_trace"]


@dataclasses.dataclass(frozen=True)
class ProcessTrace:
    """One process's events: columns as in ``rlscope.trace.schema`` with ``name`` categorical.

    ``gpu`` holds the GPU collector's rows as recorded, in the same columns and name categories:
    CUDA API calls (with CUPTI's 32-bit thread ids), GPU work (not yet charged to a thread or
    operation) and the external-correlation records that link them. ``rlscope.analyze.attribution``
    joins them into ``events``; analyses read traces through it. ``dropped``: the corrupt parts
    left out (``read_process(drop_corrupt=True)``).
    """

    directory: Path
    meta: dict[str, Any]
    events: pd.DataFrame
    utilisation: pd.DataFrame | None = None  # NVML samples: time_ns, device, gpu_util_pct, sm_util_pct
    gpu: pd.DataFrame | None = None
    dropped: tuple[Dropped, ...] = ()
    # Per GPU kernel of a process profiled with --jax-scopes: its XLA module, instruction and
    # jax.named_scope, which the analysis fills in (rlscope.analyze.jax_scopes); None otherwise.
    scopes: pd.DataFrame | None = None

    @property
    def process(self) -> str:
        return f"{self.meta['process']}[{self.meta['pid']}]"

    @property
    def dropped_events(self) -> int:
        """Events left out as corrupt (those of parts whose count is known)."""
        return sum(d.events or 0 for d in self.dropped)


def read_process(directory: Path, drop_corrupt: bool = False) -> ProcessTrace:
    """One process's trace. A torn end (the process died while writing) is dropped with a
    warning; a corrupt chunk is a ``TraceError`` naming it, unless ``drop_corrupt`` leaves it
    out (with a warning) and keeps the others."""
    meta_path = directory / META_FILE
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as err:
        raise TraceError(f"{meta_path}: missing or corrupt; is {directory} a trace written by rlscope?") from err
    version = meta.get("schema_version") if isinstance(meta, dict) else None
    if version not in READABLE_VERSIONS:
        raise TraceError(f"{meta_path}: trace schema version {version} but this rlscope reads versions "
                         f"{', '.join(map(str, READABLE_VERSIONS))}; analyze it with the rlscope version that wrote it")
    try:
        meta = ProcessMeta.model_validate(meta).model_dump()
    except ValidationError as err:
        raise TraceError(f"{meta_path}: {schema_problem(err)}; the file is damaged: profile the script again") from err
    dropped: list[Dropped] = []
    batches = _read_chunks(directory / EVENTS_FILE, drop_corrupt, version >= 2, meta, dropped)
    if not meta.get("complete", False):
        warnings.warn(f"{directory}: the process did not finish profiling (crashed or killed); "
                      f"events up to its last flushed chunk are used", TraceWarning, stacklevel=2)
    _check_count(directory / EVENTS_FILE, meta, sum(len(b) for b in batches), drop_corrupt, dropped)
    table = pa.Table.from_batches(batches, schema=EVENT_SCHEMA)
    events = table.to_pandas()
    _check_end(meta_path, meta, events)
    gpu = None
    if (directory / GPU_ROWS_FILE).exists():
        events, gpu = read_gpu(directory, events, drop_corrupt, dropped)
    utilisation = None
    if (directory / UTILISATION_FILE).exists():
        try:
            utilisation = pd.read_csv(directory / UTILISATION_FILE)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
            warnings.warn(f"{directory / UTILISATION_FILE}: unreadable ({err}); GPU utilisation left out",
                          TraceWarning, stacklevel=2)
    for path in dict.fromkeys(d.path for d in dropped):
        parts = [d for d in dropped if d.path == path]
        details = "; ".join(f"{d.part}: {d.problem}" for d in parts)
        if path.name in (GPU_NAMES_FILE, GPU_NAMES_CRC_FILE):
            warnings.warn(f"{path}: {len(parts)} damaged write(s) of names: {details}", TraceWarning, stacklevel=2)
            continue
        unit = "corrupt chunk" if path.name == EVENTS_FILE else "corrupt range of rows"
        known = sum(d.events or 0 for d in parts)
        count = f"{known:,}" + (" or more" if any(d.events is None for d in parts) else "")
        warnings.warn(f"dropped {count} events in {len(parts)} {unit}{'s' if len(parts) > 1 else ''} of {path}: "
                      + details, TraceWarning, stacklevel=2)
    return ProcessTrace(directory, meta, events, utilisation, gpu, tuple(dropped))


def _check_count(path: Path, meta: dict[str, Any], read: int, drop_corrupt: bool, dropped: list[Dropped]) -> None:
    """A finished process's meta.json counts the events it wrote: fewer in the file (cut, or
    removed, after the process ended) are a damaged trace, not a crash's torn end."""
    written = meta.get("events") if meta["complete"] else None
    accounted = read + sum(d.events or 0 for d in dropped)
    if written is None or accounted >= written or any(d.events is None for d in dropped):
        return
    corrupt(path, f"events {accounted:,}..{written:,}", written - accounted,
             f"the file holds {read:,} of the {written:,} events the finished process wrote (meta.json); it was cut "
             f"or removed afterwards", drop_corrupt, dropped)


def _check_end(meta_path: Path, meta: dict[str, Any], events: pd.DataFrame) -> None:
    """A session records its last phase up to its ``end_ns``: annotations that end later mean a
    damaged meta.json, which analysis would read as a timeline shorter than its events."""
    if meta["end_ns"] is None:
        return
    annotated = events["kind"].isin([int(Kind.OPERATION), int(Kind.PHASE), int(Kind.STEP)])
    last = int(events.loc[annotated, "end_ns"].max()) if annotated.any() else meta["end_ns"]
    if last > meta["end_ns"]:
        raise TraceError(f"{meta_path}: end_ns {meta['end_ns']} is before the process's last annotation "
                         f"({last}); the file is damaged: profile the script again")


def _read_chunks(path: Path, drop_corrupt: bool, checksummed: bool, meta: dict[str, Any],
                 dropped: list[Dropped]) -> list[pa.RecordBatch]:
    """The intact record batches of ``events.arrows``. The stream is read batch by batch, the
    file position before and after each one giving the chunk's bytes (its dictionary delta
    and the batch)."""
    batches: list[pa.RecordBatch] = []
    if not path.exists() or path.stat().st_size == 0:
        return batches  # killed before its first write
    size = path.stat().st_size
    names_known = 0  # the dictionary's length after the chunk before
    bad_names = np.zeros(0, dtype=bool)  # names that came in a corrupt dictionary delta
    kept = 0
    with pa.OSFile(str(path)) as f:
        try:
            reader = pa.ipc.open_stream(f)
        except (pa.ArrowException, OSError) as err:
            _unparseable(path, 0, 0, f.tell() >= size, err, meta, 0, drop_corrupt, dropped)
            return batches
        chunk = 0
        while True:
            begin = f.tell()
            try:
                batch, custom = reader.read_next_batch_with_custom_metadata()
            except StopIteration:
                if f.tell() < size:
                    corrupt(path, f"chunk {chunk + 1} (bytes {begin:,}..{size:,})",
                             _lost_after(meta, kept + sum(d.events or 0 for d in dropped)),
                             "it reads as the stream's end, before the file's", drop_corrupt, dropped)
                break
            except (pa.ArrowException, OSError) as err:
                _unparseable(path, chunk, begin, f.tell() >= size, err, meta,
                             kept + sum(d.events or 0 for d in dropped), drop_corrupt, dropped)
                break
            chunk += 1
            part = f"chunk {chunk} (bytes {begin:,}..{f.tell():,})"
            metadata = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in (custom or {}).items()}
            events = _as_count(metadata.get("rlscope.rows"), batch.num_rows)
            problem, names, fresh_names_bad = _checksum_problem(batch, metadata, names_known, checksummed)
            if names > len(bad_names):
                bad_names = np.concatenate((bad_names, np.zeros(names - len(bad_names), dtype=bool)))
            if fresh_names_bad:
                bad_names[names_known:names] = True
            names_known = max(names_known, names)
            if problem is None and bad_names.any():
                codes = batch.column("name").indices.to_numpy(zero_copy_only=False)
                if len(codes) and bad_names[np.clip(codes, 0, len(bad_names) - 1)].any():
                    problem = "it uses names from a corrupt dictionary delta of an earlier chunk"
            if problem is None:
                problem = _chunk_problem(batch)
            if problem is not None:
                corrupt(path, part, events, problem, drop_corrupt, dropped)
                continue
            batches.append(batch)
            kept += batch.num_rows
    return batches


def _unparseable(path: Path, chunks: int, begin: int, at_end: bool, err: Exception, meta: dict[str, Any], read: int,
                 drop_corrupt: bool, dropped: list[Dropped]) -> None:
    """Arrow cannot parse the stream from byte ``begin`` on, after ``chunks`` chunks: a torn end
    if the failed read reached the end of the file (the process died while writing; a warning,
    not an error), else corrupt bytes, after which nothing can be found. How many events were
    lost is known only from a finished process's meta.json (``events``, against ``read``)."""
    if at_end:
        warnings.warn(f"{path}: dropped a torn chunk after {chunks} complete ones ({err}); the process "
                      f"probably died while writing", TraceWarning, stacklevel=4)
        return
    part = f"chunk {chunks + 1} (bytes {begin:,}..)" if begin else "the stream's header"
    corrupt(path, part, _lost_after(meta, read), f"Arrow cannot parse it ({err}), nor anything after it",
             drop_corrupt, dropped)


def _lost_after(meta: dict[str, Any], read: int) -> int | None:
    """Events written after the ``read`` ones (kept or dropped): known from a finished process's
    meta.json only."""
    total = meta.get("events") if meta.get("complete") else None
    return total - read if isinstance(total, int) and total >= read else None


def _as_count(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _checksum_problem(batch: pa.RecordBatch, metadata: dict[str, str], names_before: int,
                      required: bool) -> tuple[str | None, int, bool]:
    """(what is wrong with the chunk's checksums or None, the name dictionary's length, whether
    the names new in it are corrupt). Chunks of a version-1 trace (not ``required``) have none."""
    try:
        dictionary = batch.column("name").dictionary
    except (KeyError, AttributeError):
        return None, names_before, False  # not the event schema: _chunk_problem says so
    names = len(dictionary)
    if not any(key in metadata for key in CHECKSUM_KEYS):
        return ("it carries no checksum" if required else None), names, False
    try:
        expected = chunk_checksums(batch, names_before)
    except (pa.ArrowException, TypeError, ValueError, IndexError) as err:
        return f"its buffers cannot be checked ({err})", names, True
    fresh_bad = names < names_before or any(metadata.get(k) != expected[k] for k in CHECKSUM_KEYS[2:])
    if any(metadata.get(k) != expected[k] for k in CHECKSUM_KEYS[:2]):
        return (f"checksum mismatch ({batch.num_rows:,} rows, CRC-32 {expected['rlscope.crc32']}; its metadata "
                f"says {metadata.get('rlscope.rows')} rows, {metadata.get('rlscope.crc32')})"), names, fresh_bad
    if fresh_bad:
        return (f"checksum mismatch in the names it adds to the dictionary ({names:,} names, CRC-32 "
                f"{expected['rlscope.names_crc32']}; its metadata says {metadata.get('rlscope.names')}, "
                f"{metadata.get('rlscope.names_crc32')})"), names, True
    return None, names, False


_KINDS = np.array([int(k) for k in Kind])
_CATEGORIES = np.array([int(c) for c in Category])


def _chunk_problem(batch: pa.RecordBatch) -> str | None:
    """Why a chunk that Arrow could parse cannot be events rlscope wrote (bytes garbled on disk),
    or None. Checks what every later stage relies on: names resolve, kinds and categories are
    known, depths are not negative, intervals do not end before they start."""
    try:
        batch.validate(full=True)
    except pa.ArrowException as err:
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
