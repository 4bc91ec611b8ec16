"""Calibration data with known costs: whole runs, alternating windows, breakdown tables."""

from __future__ import annotations

from typing import Any

import pandas as pd

from rlscope.calibrate import Calibration
from rlscope.calibrate.estimate import derive_calibration
from rlscope.calibrate.model import CONFIGS, machine_fingerprint

TRUE_COSTS = {"annotation": 400.0, "python_call": 1500.0, "cuda_api": 2500.0, "gpu_activity": 900.0}

COUNTS = {"annotation": 20_000, "python_call": 90_000, "cuda_api": 30_000, "gpu_activity": 12_000}


def runs_with_costs(base_ns: list[int]) -> list[dict]:
    """Runs whose wall time is exactly base + sum(count x true cost) of the layers switched on."""
    runs = []
    for rep, base in enumerate(base_ns):
        on: dict[str, int] = {}  # counts above MIN_EVENTS, so every layer gets a cost
        for config, (_, _, event) in CONFIGS.items():
            if event is not None:
                on[event] = COUNTS[event]
            wall = base + sum(n * TRUE_COSTS[e] for e, n in on.items())
            runs.append({"config": config, "repetition": rep, "wall_ns": int(wall), "counts": dict(on)})
    return runs


def windows_with_costs(blocks: int, levels: tuple[int, ...] = (0, 1, 2), annotations_per_it: float = 2.0,
             calls_per_it: float = 3.0, seed: int = 0, noise_ns: dict[int, float] | None = None,
             residual_ns: float = 0.0) -> list[list[float]]:
    """Alternating windows in palindromic blocks whose time per iteration is a drifting base (a
    jump between blocks, linear within one) plus the true costs of the events switched on
    (per iteration: 1.5 CUDA API calls from level 3, 0.5 kernels from level 4), plus, per level
    in ``noise_ns``, normal noise of that standard deviation on each of its windows. Below level
    3 the same 1.5 CUDA calls, unrecorded, cost ``residual_ns`` each (what CUPTI's recording
    leaves on every call), so the windows see the CUDA API cost less that."""
    import numpy as np

    rng = np.random.default_rng(seed)
    windows = []
    for _ in range(blocks + 1):  # the first block is warm-up and left out
        base, slope = rng.uniform(8_000, 20_000), rng.uniform(-300, 300)
        for i, level in enumerate(levels + levels[::-1]):
            per_it = events_per_iteration(level, annotations_per_it, calls_per_it)
            tau = base + slope * i + sum(n * TRUE_COSTS[e] for e, n in per_it.items())
            tau += 1.5 * residual_ns if level < 3 else 0.0
            tau += rng.normal(0, (noise_ns or {}).get(level, 0.0))
            windows.append([level, tau * 500, 500, *(n * 500 for n in per_it.values())])
    return windows


def events_per_iteration(level: int, annotations_per_it: float = 2.0, calls_per_it: float = 3.0) -> dict[str, float]:
    return {"annotation": annotations_per_it if level >= 1 else 0.0, "python_call": calls_per_it if level >= 2 else 0.0,
            "cuda_api": 1.5 if level >= 3 else 0.0, "gpu_activity": 0.5 if level >= 4 else 0.0}


def calibration_of(**costs: float) -> Calibration:
    return Calibration(costs_ns=costs, ci95_ns=dict.fromkeys(costs), repetitions=3, machine=machine_fingerprint(),
                       command=("python", "train.py"), runs=())


def breakdown_tables():
    keys = dict(process="p[1]", thread="main", phase="default")
    breakdown = pd.DataFrame([
        {**keys, "operation": "inference", "cpu": "Python", "gpu": False, "resources": "Python", "time_ns": 10_000},
        {**keys, "operation": "inference", "cpu": "CUDA API", "gpu": False, "resources": "CUDA API", "time_ns": 4_000},
        {**keys, "operation": "inference", "cpu": "CUDA API", "gpu": True, "resources": "CUDA API+GPU",
         "time_ns": 3_000},
        {**keys, "operation": "inference", "cpu": "none", "gpu": True, "resources": "GPU", "time_ns": 7_000},
        {**keys, "operation": "simulation", "cpu": "Python", "gpu": False, "resources": "Python", "time_ns": 500},
    ])
    transitions = pd.DataFrame([
        {**keys, "operation": "inference", "transition": t, "count": n, "iterations": 1, "per_iteration": n}
        for t, n in (("Annotations", 2), ("Python->Backend", 4), ("Backend->CUDA", 2), ("GPU kernels", 1))
    ] + [{**keys, "operation": "simulation", "transition": "Python->Simulator", "count": 10, "iterations": 1,
          "per_iteration": 10}])
    return breakdown, transitions


def whole_pair(continuous_ns: float, speed_scale: float, windows: list[list[float]], rep: int, pair: int
                ) -> list[dict]:
    """A start-up pair run whole: an uninstrumented run and a profiled one whose time from its
    first step is the uninstrumented one's, plus its writes, plus its events at the true costs
    (the CPU-side ones scaled by how much slower its iterations ran than calibration's, with the
    same events per iteration), plus ``continuous_ns`` per CUDA API call."""
    from rlscope.calibrate.correct import applied_costs
    from rlscope.calibrate.window_costs import window_iteration
    from rlscope.calibrate.model import PROFILED_STARTUP, STARTUP

    base = 30e9 + 1e9 * (rep + pair)  # the machine drifts between pairs
    events = {"annotation": 4_000, "python_call": 6_000, "cuda_api": 3_000, "gpu_activity": 1_000}
    writes = 2e8
    raw = base + writes + continuous_ns * events["cuda_api"] + sum(
        n * applied_costs(TRUE_COSTS, speed_scale)[e] for e, n in events.items())
    iteration_ns, cpu_events = window_iteration([windows])
    startup = {"raw_ns": 5e9, "writes_ns": 0, "events": dict.fromkeys(events, 0)}
    return [{"config": STARTUP, "repetition": rep, "pair": pair, "startup_ns": 4e9, "steady_ns": base},
            {"config": PROFILED_STARTUP, "repetition": rep, "pair": pair, "startup": startup,
             "steady": {"raw_ns": raw, "writes_ns": writes, "events": events},
             "iteration": (iteration_ns * speed_scale, cpu_events)}]


def derive(runs: list[dict[str, Any]]) -> Calibration:
    """The calibration ``runs`` give on this machine."""
    return derive_calibration(runs, machine_fingerprint(), ["python", "train.py"])


ALL_LEVELS = (0, 1, 2, 3, 4)
TOP_CORRECTION = sum(n * TRUE_COSTS[e] for e, n in events_per_iteration(4).items())
