"""Is a sampled run's estimate right? Sample a fully traced run after the fact, many times over.

    python bench/sampled_validation.py synthetic [--seeds 200] [--iterations 40000] [--out synthetic.json]
    python bench/sampled_validation.py record TRACE_DIR [--workload gym_numpy] [--steps 40000]
    python bench/sampled_validation.py check TRACE_DIR [--seeds 100] [--window 10] [--block 200] \\
        [--warmup 50] [--settle 2] [--out validation.json]

``synthetic`` runs the estimator on made-up runs whose truth is known (an operation's share
drifting x1.5 over the run, noise, an evaluation every 100 iterations that takes 20 iterations'
time), with the windows placed three ways: the gap between windows drawn uniformly (what
``rlscope.collect.sampling`` does), one window at a uniform offset inside each fixed block
(what it does not do, and why), and uniform gaps from a block that quadruples halfway, as the
trace budget draws them when the operation's time doubles there, estimated with the windows
weighted by their blocks and without. ``record`` profiles one of the overhead workloads
(``experiments/overhead/loops.py``) with every layer on, the whole run. ``check`` draws the
windows a sampled session with each seed would have measured
(``rlscope.collect.sampling.window_starts``, on the trace's own ``rlscope.step()`` times),
estimates every share from those windows alone (``rlscope.analyze.sampled``, one phase) and
compares each with the share of the full trace over the same iterations. Per operation and
resources taking at least 5% of the iteration time, over the seeds: how often the 95% interval
covers the full trace's share (the goal: at least 90%), how often the estimate is within
max(0.5 points, 5% relative) of it, the mean error and the interval's median half-width.
Done on a recorded trace, this checks the estimator and the window placement on a real loop's
variability; what sampling does to the loop's own speed needs a sampled run (GPU bench).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIN_SHARE = 0.05


def _fixed_blocks(spec: Any, windows: int, rng: Any) -> list[int]:
    """One window at a uniform offset inside each fixed block: iterations near a block's edges
    fall in fewer of the possible windows than those in its middle."""
    return [spec.warmup + b * spec.block + int(rng.integers(0, spec.block - spec.window + 1)) for b in range(windows)]


def _budgeted(spec: Any, iterations: int, seed: int) -> tuple[list[int], list[int]]:
    """Windows placed as a sampled session places them whose trace budget quadruples the block
    halfway through the run (a loop whose events per iteration grew): the windows' starts and the
    block each one's gap was drawn from."""
    import random

    from rlscope.collect.sampling import _gap

    rng = random.Random(seed)
    starts, blocks, block = [], [], spec.block
    start = max(spec.warmup, 1) + _gap(rng, spec.window, block)
    while start + spec.window <= iterations:
        starts.append(start)
        blocks.append(block)
        block = spec.block * (4 if start >= iterations // 2 else 1)
        start += spec.window + _gap(rng, spec.window, block)
    return starts, blocks


def synthetic(seeds: int, iterations: int = 40_000) -> dict[str, Any]:
    """Per schedule: the estimate over many made-up runs. In the budgeted runs the operation's
    time doubles halfway (what made the trace grow and the budget draw from larger blocks); they
    are estimated twice, the windows weighted by their blocks (as ``rlscope.analyze.sampled``
    does) and not."""
    from rlscope.analyze.sampled import ratio_estimate
    from rlscope.collect.sampling import SampleSpec, window_starts

    results = {}
    for schedule in ("uniform gaps", "fixed blocks", "budget: block x4 halfway, weighted",
                     "budget: block x4 halfway, unweighted"):
        covered, errors, halves, seen = [], [], [], []
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            drift = np.linspace(1.0, 1.5, iterations)
            part = 0.3 * drift * rng.lognormal(0, 0.2, iterations)
            if schedule.startswith("budget"):
                part[iterations // 2:] *= 2
            wall = part + 0.7 * drift * rng.lognormal(0, 0.2, iterations)
            wall[::100] += 20.0
            spec = SampleSpec(window=10, block=200, warmup=0, settle=0, seed=seed)
            weights = None
            if schedule == "uniform gaps":
                starts = window_starts(spec, iterations // spec.block)
            elif schedule == "fixed blocks":
                starts = _fixed_blocks(spec, iterations // spec.block, rng)
            else:
                starts, blocks = _budgeted(spec, iterations, seed)
                weights = np.array(blocks, dtype=np.float64) if schedule.endswith(", weighted") else None
            keep = [i for i, s in enumerate(starts) if s + spec.window <= iterations]
            starts = [starts[i] for i in keep]
            w = weights[keep] if weights is not None else np.ones(len(starts))
            x = np.array([wall[s:s + spec.window].sum() for s in starts])
            y = np.array([part[s:s + spec.window].sum() for s in starts])
            est = ratio_estimate(w * y, w * x, wall.sum())
            truth = part.sum() / wall.sum()
            covered.append(est.low <= truth <= est.high)
            errors.append(est.share - truth)
            halves.append((est.high - est.low) / 2)
            seen.append(np.mean([any(i % 100 == 0 for i in range(s, s + spec.window)) for s in starts]))
        errors_ = np.array(errors)
        results[schedule] = {"coverage": float(np.mean(covered)), "mean_error": float(errors_.mean()),
                             "error_sd": float(errors_.std()), "median_half_width": float(np.median(halves)),
                             "windows_seeing_an_evaluation": float(np.mean(seen)), "seeds": seeds}
        print(schedule, results[schedule], flush=True)
    return {"iterations": iterations, "window": 10, "block": 200, "evaluation_every": 100,
            "evaluation_share_of_windows_expected": 10 / 100, "schedules": results}


def record(out: Path, workload: str, steps: int) -> None:
    import rlscope
    from experiments.overhead.loops import run

    with rlscope.profile(out, process=workload):
        run(workload, steps)
    print(f"trace: {out}", flush=True)


def full_shares(process: Any, warmup: int) -> dict[tuple[str, str], float]:
    """A fully traced process's share of the iteration time per (operation, resources) of its main
    thread, over the iterations after the first ``warmup``: what a sampled run estimates."""
    from rlscope.analyze.overlap import analyze_process
    from rlscope.analyze.sampled import _in_window, step_calls

    calls = step_calls(process)  # the estimates' run: from call ``warmup`` (counted from 1) to the last
    first, last = calls[min(max(warmup, 1), len(calls)) - 1], calls[-1]
    table = analyze_process(_in_window(process, int(first), int(last)))[0]
    main = table[table["thread"] == "main"]
    return {k: float(v) / (last - first) for k, v in main.groupby(["operation", "resources"])["time_ns"].sum().items()}


def check(trace: Path, seeds: int, spec_fields: dict[str, int]) -> dict[str, Any]:
    from rlscope.analyze.attribution import read_attributed
    from rlscope.analyze.sampled import analyze_sampled, step_calls
    from rlscope.collect.sampling import SampleSpec, window_starts

    results = []
    for process in read_attributed(trace):
        calls = step_calls(process)
        truth = full_shares(process, spec_fields["warmup"])
        wanted = {k: t for k, t in truth.items() if t >= MIN_SHARE}
        per_share: dict[tuple[str, str], list[tuple[float, float, float]]] = {k: [] for k in wanted}
        windows_per_run = []
        began = time.perf_counter()
        for seed in range(seeds):
            drawn = SampleSpec(**{**spec_fields, "seed": seed})
            starts = [s for s in window_starts(drawn, len(calls)) if s + drawn.window < len(calls)]
            windows = [[s + drawn.settle, int(calls[s + drawn.settle - 1]), int(calls[s + drawn.window - 1]),
                        drawn.window - drawn.settle] for s in starts]
            windows_per_run.append(len(windows))
            sampled = analyze_sampled(process, windows=windows,
                                      spec={"warmup": drawn.warmup}, find_phases=False)[2]
            for row in sampled.itertuples():
                key = (row.operation, row.resources)
                if key in per_share:
                    per_share[key].append((row.share, row.share_low, row.share_high))
        rows = []
        for (operation, resources), estimates in per_share.items():
            t = wanted[(operation, resources)]
            est = np.array(estimates)
            tolerance = max(0.005, 0.05 * t)
            rows.append({"operation": operation, "resources": resources, "full_share": t,
                         "coverage": float(np.mean((est[:, 1] <= t) & (t <= est[:, 2]))),
                         "within_tolerance": float(np.mean(np.abs(est[:, 0] - t) <= tolerance)),
                         "mean_error": float(np.mean(est[:, 0] - t)),
                         "median_half_width": float(np.median((est[:, 2] - est[:, 1]) / 2)), "runs": len(est)})
        results.append({"process": process.process, "iterations": len(calls) - 1,
                        "windows_per_run": float(np.median(windows_per_run)), "seconds": time.perf_counter() - began,
                        "shares": rows})
        for row in rows:
            print(f"{process.process} {row['operation']:>14s} {row['resources']:<12s} full {row['full_share']:.3f} "
                  f"coverage {row['coverage']:.2f} within tolerance {row['within_tolerance']:.2f} "
                  f"mean error {row['mean_error']:+.4f} half-width {row['median_half_width']:.4f}", flush=True)
    return {"trace": str(trace), "seeds": seeds, "spec": spec_fields, "min_share": MIN_SHARE, "processes": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    syn = commands.add_parser("synthetic", help="the estimator on made-up runs, several ways of placing windows")
    syn.add_argument("--seeds", type=int, default=200)
    syn.add_argument("--iterations", type=int, default=40_000, help="each made-up run's length")
    syn.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    rec = commands.add_parser("record", help="profile an overhead workload, everything on, the whole run")
    rec.add_argument("trace", type=Path)
    rec.add_argument("--workload", default="gym_numpy")
    rec.add_argument("--steps", type=int, default=40_000)
    chk = commands.add_parser("check", help="sample a full trace after the fact, once per seed")
    chk.add_argument("trace", type=Path)
    chk.add_argument("--seeds", type=int, default=100)
    for name, default in (("window", 10), ("block", 200), ("warmup", 50), ("settle", 2)):
        chk.add_argument(f"--{name}", type=int, default=default)
    chk.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = parser.parse_args()
    if args.command == "record":
        record(args.trace, args.workload, args.steps)
        return
    if args.command == "synthetic":
        result = synthetic(args.seeds, args.iterations)
        if args.out is not None:
            args.out.write_text(json.dumps(result, indent=1) + "\n")
        return
    fields = {name: getattr(args, name) for name in ("window", "block", "warmup", "settle")}
    result = check(args.trace, args.seeds, fields)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
