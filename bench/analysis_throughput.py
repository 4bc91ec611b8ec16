"""Analysis throughput: events analysed per second on synthetic traces of 1M and 10M events.

    python bench/analysis_throughput.py [--events 1000000 10000000] [--repeat 3] [--json PATH]

Prints, per size, the best of ``--repeat`` runs of read + breakdown + transitions, and of the
sweep alone (both tables, from one sweep, on an already-read trace). ``--json`` also writes every
run's seconds (``bench/run_record.py``'s record), from which ``bench/tables_profiler.py`` makes
the results table.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run_record import write  # noqa: E402
from synthetic_trace import write_synthetic  # noqa: E402

from rlscope.analyze.overlap import analyze_process  # noqa: E402
from rlscope.analyze.attribution import read_attributed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write every run's seconds here")
    args = parser.parse_args()
    sizes = []
    print(f"python {platform.python_version()} on {platform.machine()}, {platform.processor() or 'cpu'}")
    print(f"{'events':>12} {'read+analyze s':>15} {'events/s':>12} {'analyze-only s':>15} {'events/s':>12}")
    for n in args.events:
        with tempfile.TemporaryDirectory() as tmp:
            write_synthetic(Path(tmp), n)
            full, sweep = [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                (proc,) = read_attributed(tmp)
                t1 = time.perf_counter()
                analyze_process(proc)
                t2 = time.perf_counter()
                full.append(t2 - t0)
                sweep.append(t2 - t1)
            events = len(proc.events)
            print(f"{events:>12,} {min(full):>15.2f} {events / min(full):>12,.0f} {min(sweep):>15.2f} "
                  f"{events / min(sweep):>12,.0f}", flush=True)
            sizes.append({"events": events, "read_analyze_s": full, "analyze_s": sweep})
    if args.json:
        write(args.json, {"benchmark": "analysis_throughput", "repeat": args.repeat, "sizes": sizes})


if __name__ == "__main__":
    main()
