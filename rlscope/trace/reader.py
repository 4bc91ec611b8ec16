"""Read trace bundles back as pandas DataFrames; a torn last chunk is dropped with a warning."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from rlscope.errors import TraceError
from rlscope.trace.schema import EVENT_SCHEMA, EVENTS_FILE, META_FILE, SCHEMA_VERSION

__all__ = ["ProcessTrace", "TraceWarning", "read_process", "read_trace"]


class TraceWarning(UserWarning):
    """A trace was readable only in part (e.g. the process crashed mid-write)."""


@dataclasses.dataclass(frozen=True)
class ProcessTrace:
    """One process's events: columns as in ``rlscope.trace.schema`` with ``name`` categorical."""

    directory: Path
    meta: dict[str, Any]
    events: pd.DataFrame

    @property
    def process(self) -> str:
        return f"{self.meta['process']}[{self.meta['pid']}]"


def read_process(directory: Path) -> ProcessTrace:
    meta_path = directory / META_FILE
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as err:
        raise TraceError(f"{meta_path}: missing or corrupt; is {directory} a trace written by rlscope?") from err
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise TraceError(f"{meta_path}: trace schema version {meta.get('schema_version')} but this rlscope "
                         f"reads version {SCHEMA_VERSION}; analyze it with the rlscope version that wrote it")
    batches = []
    path = directory / EVENTS_FILE
    try:
        with pa.OSFile(str(path)) as f:
            reader = pa.ipc.open_stream(f)
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
                except (pa.ArrowInvalid, OSError) as err:
                    warnings.warn(f"{path}: dropped a torn chunk after {len(batches)} complete ones ({err}); "
                                  f"the process probably died while writing", TraceWarning, stacklevel=2)
                    break
    except (pa.ArrowInvalid, OSError) as err:
        if path.exists() and path.stat().st_size > 0:
            warnings.warn(f"{path}: unreadable header ({err}); no events kept", TraceWarning, stacklevel=2)
    if not meta.get("complete", False):
        warnings.warn(f"{directory}: the process did not finish profiling (crashed or killed); "
                      f"events up to its last flushed chunk are used", TraceWarning, stacklevel=2)
    table = pa.Table.from_batches(batches, schema=EVENT_SCHEMA)
    events = table.to_pandas()
    return ProcessTrace(directory, meta, events)


def read_trace(directory: str | Path) -> list[ProcessTrace]:
    """Every process of a trace bundle, ordered by start time."""
    directory = Path(directory)
    if not directory.is_dir():
        raise TraceError(f"{directory}: no such trace directory; create one with `rlscope prof -- python train.py`")
    processes = [read_process(p.parent) for p in sorted(directory.glob(f"*/{META_FILE}"))]
    if not processes:
        raise TraceError(f"{directory}: holds no process traces (no */{META_FILE}); "
                         f"was the script run under `rlscope prof` or `rlscope.profile()`?")
    return sorted(processes, key=lambda p: (p.meta["start_ns"], p.meta["pid"]))
