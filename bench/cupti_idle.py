"""What an attached CUPTI costs a CUDA launch while it records nothing, measured side by side.

Calibration's windows compare stretches of one process with CUPTI attached throughout, so a
cost CUPTI adds to every CUDA call even while recording nothing is in every window and seen
by none. This measures it on a loop of tiny torch launches (``x.add_(1)``), per launch:

    python bench/cupti_idle.py in-process ROUNDS OUT.json   states interleaved in one process
    python bench/cupti_idle.py processes ROUNDS OUT.json    never-attached vs attached-then-released

In-process states, each round in a new order: ``released`` (CUPTI loaded, started and stopped:
no subscriber, no activity kind), ``idle`` (attached, every kind off: what ``record(False,
False)`` leaves in the unprofiled windows), ``idle_overhead_kind`` (attached, only CUPTI's
overhead records on: what those windows kept before), ``recording`` (runtime, driver and kernel
records on). ``processes`` runs the same loop in fresh interpreters, alternately never touching
CUPTI and releasing it before the loop (each value there is one process's median, so it also
shows how far apart identical processes run). Prints one JSON line per state; needs a CUDA GPU.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlscope.analyze.calibration import median_ci95
from rlscope.collect.cupti import QUERY_APIS, libcupti_candidates

LAUNCHES = 2000  # per timed block: ~5-10 ms of launches
BLOCKS = 5  # per state and round


def launch_blocks(x: Any, blocks: int, launches: int = LAUNCHES, synchronise_each: bool = False) -> list[float]:
    """Nanoseconds per launch of ``blocks`` blocks of ``launches`` tiny kernels, each block
    synchronised (``synchronise_each``: every launch waited for, a round trip)."""
    import torch

    out = []
    for _ in range(blocks):
        t0 = time.perf_counter_ns()
        for _ in range(launches):
            x.add_(1)
            if synchronise_each:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        out.append((time.perf_counter_ns() - t0) / launches)
    return out


def start_tracer(directory: Path, state: str) -> Any:
    from rlscope import _cupti

    tracer = _cupti.Tracer(str(directory / f"{state}.rows"), str(directory / f"{state}.names"))
    every = state != "idle_overhead_kind"  # runtime=driver=gpu=False: subscriber and overhead records only
    result = tracer.start(runtime=every, driver=every, gpu=every, untraced_apis=list(QUERY_APIS))
    if not result["ok"]:
        raise SystemExit(f"cupti_idle: CUPTI did not start ({result['step']}: {result['error']})")
    if state == "idle":
        tracer.record(api=False, gpu=False)
    return tracer


def in_process(rounds: int) -> dict[str, list[float]]:
    import torch

    from rlscope import _cupti

    _cupti.load(libcupti_candidates())
    scratch = Path(tempfile.mkdtemp())
    x = torch.zeros(1, device="cuda")
    launch_blocks(x, 20)  # warm-up: allocator, kernel cache, clocks
    tracer = start_tracer(scratch, "recording")
    launch_blocks(x, 5)
    tracer.stop()
    states = ["released", "idle", "idle_overhead_kind", "recording"]
    samples: dict[str, list[float]] = {s: [] for s in states}
    rng = random.Random(0)
    for r in range(rounds):
        order = states[:]
        rng.shuffle(order)
        for state in order:
            tracer = None if state == "released" else start_tracer(scratch, state)
            samples[state] += launch_blocks(x, BLOCKS)
            if tracer is not None:
                tracer.stop()
        print(f"  round {r + 1}/{rounds}", file=sys.stderr, flush=True)
    return samples


def one_process(release_first: bool) -> list[float]:
    """In a fresh interpreter: warm up, optionally attach and release CUPTI, time the loop."""
    import torch

    x = torch.zeros(1, device="cuda")
    launch_blocks(x, 20)
    if release_first:
        from rlscope import _cupti

        _cupti.load(libcupti_candidates())
        tracer = start_tracer(Path(tempfile.mkdtemp()), "recording")
        launch_blocks(x, 5)
        tracer.stop()
    return launch_blocks(x, 40)


def processes(rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"never_attached": [], "released": []}
    for r in range(rounds):
        for state in ("never_attached", "released") if r % 2 == 0 else ("released", "never_attached"):
            out = subprocess.run([sys.executable, __file__, "child", str(int(state == "released"))],
                                 capture_output=True, text=True, check=True)
            samples[state].append(float(np.median(json.loads(out.stdout))))  # one value per process
        print(f"  round {r + 1}/{rounds}", file=sys.stderr, flush=True)
    return samples


def summarise(samples: dict[str, list[float]], reference: str, per_process: bool = False) -> list[dict[str, Any]]:
    ref = float(np.median(samples[reference]))
    rows = []
    for state, values in samples.items():
        median, half_width = median_ci95(values)
        rows.append({"state": state, "ns_per_launch": round(median, 1),
                     "ci95_ns": None if half_width is None else round(half_width, 1),
                     f"vs_{reference}_ns": round(median - ref, 1),
                     f"vs_{reference}_pct": round(100 * (median - ref) / ref, 2), "samples": len(values)})
        if per_process:  # one value per process: how far apart identical processes run
            rows[-1]["per_process_ns"] = [round(v) for v in values]
    return rows


def main() -> None:
    mode = sys.argv[1]
    if mode == "child":
        print(json.dumps(one_process(sys.argv[2] == "1")))
        return
    rounds, out = int(sys.argv[2]), Path(sys.argv[3])
    if mode == "in-process":
        rows = summarise(in_process(rounds), "released")
    elif mode == "processes":
        rows = summarise(processes(rounds), "never_attached", per_process=True)
    else:
        raise SystemExit(f"cupti_idle: unknown mode {mode!r}; use in-process or processes")
    for row in rows:
        print(json.dumps({"mode": mode, **row}), flush=True)
    out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
