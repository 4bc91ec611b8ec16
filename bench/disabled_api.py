"""Cost of rlscope annotations when profiling is off: ns per operation() enter/exit.

    python bench/disabled_api.py [--json PATH]

``--json`` also writes every repeat's seconds (``bench/run_record.py``'s record), from which
``bench/tables_profiler.py`` makes the results table.
"""

from __future__ import annotations

import argparse
import platform
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rlscope  # noqa: E402
from run_record import write  # noqa: E402

N = 2_000_000
REPEAT = 5
STATEMENTS = {"base": "pass", "operation": "with rlscope.operation('inference'): pass", "reused": "with op: pass",
              "step": "rlscope.step()"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write each repeat's seconds here")
    args = parser.parse_args()
    assert not rlscope.enabled()
    env = {"rlscope": rlscope, "op": rlscope.operation("inference")}
    seconds = {name: timeit.repeat(stmt, number=N, repeat=REPEAT, globals=env) for name, stmt in STATEMENTS.items()}
    ns = {name: 1e9 * (min(s) - min(seconds["base"])) / N for name, s in seconds.items() if name != "base"}
    print(f"python {platform.python_version()}, {N:,} iterations, best of {REPEAT}")
    print(f"with rlscope.operation(name): {ns['operation']:6.1f} ns per enter/exit")
    print(f"with op (object reused):      {ns['reused']:6.1f} ns per enter/exit")
    print(f"rlscope.step():               {ns['step']:6.1f} ns per call")
    if args.json:
        write(args.json, {"benchmark": "disabled_api", "iterations": N, "statements": STATEMENTS,
                          "seconds": seconds})


if __name__ == "__main__":
    main()
