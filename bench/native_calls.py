"""The native calls rlscope sees in one iteration of XLA data collection at K = 1 (Fig. 5's loop).

    PYTHONPATH=CHECKOUT python bench/native_calls.py [--num-envs N] [--iterations I] >> RECORD.jsonl

Profiles ``experiments.datacollection.profiled`` (JAX backend, K = 1, on the CPU) with the
rlscope of CHECKOUT (its native collector built in place), and prints one JSON line: the
checkout's commit, the Python version, and, for the middle iteration, each Python->native call
with the layer it was charged to and its duration. Run against two checkouts, it shows what a
change to the collector changed in what Fig. 5 charges to Python and to the backend (the
datacollection page's "Fig. 5 changed between two runs" quotes such a pair). Python >= 3.12:
3.11 does not report calls into jaxlib at all.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=65536)
    parser.add_argument("--iterations", type=int, default=30)
    args = parser.parse_args(argv)

    import rlscope
    from rlscope.collect.launch import run_profiled
    from rlscope.trace.reader import read_trace
    from rlscope.trace.schema import Category, Kind

    checkout = Path(rlscope.__file__).resolve().parents[1]
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    command = [sys.executable, "-m", "experiments.datacollection.profiled", "jax", str(args.num_envs), "1",
               str(args.iterations), "cpu"]
    with tempfile.TemporaryDirectory(prefix="rlscope-native-calls-") as tmp:
        trace, code = run_profiled(command, Path(tmp) / "trace", gpu=False, stdout=subprocess.DEVNULL, timeout_s=600)
        if code != 0:
            print(f"error: the profiled loop exited {code}", file=sys.stderr)
            return 1
        (process,) = [p for p in read_trace(trace) if (p.events["kind"] == int(Kind.STEP)).any()]
    events = process.events
    steps = events[events["kind"] == int(Kind.STEP)].sort_values("start_ns")
    step = steps.iloc[len(steps) // 2]
    calls = events[(events["kind"] == int(Kind.CPU_CALL)) & (events["start_ns"] >= step["start_ns"])
                   & (events["end_ns"] <= step["end_ns"])].sort_values("start_ns")
    print(json.dumps({
        "commit": commit, "python": ".".join(map(str, sys.version_info[:3])), "num_envs": args.num_envs,
        "iterations": args.iterations,
        "step_ns": int(step["end_ns"] - step["start_ns"]),
        "calls": [{"name": str(c["name"]), "layer": Category(int(c["category"])).name.lower(),
                   "ns": int(c["end_ns"] - c["start_ns"])} for _, c in calls.iterrows()],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
