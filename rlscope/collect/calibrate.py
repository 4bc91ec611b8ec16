"""`rlscope calibrate`: run a workload under each instrumentation configuration and derive what
each recorded event costs (``rlscope.analyze.calibration``).

Layout: ``OUTPUT/calibration.json`` and ``OUTPUT/runs/<repetition>-<config>/`` (each a trace
directory with ``log.txt``). Configurations are interleaved within each repetition so that slow
drift of the machine touches all of them alike. A run that fails or times out is reported with
its log; the others are kept and used.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlscope.analyze.calibration import (
    CALIBRATION_FILE,
    CONFIGS,
    GPU_CONFIGS,
    Calibration,
    derive_costs,
    event_counts,
    machine_fingerprint,
)
from rlscope.errors import RlscopeError

__all__ = ["calibrate", "measure_run"]


def measure_run(trace_dir: Path) -> dict[str, Any]:
    """Wall time (summed over the trace's processes) and event counts of one finished run."""
    from rlscope.analyze import analyze_trace
    from rlscope.trace.reader import read_trace

    processes = read_trace(trace_dir)
    wall = sum(int(p.meta["end_ns"]) - int(p.meta["start_ns"]) for p in processes)
    if all(p.meta.get("wall_only") for p in processes):
        counts = dict.fromkeys(("annotation", "python_call", "cuda_api", "gpu_activity"), 0)
    else:
        counts = event_counts(analyze_trace(trace_dir)["transitions"])
    return {"wall_ns": wall, "counts": counts}


LENGTH = "{length}"  # where ``lengths`` go in the command


def calibrate(command: list[str], output: Path, repetitions: int = 3, gpu: bool = True, timeout_s: float = 3600,
              progress: Callable[[str], None] = print, lengths: list[str] | None = None
              ) -> tuple[Calibration, list[str]]:
    """Run the ladder of configurations ``repetitions`` times; returns the calibration (also
    saved to ``output/calibration.json``) and the failed runs' descriptions.

    ``lengths``: two workload sizes substituted for ``{length}`` in the command, so that what a
    layer costs once per process is told apart from what it costs per event.
    """
    from rlscope.collect.cupti import gpu_unavailable_reason
    from rlscope.collect.launch import run_profiled

    if not command:
        raise RlscopeError("no command given; usage: rlscope calibrate -- python train.py ARGS")
    lengths = list(lengths or [])
    if lengths and (len(lengths) != 2 or not any(LENGTH in a for a in command)):
        raise RlscopeError(f"--lengths takes two sizes, e.g. 1000,2000, and the command must say where they go "
                           f"with {LENGTH}, e.g. `python train.py --steps {LENGTH}`")
    if repetitions < 1:
        raise RlscopeError(f"--repetitions {repetitions}: need at least 1 (3 or more for a confidence interval)")
    configs = [c for c in CONFIGS if gpu or c not in GPU_CONFIGS]
    if gpu and (reason := gpu_unavailable_reason()) is not None:
        configs = [c for c in configs if c not in GPU_CONFIGS]
        progress(f"no GPU here ({reason}): calibrating the CPU-side events only")
    runs: list[dict[str, Any]] = []
    failures: list[str] = []
    sizes: list[str | None] = list(lengths) or [None]
    total = repetitions * len(configs) * len(sizes)
    for rep in range(repetitions):
        for config, size in ((c, n) for c in configs for n in sizes):
            transitions, layers, _ = CONFIGS[config]
            run_dir = output / "runs" / (f"{rep}-{config}" + (f"-{size}" if size else ""))
            run_dir.mkdir(parents=True, exist_ok=True)
            label = f"repetition {rep + 1}, {config}" + (f", length {size}" if size else "")
            progress(f"[{len(runs) + len(failures) + 1}/{total}] {label}")
            argv = [a.replace(LENGTH, size) for a in command] if size else list(command)
            log = run_dir / "log.txt"
            with log.open("w") as out:
                try:
                    _, code = run_profiled(argv, run_dir, transitions=bool(transitions),
                                           gpu=False if layers == "0" else layers, wall_only=transitions is None,
                                           stdout=out, timeout_s=timeout_s)
                except subprocess.TimeoutExpired:
                    code = None
            if code != 0:
                why = "timed out" if code is None else f"exit code {code}"
                failures.append(f"{label}: {why}; log: {log}")
                progress(f"  failed ({why}); log: {log}")
                continue
            runs.append({"config": config, "repetition": rep, "length": float(size or 0), **measure_run(run_dir)})
    costs, ci, reps, fixed = derive_costs(runs) if runs else ({}, {}, 0, {})
    calibration = Calibration(costs_ns=costs, ci95_ns=ci, repetitions=reps, machine=machine_fingerprint(),
                              command=list(command), runs=runs, fixed_ns=fixed)
    calibration.save(output / CALIBRATION_FILE)
    return calibration, failures
