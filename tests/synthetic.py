"""Build small traces by hand, in memory, for analysis tests."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rlscope.trace.reader import ProcessTrace
from rlscope.trace.schema import SCHEMA_VERSION, Category, Kind

MAIN = 1

OP, PHASE, STEP, CALL, API, KERNEL = (Kind.OPERATION, Kind.PHASE, Kind.STEP, Kind.CPU_CALL, Kind.CUDA_API,
                                      Kind.GPU_KERNEL)
BACKEND, SIMULATOR = Category.BACKEND, Category.SIMULATOR


def make_trace(rows: list[tuple], start: int = 0, end: int = 100, phases: list[tuple] | None = None) -> ProcessTrace:
    """rows: (kind, start, end, name[, category=0, depth=0, tid=MAIN, operation_name=None]).

    A phase "default" covering [start, end] is added unless ``phases`` lists (name, start, end).
    """
    names: list[str] = []

    def sym(name: str) -> int:
        if name not in names:
            names.append(name)
        return names.index(name)

    records = []
    for row in rows:
        kind, s, e, name, *rest = row
        category, depth, tid, op_name = (list(rest) + [0, 0, MAIN, None][len(rest):])[:4]
        records.append(dict(kind=int(kind), category=int(category), tid=tid, depth=depth, start_ns=s, end_ns=e,
                            name=sym(name), correlation=len(records), operation=sym(op_name) if op_name else -1))
    for name, s, e in phases or [("default", start, end)]:
        records.append(dict(kind=int(PHASE), category=0, tid=MAIN, depth=0, start_ns=s, end_ns=e, name=sym(name),
                            correlation=0, operation=-1))
    frame = pd.DataFrame(records)
    frame["name"] = pd.Categorical.from_codes(frame["name"], categories=names)
    meta = {"schema_version": SCHEMA_VERSION, "process": "t", "pid": 7, "main_tid": MAIN, "start_ns": start,
            "end_ns": end, "complete": True}
    return ProcessTrace(Path("."), meta, frame)
