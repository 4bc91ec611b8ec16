"""Events lost when a profiled process is killed without warning (SIGKILL): with the time-bound
writes off (RLSCOPE_FLUSH_INTERVAL_S=inf: written in chunks of 65,536 events only) and on (the
default, every second).

The workload is a slow loop: rlscope.step(), an operation around a numpy call, 10 ms of sleep;
after each step() it writes how many iterations it has recorded and when to a file, line by
line. Each run is SIGKILLed at a random moment (seeded; the same moments for both settings),
and its trace is read back: lost steps = recorded - kept, lost seconds = the time of the last
recorded step - the end of the last step kept (or the session's start when none is), lost
events = lost steps x the workload's events per iteration (measured on a run that finishes).

    python bench/kill_loss.py [--kills 20] [--seed 0] [--out docs/results/reliability_kill.json]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
STEP_S = 0.01
SETTINGS = {"off": "inf", "on": "1"}  # RLSCOPE_FLUSH_INTERVAL_S


def workload(trace_dir: str, steps_file: str, iterations: int) -> None:
    """The profiled slow loop (in the child process); ``iterations`` 0: until killed."""
    import numpy as np

    import rlscope

    out = open(steps_file, "w", buffering=1)
    a = np.ones(16)
    with rlscope.profile(trace_dir, process="loop", gpu=False):
        recorded = 0
        while not iterations or recorded < iterations:
            rlscope.step()  # ends the iteration before: its events are all recorded now
            out.write(f"{recorded} {time.perf_counter_ns()}\n")
            recorded += 1
            with rlscope.operation("work"):
                a.sum()
            time.sleep(STEP_S)


def _child(trace_dir: Path, steps_file: Path, interval: str, iterations: int = 0) -> subprocess.Popen:
    env = {**os.environ, "RLSCOPE_FLUSH_INTERVAL_S": interval}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))
    return subprocess.Popen([sys.executable, __file__, "--workload", str(trace_dir), str(steps_file),
                             str(iterations)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _read(trace_dir: Path) -> Any:
    from rlscope.trace import read_trace

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a killed process's trace warns that it did not finish
        (trace,) = read_trace(trace_dir)
    return trace


def events_per_iteration(work: Path) -> float:
    """The workload's events (steps, operations, calls into numpy) per iteration, on a run of
    200 iterations that finishes."""
    from rlscope.trace import Kind

    child = _child(work / "reference", work / "reference.txt", "1", iterations=200)
    child.wait()
    events = _read(work / "reference").events
    steps = (events["kind"] == int(Kind.STEP)).sum()
    counted = events["kind"].isin([int(Kind.STEP), int(Kind.OPERATION), int(Kind.CPU_CALL)]).sum()
    return float(counted / steps)


def kill_once(work: Path, interval: str, after_s: float, per_iteration: float) -> dict[str, Any]:
    from rlscope.trace import Kind

    trace_dir, steps_file = work / "trace", work / "steps.txt"
    shutil.rmtree(trace_dir, ignore_errors=True)
    steps_file.unlink(missing_ok=True)
    child = _child(trace_dir, steps_file, interval)
    try:
        while not (steps_file.exists() and steps_file.stat().st_size):
            if child.poll() is not None:
                raise RuntimeError(f"the workload ended with status {child.returncode} before its first step")
            time.sleep(0.01)
        time.sleep(after_s)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    *_, recorded, last_ns = steps_file.read_text().split()
    trace = _read(trace_dir)
    steps = trace.events[trace.events["kind"] == int(Kind.STEP)]
    kept_until = int(steps["end_ns"].max()) if len(steps) else int(trace.meta["start_ns"])
    lost_steps = int(recorded) - len(steps)
    return {"kill_after_s": round(after_s, 3), "recorded_steps": int(recorded), "kept_steps": len(steps),
            "lost_steps": lost_steps, "lost_events": round(lost_steps * per_iteration),
            "lost_s": round((int(last_ns) - kept_until) / 1e9, 3)}


def _summary(kills: list[dict[str, Any]]) -> dict[str, Any]:
    lost_s = [k["lost_s"] for k in kills]
    lost_events = [k["lost_events"] for k in kills]
    return {"median_lost_s": round(statistics.median(lost_s), 3), "max_lost_s": max(lost_s),
            "median_lost_events": statistics.median(lost_events), "max_lost_events": max(lost_events)}


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{platform.node()}: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="runs killed per setting")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--earliest", type=float, default=1.0, help="seconds after the first step")
    parser.add_argument("--latest", type=float, default=6.0, help="seconds after the first step")
    parser.add_argument("--out", type=Path, default=REPO / "docs/results/reliability_kill.json")
    parser.add_argument("--workload", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.workload:
        workload(args.workload[0], args.workload[1], int(args.workload[2]))
        return
    sys.path.insert(0, str(REPO))
    from rlscope.files import write_json_atomic

    rng = random.Random(args.seed)
    moments = [rng.uniform(args.earliest, args.latest) for _ in range(args.kills)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=REPO).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "rlscope", "csrc", "bench/kill_loss.py"],
                           capture_output=True, text=True, cwd=REPO).stdout.strip()
    result: dict[str, Any] = {
        "subject": "events lost when a profiled process is SIGKILLed, time-bound trace writes off and on",
        "command": " ".join(["python", "bench/kill_loss.py", *sys.argv[1:]]),
        "machine": _machine(),
        "load_average_1_5_15_min_at_start": [round(x, 2) for x in os.getloadavg()],  # other work on the machine
        "date": datetime.date.today().isoformat(),
        "commit": commit + (" (with uncommitted changes)" if dirty else ""),
        "workload": f"rlscope.step(), an operation around ndarray.sum(), {STEP_S * 1000:.0f} ms of sleep, "
                    f"per iteration; killed at uniform random moments {args.earliest}-{args.latest} s after "
                    f"the first step (seed {args.seed}), the same moments for both settings",
        "lost_events_is": "lost steps x the workload's events per iteration (steps, operations, calls into "
                          "numpy), measured on a run of 200 iterations that finishes",
    }
    with tempfile.TemporaryDirectory(prefix="rlscope-kill-") as tmp:
        work = Path(tmp)
        per_iteration = events_per_iteration(work)
        result["events_per_iteration"] = round(per_iteration, 3)
        result["settings"] = {}
        for name, interval in SETTINGS.items():
            kills = []
            for i, after_s in enumerate(moments):
                kills.append(kill_once(work, interval, after_s, per_iteration))
                print(f"{name} ({interval} s) kill {i + 1}/{len(moments)}: {kills[-1]}", flush=True)
            result["settings"][name] = {"RLSCOPE_FLUSH_INTERVAL_S": interval, **_summary(kills), "kills": kills}
    for name, setting in result["settings"].items():
        print(f"{name}: lost median {setting['median_lost_s']} s / {setting['median_lost_events']} events, "
              f"max {setting['max_lost_s']} s / {setting['max_lost_events']} events")
    write_json_atomic(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
