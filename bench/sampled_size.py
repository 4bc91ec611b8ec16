"""What a sampled session costs a loop and writes, against full tracing and no profiling.

    python bench/sampled_size.py [--workload gym_numpy] [--steps 100000] [--rounds 3] \\
        [--sample window=20,block=1000,warmup=50] [--out size.json]

One process per mode and round (``off``: unprofiled; ``full``: every layer the whole run;
``sampled``: ``rlscope.profile(sample=...)``), modes rotated each round. Per process: the loop's
wall time, the trace's bytes (all files) and the process's peak resident memory. The summary
gives per mode the median over rounds, the wall time over the unprofiled loop's (per round, then
the median), bytes per iteration, and bytes per hour of this loop. CPU layers only where no GPU
is visible.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODES = ("off", "full", "sampled")


def one(workload: str, steps: int, mode: str, sample: str, trace: Path) -> dict[str, Any]:
    """Run the loop once in this process; print one JSON line."""
    sys.path.insert(0, str(ROOT))
    import rlscope
    from experiments.overhead.loops import run

    options = {"sample": sample} if mode == "sampled" else {}
    began = time.perf_counter()
    if mode == "off":
        run(workload, steps)
    else:
        with rlscope.profile(trace, process=workload, **options):
            run(workload, steps)
    wall = time.perf_counter() - began
    size = sum(p.stat().st_size for p in trace.rglob("*") if p.is_file()) if trace.exists() else 0
    return {"mode": mode, "wall_s": wall, "trace_bytes": size,
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def compare(workload: str, steps: int, rounds: int, sample: str) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as work:
        for round_ in range(rounds):
            shift = round_ % len(MODES)
            for mode in MODES[shift:] + MODES[:shift]:
                trace = Path(work) / f"{mode}{round_}"
                command = [sys.executable, __file__, "one", workload, str(steps), mode, sample, str(trace)]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                run = json.loads(done.stdout.strip().splitlines()[-1]) | {"round": round_}
                runs.append(run)
                print(f"round {round_} {mode:8s} {run['wall_s']:.2f} s {run['trace_bytes'] / 1e6:.1f} MB "
                      f"rss {run['max_rss_mb']:.0f} MB", flush=True)
    summary = {}
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        ratios = [r["wall_s"] / next(o["wall_s"] for o in runs if o["mode"] == "off" and o["round"] == r["round"])
                  for r in mine]
        wall = statistics.median(r["wall_s"] for r in mine)
        size = statistics.median(r["trace_bytes"] for r in mine)
        summary[mode] = {"wall_s": wall, "over_off": statistics.median(ratios),
                         "over_off_range": [min(ratios), max(ratios)], "trace_bytes": size,
                         "bytes_per_iteration": size / steps, "mb_per_hour": size / wall * 3600 / 1e6,
                         "max_rss_mb": statistics.median(r["max_rss_mb"] for r in mine)}
    return {"workload": workload, "steps": steps, "rounds": rounds, "sample": sample, "runs": runs, "summary": summary}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        _, _, workload, steps, mode, sample, trace = sys.argv
        print(json.dumps(one(workload, int(steps), mode, sample, Path(trace))), flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="gym_numpy")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sample", default="window=20,block=1000,warmup=50")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = compare(args.workload, args.steps, args.rounds, args.sample)
    for mode, row in result["summary"].items():
        print(f"{mode:8s} {row['over_off']:.2f}x {row['bytes_per_iteration']:.1f} B/iteration "
              f"{row['mb_per_hour']:.0f} MB/h rss {row['max_rss_mb']:.0f} MB", flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
