"""Profiling overhead on three GPU RL loops: uninstrumented vs rlscope (everything on) vs the
framework's own profiler, each mode in its own pinned process, interleaved, several rounds.

    python bench/gpu_overhead.py compare [--loops tiny sb3_ppo_cuda jax_loop] [--rounds 5] \\
        [--cores 2,3] [--out gpu_overhead.csv] [--work DIR]
    python bench/gpu_overhead.py run LOOP MODE STEPS OUT_DIR      one process, one JSON line

Loops:

- ``tiny``: NumPy CartPole + a batch-1 MLP on the GPU, backprop every 32 steps
  (``bench/gpu_collector.py``'s RL-like loop of tiny kernels);
- ``sb3_ppo_cuda``: Stable-Baselines3 PPO with its networks on the GPU
  (``experiments/overhead/loops.py``);
- ``jax_loop``: a jitted JAX MLP policy stepping a NumPy CartPole (the same module).

Modes (``--modes``, default off rlscope profiler): ``off`` (annotations are no-ops), ``rlscope``
(``rlscope.profile()`` with everything on: annotations, transitions, CUDA API calls through
CUPTI callbacks and GPU activity), ``profiler`` (torch.profiler with CPU and CUDA activities for
the PyTorch loops, ``jax.profiler.trace`` for JAX); to see where the cost is: ``rlscope-activity``
(API calls as activity records, the way callbacks replaced), ``annotations``, ``transitions``
(annotations and transitions), ``kernels`` (annotations and GPU activity).

Each process warms the loop up (a tenth of the steps, unprofiled), then times STEPS; an rlscope
mode's row also says how many events of each kind it recorded per step (``events_per_step``). Per round
the modes run in a rotated order, so drift of the machine spreads over all of them. The summary
gives, per loop, each mode's wall time over the same round's uninstrumented one (median and
range over rounds) and how much less time rlscope adds than the framework's profiler
((profiler - off) / (rlscope - off), medians).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

LOOPS = ("tiny", "sb3_ppo_cuda", "jax_loop")
# rlscope's modes: rlscope.profile() options and how CUDA API calls are recorded
# ($RLSCOPE_CUPTI_API; "rlscope" is the default, everything on).
RLSCOPE_MODES: dict[str, tuple[dict[str, Any], str]] = {
    "rlscope": ({}, "callbacks"),
    "rlscope-activity": ({}, "activity"),
    "annotations": ({"transitions": False, "gpu": False}, "callbacks"),
    "transitions": ({"gpu": False}, "callbacks"),
    "kernels": ({"transitions": False, "gpu": "kernels"}, "callbacks"),
}
MODES = ("off", *RLSCOPE_MODES, "profiler")
DEFAULT_MODES = ("off", "rlscope", "profiler")
# Steps per loop, for timed runs of seconds (set from a first measurement on an H100: 2-3 s
# uninstrumented each, 10 s for SB3; --steps overrides).
DEFAULT_STEPS = {"tiny": 10_000, "sb3_ppo_cuda": 100_000, "jax_loop": 40_000}


def _loop(name: str, steps: int, annotate: bool) -> None:
    if name == "tiny":
        from gpu_collector import rl_loop

        rl_loop(steps, annotate=annotate)
    else:  # annotated with rlscope's calls, which are no-ops when nothing profiles
        from experiments.overhead.loops import run

        run(name, steps)


def _profiled(name: str, mode: str, trace: Path) -> Any:
    import contextlib

    import rlscope

    if mode == "off":
        return contextlib.nullcontext()
    if mode in RLSCOPE_MODES:
        from rlscope.collect.cupti import ENV_API

        options, source = RLSCOPE_MODES[mode]
        os.environ[ENV_API] = source
        return rlscope.profile(trace, process=name, **options)
    if name == "jax_loop":
        import jax

        return jax.profiler.trace(str(trace))
    from torch.profiler import ProfilerActivity, profile

    return profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])


def run_one(name: str, mode: str, steps: int, out: Path) -> dict[str, Any]:
    """Warm up, then time ``steps`` of loop ``name`` under ``mode``; the device drained inside."""
    if name not in LOOPS or mode not in MODES:
        raise SystemExit(f"loop {name!r} / mode {mode!r}: use one of {LOOPS} and one of {MODES}")
    _loop(name, max(1, steps // 10), annotate=False)
    trace = out / f"{name}_{mode}_{time.time_ns()}"
    context = _profiled(name, mode, trace)  # built before the clock starts (imports)
    started = time.perf_counter()
    with context:
        _loop(name, steps, annotate=mode in RLSCOPE_MODES)
        _synchronize(name)
    row = {"loop": name, "mode": mode, "steps": steps, "wall_s": time.perf_counter() - started}
    if mode in RLSCOPE_MODES:  # what the time bought, read after the clock stopped
        row["events_per_step"] = events_per_step(trace, steps)
    return row


def events_per_step(trace: Path, steps: int) -> str:
    """How many events of each kind an rlscope trace holds per loop step ("cuda_api=21.04 ..."):
    where a mode's overhead can come from (every CUDA API call, kernel and native call recorded
    costs something)."""
    from rlscope.trace.reader import read_trace
    from rlscope.trace.schema import Kind

    counts: dict[str, int] = {}
    for process in read_trace(trace):
        for kind, n in process.events["kind"].value_counts().items():
            name = Kind(int(kind)).name.lower()
            counts[name] = counts.get(name, 0) + int(n)
    return " ".join(f"{kind}={n / steps:.2f}" for kind, n in sorted(counts.items()))


def _synchronize(name: str) -> None:
    if name == "jax_loop":
        import jax

        jax.effects_barrier()
    else:
        import torch

        torch.cuda.synchronize()


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per loop and profiled mode: wall time over the same round's uninstrumented run, median and
    range over rounds; and, per loop, the profiler's added time over rlscope's (medians)."""
    import statistics

    walls: dict[tuple[str, int], dict[str, float]] = {}
    for row in rows:
        walls.setdefault((row["loop"], row["round"]), {})[row["mode"]] = row["wall_s"]
    summary = []
    for name in dict.fromkeys(row["loop"] for row in rows):
        rounds = [w for (loop, _), w in walls.items() if loop == name and "off" in w]
        entry: dict[str, Any] = {"loop": name, "rounds": len(rounds)}
        added: dict[str, float] = {}
        for mode in [m for m in MODES if m != "off"]:
            ratios = [w[mode] / w["off"] for w in rounds if mode in w]
            if ratios:
                entry[mode] = statistics.median(ratios)
                entry[f"{mode}_range"] = (min(ratios), max(ratios))
                added[mode] = statistics.median([w[mode] - w["off"] for w in rounds if mode in w])
        if added.get("rlscope", 0) > 0 and "profiler" in added:
            entry["profiler_added_over_rlscope"] = added["profiler"] / added["rlscope"]
        summary.append(entry)
    return summary


def compare(args: argparse.Namespace) -> None:
    import pandas as pd

    args.work.mkdir(parents=True, exist_ok=True)
    pin = ["taskset", "-c", args.cores] if args.cores and shutil.which("taskset") else []
    rows: list[dict[str, Any]] = []
    modes = tuple(args.modes)
    total = args.rounds * len(args.loops) * len(modes)
    try:  # an interrupt (Ctrl-C, a deadline) keeps the finished runs: CSV and summary of those
        for round_ in range(args.rounds):
            for name in args.loops:
                shift = round_ % len(modes)
                for mode in modes[shift:] + modes[:shift]:
                    command = [*pin, sys.executable, __file__, "run", name, mode,
                               str(args.steps or DEFAULT_STEPS[name]), str(args.work)]
                    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
                    if done.returncode != 0:
                        tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
                        print(f"round {round_} {name} {mode}: exit {done.returncode}: {tail[0]}", flush=True)
                        continue
                    row = json.loads(done.stdout.strip().splitlines()[-1]) | {"round": round_}
                    rows.append(row)
                    print(f"[{len(rows)}/{total}] round {round_} {name:13s} {mode:9s} {row['wall_s']:.3f} s "
                          f"{row.get('events_per_step', '')}", flush=True)
    except KeyboardInterrupt:
        print(f"stopped after {len(rows)} of {total} runs; the summary is of those", flush=True)
    if args.out is not None:
        pd.DataFrame(rows).to_csv(args.out, index=False)
    for entry in summarize(rows):
        parts = [f"{entry['loop']:13s} ({entry['rounds']} rounds)"]
        for mode in [m for m in MODES if m != "off"]:
            if mode in entry:
                low, high = entry[f"{mode}_range"]
                parts.append(f"{mode} {entry[mode]:.2f}x [{low:.2f}, {high:.2f}]")
        if "profiler_added_over_rlscope" in entry:
            parts.append(f"profiler adds {entry['profiler_added_over_rlscope']:.1f}x rlscope's time")
        print("; ".join(parts), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("run", help="one loop in one mode, in this process")
    one.add_argument("loop", choices=LOOPS)
    one.add_argument("mode", choices=MODES)
    one.add_argument("steps", type=int)
    one.add_argument("out", type=Path)
    many = commands.add_parser("compare", help="every loop and mode, interleaved rounds, then the ratios")
    many.add_argument("--loops", nargs="+", choices=LOOPS, default=list(LOOPS))
    many.add_argument("--modes", nargs="+", choices=MODES, default=list(DEFAULT_MODES),
                      help="off is always run: the ratios are over it")
    many.add_argument("--rounds", type=int, default=5)
    many.add_argument("--steps", type=int, default=None, help="steps for every loop (default: per loop)")
    many.add_argument("--cores", default="2,3", help="taskset core list for every process ('' to not pin)")
    many.add_argument("--timeout", type=float, default=600.0, help="seconds one process may take")
    many.add_argument("--out", type=Path, default=None, help="CSV of every process's wall time")
    many.add_argument("--work", type=Path, default=Path("/tmp/rlscope_gpu_overhead"), help="traces go here")
    args = parser.parse_args()
    if args.command == "compare" and "off" not in args.modes:
        args.modes = ["off", *args.modes]
    if args.command == "run":
        args.out.mkdir(parents=True, exist_ok=True)
        print(json.dumps(run_one(args.loop, args.mode, args.steps, args.out)), flush=True)
    else:
        compare(args)


if __name__ == "__main__":
    main()
