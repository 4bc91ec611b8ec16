"""The scale-up case study under the profiler: how busy the GPU really is as actors are added.

The workload of ``configs/scale_up.yaml``: runs ``experiments.casestudies.scale_up`` (M actors and
a learner sharing one GPU) under ``rlscope prof``, which traces every process, and returns, over
the window in which all processes ran together:

- ``table: gpu``, one row per measure: nvidia-smi's ``utilization.gpu`` and GPM's SM utilisation
  (NVML, sampled during the window) beside rlscope's true GPU-bound share, the union of every
  process's kernel and copy intervals (``rlscope.analyze.gpu.gpu_use_across``). Without a GPU
  these rows are absent and ``gpu_skipped`` says why;
- ``table: breakdown``, per process, operation and layer: seconds and share of the window;
- ``worker_steps_per_s`` (all actors together) and ``learner_updates_per_s``.

A process that fails fails the run with the message naming it and its log; the trace and logs
are then kept (in the run's folder under ``rlscope run``) so the other processes' traces can be read.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["profiled_scale_up", "scale_up_rows"]


def profiled_scale_up(workers: int, duration_s: float, device: str = "auto", timeout_s: float = 1800,
                      crash_worker: int | None = None) -> dict[str, Any]:
    """Run the actor/learner workload with ``workers`` actors for ``duration_s`` under ``rlscope prof``."""
    from experiments.devices import resolve_device
    from rlscope.collect.launch import run_profiled
    from rlscope.analyze.attribution import read_attributed

    device = resolve_device(device)
    tmp = Path(tempfile.mkdtemp(prefix="rlscope-scale-up-"))
    logs = tmp / "logs"
    command = [sys.executable, "-m", "experiments.casestudies.scale_up", str(workers), str(duration_s), device,
               str(logs)] + ([] if crash_worker is None else ["--crash-worker", str(crash_worker)])
    with (tmp / "launcher.log").open("w") as log:
        trace, code = run_profiled(command, tmp / "trace", gpu=device.startswith("cuda"), stdout=log,
                                   timeout_s=timeout_s)
    output = (tmp / "launcher.log").read_text()
    if code != 0:
        kept = _keep(tmp)
        failed = next((line for line in output.splitlines() if line.startswith("failed: ")), f"exit code {code}")
        raise RuntimeError(f"scale-up run {failed.replace(str(tmp), str(kept))}; every process's trace: "
                           f"{kept / 'trace'} (`rlscope analyze` reads them)")
    result = scale_up_rows(read_attributed(trace))
    shutil.rmtree(tmp, ignore_errors=True)
    skipped = {} if device.startswith("cuda") else {"gpu_skipped": f"GPU measures need a GPU (device {device})"}
    return {**result, **skipped, "device": device, "python": platform.python_version()}


def _keep(tmp: Path) -> Path:
    """Where a failed run's trace and logs stay: the run's folder under ``rlscope run``, else ``tmp``."""
    run_dir = os.environ.get("RLSCOPE_RUN_DIR")
    if not run_dir:
        return tmp
    kept = Path(run_dir) / "failed-scale-up"
    shutil.rmtree(kept, ignore_errors=True)
    shutil.move(str(tmp), kept)
    return kept


def scale_up_rows(processes: list[Any]) -> dict[str, Any]:
    """The rows described in the module docstring, from the processes' traces."""
    import numpy as np

    from experiments.casestudies.scale_up import LAUNCHER, LEARNER, RUNNING
    from rlscope.analyze import analyze_processes
    from rlscope.analyze.gpu import gpu_use_across
    from rlscope.plot.breakdown import stack_label
    from rlscope.trace.schema import Kind

    start, end = _window(processes, RUNNING)
    rows: list[dict[str, Any]] = [
        {"table": "gpu", "gpu": int(r.device), "measure": r.measure, "percent": float(r.percent),
         "samples": int(r.samples)} for r in gpu_use_across(processes, start, end).itertuples()]
    tables = analyze_processes(processes)
    breakdown = tables["breakdown"]
    ours = breakdown[(breakdown["phase"] == RUNNING) & (breakdown["thread"] == "main")].copy()
    ours["layer"] = [stack_label(c, g) for c, g in zip(ours["cpu"], ours["gpu"])]
    ours["name"] = ours["process"].str.replace(r"\[\d+\]$", "", regex=True)
    ours = ours[ours["name"] != LAUNCHER]
    for (name, operation, layer), seconds in ours.groupby(["name", "operation", "layer"])["time_s"].sum().items():
        rows.append({"table": "breakdown", "process": name, "role": "learner" if name == LEARNER else "worker",
                     "operation": operation, "layer": layer, "seconds": float(seconds),
                     "share": float(seconds) / ((end - start) / 1e9)})
    steps = {p.meta["process"]: int(np.sum((p.events["kind"].to_numpy() == int(Kind.STEP))
                                           & (p.events["start_ns"].to_numpy() >= start)
                                           & (p.events["start_ns"].to_numpy() < end))) for p in processes}
    window_s = (end - start) / 1e9
    return {"rows": rows, "window_s": window_s, "learner_updates_per_s": steps.get(LEARNER, 0) / window_s,
            "worker_steps_per_s": sum(n for name, n in steps.items() if name.startswith("worker")) / window_s}


def _window(processes: list[Any], phase: str) -> tuple[int, int]:
    """The launcher's ``phase`` interval: when every process ran."""
    from experiments.casestudies.scale_up import LAUNCHER
    from rlscope.trace.schema import Kind

    for process in processes:
        if process.meta["process"] != LAUNCHER:
            continue
        ev = process.events
        phases = ev[(ev["kind"] == int(Kind.PHASE)) & (ev["name"] == phase)]
        if not phases.empty:
            return int(phases["start_ns"].min()), int(phases["end_ns"].max())
    raise RuntimeError(f"no launcher process with a {phase!r} phase in the trace")
