"""How fast each framework trains the same algorithm, without any profiler: the speed comparison
behind the framework case study (RL-Scope Fig. 4's "eager is 1.9-4.8x slower than graph").

    python bench/framework_speed.py --device cuda --rounds 3 --out framework_speed.csv

Each round trains every (algorithm, framework) once with ``experiments.casestudies.sb3_train``
(the manifest's script, so warm-up and hyperparameters are the manifest's), in an order rotated
from round to round, and reads ``model.learn``'s wall time from its output. Prints per point the
median and range over rounds, and per algorithm each framework's speed-up over SB3 eager: the
ratio of medians and the range of the per-round ratios.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from experiments.casestudies.frameworks import FRAMEWORKS  # noqa: E402
from experiments.casestudies.sb3_train import LEARN_PREFIX  # noqa: E402


def learn_seconds(algorithm: str, framework: str, args: argparse.Namespace) -> float:
    command = [sys.executable, "-m", "experiments.casestudies.sb3_train", algorithm, args.env, str(args.timesteps),
               args.device, "--learning-starts", str(args.learning_starts), "--framework", framework]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith(LEARN_PREFIX)]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(command)} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return float(lines[-1][len(LEARN_PREFIX):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithms", nargs="+", default=["td3", "ddpg"])
    parser.add_argument("--frameworks", nargs="+", default=list(FRAMEWORKS), choices=list(FRAMEWORKS))
    parser.add_argument("--env", default="Walker2d-v5")
    parser.add_argument("--timesteps", type=int, default=3000)
    parser.add_argument("--learning-starts", type=int, default=1000)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="CSV of every round's times")
    args = parser.parse_args()
    points = [(a, f) for a in args.algorithms for f in args.frameworks]
    rows = []
    for round_ in range(args.rounds):
        shift = round_ % len(points)
        for algorithm, framework in points[shift:] + points[:shift]:
            started = time.time()
            seconds = learn_seconds(algorithm, framework, args)
            rows.append({"round": round_, "algorithm": algorithm, "framework": framework, "learn_s": seconds})
            print(f"round {round_}: {algorithm} {framework}: learn {seconds:.2f} s "
                  f"(process {time.time() - started:.0f} s)", flush=True)
    frame = pd.DataFrame(rows)
    if args.out:
        frame.to_csv(args.out, index=False)
    print(f"\n# model.learn seconds ({args.timesteps} steps, {args.learning_starts} random first; {args.device}; "
          f"{args.rounds} rounds): median [min, max]")
    stats = frame.groupby(["algorithm", "framework"])["learn_s"].agg(["median", "min", "max"])
    for (algorithm, framework), s in stats.iterrows():
        print(f"{algorithm:5s} {framework:12s} {s['median']:7.2f} [{s['min']:.2f}, {s['max']:.2f}]")
    print("\n# speed-up over sb3 (eager): ratio of medians [range of per-round ratios]")
    wide = frame.pivot_table(index=["algorithm", "round"], columns="framework", values="learn_s")
    for algorithm, table in wide.groupby(level=0):
        for framework in args.frameworks:
            if framework == "sb3" or "sb3" not in table:
                continue
            ratios = table["sb3"] / table[framework]
            median = table["sb3"].median() / table[framework].median()
            print(f"{algorithm:5s} {framework:12s} {median:5.2f}x [{ratios.min():.2f}, {ratios.max():.2f}]")


if __name__ == "__main__":
    main()
