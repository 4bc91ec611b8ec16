"""Does a profiled run's iteration time grow as the run goes on, and on which thread is it spent?

Calibration's windows (switched every iteration or two) and a process profiled from start to
end can pay different amounts per iteration. If the whole run's excess grew with its length (a
buffer or table that fills), a calibration at one length would not carry over to another. This
runs one overhead workload whole, uninstrumented (``U``), profiled (``P``: ``rlscope prof``) and
profiled without GPU tracing (``N``: ``--no-gpu``), in the order given, and prints per run the
median iteration time in each quarter of the run and the CPU time of its busiest threads:

    python bench/iteration_series.py OUT sb3_ppo_cuda 500000 UPUPN

Each run's iteration start times, thread CPU times (from ``/proc``), involuntary context
switches and peak RSS are kept in ``OUT/<k><mode>.json``. Iterations are timed at every
``rlscope.step()`` by wrapping it, the same in every mode.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

MODES = {"U": [], "P": ["rlscope", "prof", "--no-analyze"], "N": ["rlscope", "prof", "--no-analyze", "--no-gpu"]}


def child(workload: str, steps: int, out: Path) -> None:
    """Run the workload with every rlscope.step() timed; write the series at exit."""
    import rlscope
    from experiments.overhead import loops

    stamps: list[int] = []
    step = rlscope.step

    def timed_step() -> None:
        stamps.append(time.perf_counter_ns())
        step()

    def dump() -> None:
        ticks = os.sysconf("SC_CLK_TCK")
        threads = {}
        for tid in os.listdir("/proc/self/task"):
            try:
                name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
                fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # the thread ended meanwhile
                continue
            threads[f"{tid}:{name}"] = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
        usage = resource.getrusage(resource.RUSAGE_SELF)
        out.write_text(json.dumps({"stamps": stamps, "threads": threads, "involuntary_switches": usage.ru_nivcsw,
                                   "max_rss_mb": usage.ru_maxrss / 1024}))

    rlscope.step = timed_step
    atexit.register(dump)  # after the run, before rlscope's own exit handlers have ended the session
    loops.run(workload, steps)


def summary(path: Path) -> str:
    data = json.loads(path.read_text())
    iterations = np.diff(np.asarray(data["stamps"], dtype=np.int64))[1:] / 1e6  # the first holds warm-up
    quarters = " ".join(f"{np.median(q):.1f}" for q in np.array_split(iterations, 4))
    busiest = sorted(data["threads"].items(), key=lambda kv: -kv[1])[:3]
    return (f"{path.stem}: {len(iterations)} iterations, {iterations.sum() / 1e3:.1f} s; median ms per quarter "
            f"{quarters}; CPU s {', '.join(f'{k} {v:.1f}' for k, v in busiest)}; "
            f"involuntary switches {data['involuntary_switches']}, peak RSS {data['max_rss_mb']:.0f} MB")


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
        return
    if len(sys.argv) != 5 or set(sys.argv[4]) - set(MODES):
        raise SystemExit(f"usage: python {sys.argv[0]} OUT WORKLOAD STEPS MODES (letters of {''.join(MODES)})")
    out, workload, steps, modes = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    out.mkdir(parents=True, exist_ok=True)
    for k, mode in enumerate(modes, 1):
        result = out / f"{k}{mode}.json"
        prefix = MODES[mode] + (["--output", str(out / f"trace{k}"), "--"] if MODES[mode] else [])
        started = time.monotonic()
        path = os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])  # experiments/ from the root
        subprocess.run(prefix + [sys.executable, __file__, "--child", workload, steps, str(result)], check=True,
                       env={**os.environ, "PYTHONPATH": path})
        print(f"run {k} ({mode}) took {time.monotonic() - started:.0f} s; " + summary(result), flush=True)


if __name__ == "__main__":
    main()
