"""Profiling overhead on a CPU RL loop: uninstrumented vs annotations vs annotations + transitions
(and "hook": the interpreter's call hook installed with nothing recorded, the floor of interception).

    python bench/profiling_overhead.py [--steps 20000] [--rounds 5] [--json PATH]

Each mode runs in a fresh interpreter; modes are interleaved round by round so drift hits all
of them alike. Prints the median and the minimum loop time per mode with their ratios to the
uninstrumented loop (the minimum is the least disturbed by other load on the machine), plus the
time to close the trace at the end. ``--json`` also writes every round's times
(``bench/run_record.py``'s record), from which ``bench/tables_profiler.py`` makes the results table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run_record import write  # noqa: E402

MODES = ("off", "hook", "annotations", "transitions")
HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--json", type=Path, help="also write every round's times here")
    args = parser.parse_args()
    versions = json.loads(subprocess.run([args.python, "-c", _VERSIONS], capture_output=True, text=True,
                                         check=True).stdout)
    version = versions["python"]
    print(f"python {version}, {platform.machine()}, {args.steps} steps, {args.rounds} rounds", flush=True)
    results: dict[str, list[float]] = {m: [] for m in MODES}
    stops: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in MODES:
            with tempfile.TemporaryDirectory() as tmp:
                out = subprocess.run([args.python, str(HERE / "rl_loop.py"), mode, str(args.steps), tmp],
                                     capture_output=True, text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            results[mode].append(row["loop_s"])
            stops[mode].append(row["stop_s"])
        print(f"round {r + 1}: " + "  ".join(f"{m} {results[m][-1]:.3f}s" for m in MODES), flush=True)
    base_med = statistics.median(results["off"])
    base_min = min(results["off"])
    print(f"{'mode':<13} {'median s':>9} {'ratio':>6} {'min s':>7} {'ratio':>6} {'us/step':>8} {'close trace s':>14}")
    for mode in MODES:
        med, low = statistics.median(results[mode]), min(results[mode])
        print(f"{mode:<13} {med:>9.3f} {med / base_med:>6.2f} {low:>7.3f} {low / base_min:>6.2f} "
              f"{1e6 * med / args.steps:>8.1f} {statistics.median(stops[mode]):>14.3f}")
    if args.json:
        write(args.json, {"benchmark": "profiling_overhead", "steps": args.steps, "rounds": args.rounds,
                          "loop": versions, "loop_s": results, "stop_s": stops})


# What the loop's interpreter runs: its Python and the versions of what the loop imports.
_VERSIONS = """import json, platform, sys
from importlib.metadata import version
print(json.dumps({"python": platform.python_version(), "profile_hook": "sys.monitoring" if sys.version_info >= (3, 12)
                  else "sys.setprofile", **{p: version(p) for p in ("torch", "gymnasium", "numpy")}}))
"""


if __name__ == "__main__":
    main()
