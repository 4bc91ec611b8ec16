"""Synthetic RL-like traces for the analysis benchmark: iterations of nested operations, each
full of short calls into the backend and the simulator, written through the real TraceWriter."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rlscope.trace.schema import EVENTS_FILE, META_FILE, ROW_FIELDS, SCHEMA_VERSION, Category, Kind
from rlscope.trace.writer import TraceWriter

CALLS_PER_OP = 8


def write_synthetic(directory: Path, events: int, seed: int = 0) -> Path:
    """Write about ``events`` events (operations, calls, steps) for one process; return its dir."""
    rng = np.random.default_rng(seed)
    proc_dir = directory / "synthetic.1"
    proc_dir.mkdir(parents=True, exist_ok=True)
    writer = TraceWriter(proc_dir / EVENTS_FILE, chunk_events=1 << 16)
    ops = [writer.symbol(n) for n in ("inference", "simulation", "backpropagation")]
    calls = [writer.symbol(f"call{i}") for i in range(32)]
    phase = writer.symbol("training")
    per_iteration = 3 * (1 + CALLS_PER_OP) + 1
    iterations = max(1, events // per_iteration)
    t = 0
    width = len(ROW_FIELDS)
    block = np.zeros((iterations * per_iteration, width), dtype=np.int64)
    row = 0
    gaps = rng.integers(50, 500, size=(iterations, 3, CALLS_PER_OP, 2))
    for it in range(iterations):
        it_start = t
        for k, op in enumerate(ops):
            op_start = t
            for c in range(CALLS_PER_OP):
                t += int(gaps[it, k, c, 0])
                end = t + int(gaps[it, k, c, 1])
                cat = int(Category.SIMULATOR) if k == 1 else int(Category.BACKEND)
                block[row] = (int(Kind.CPU_CALL), cat, 1, 0, t, end, calls[c], 0, -1)
                row += 1
                t = end
            t += 100
            block[row] = (int(Kind.OPERATION), 0, 1, 0, op_start, t, op, 0, -1)
            row += 1
        block[row] = (int(Kind.STEP), 0, 1, 0, it_start, t, phase, 0, -1)
        row += 1
    for chunk in np.array_split(block, max(1, len(block) // (1 << 16))):
        writer.append_block(chunk)
        writer.flush()
    writer.record(int(Kind.PHASE), 0, t, "training", tid=1)
    writer.close()
    meta = {"schema_version": SCHEMA_VERSION, "process": "synthetic", "pid": 1, "main_tid": 1, "start_ns": 0,
            "end_ns": t, "complete": True}
    (proc_dir / META_FILE).write_text(json.dumps(meta))
    return directory
