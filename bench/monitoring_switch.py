"""What switching sys.monitoring's events off and on costs the code that runs next (Python 3.12+).

Calibration's windows take the transition collector's hooks out (``set_events(tool,
NO_EVENTS)``) and put them back at every switch between the annotations and transitions
levels. Each change of a tool's global events makes CPython re-instrument every code object the
next time it runs, and putting CALL back re-arms the call sites that the collector had disabled
with ``DISABLE``, so each fires once more. Both costs land in the window after the switch. This
times a stdlib-heavy function (json, re, statistics: a few hundred code objects' worth of
calls) steadily hooked, on its first and second run after the hooks go out, and on its first
and second run after they come back:

    python3.12 bench/monitoring_switch.py ROUNDS

Prints the median µs per run of each. The collector's callbacks here do what it does at a
call site that is not a target: disable it.
"""

from __future__ import annotations

import collections
import json
import re
import statistics
import sys
import time
from typing import Any

TOOL = 3  # a free tool id (0-2 are debugger, coverage, profiler)
DATA = {"a": [1, 2, 3], "b": {"c": "x" * 10}}
PATTERN = re.compile(r"(\w+)=(\d+)")


def work() -> None:
    for _ in range(20):
        json.loads(json.dumps(DATA))
        PATTERN.findall("a=1 b=2 c=3")
        collections.OrderedDict(a=1)
        statistics.mean([1, 2, 3])


def timed_us() -> float:
    t0 = time.perf_counter_ns()
    work()
    return (time.perf_counter_ns() - t0) / 1000


def main() -> None:
    if not hasattr(sys, "monitoring"):
        raise SystemExit("monitoring_switch: needs Python 3.12 or newer (sys.monitoring)")
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    monitoring = sys.monitoring
    events = monitoring.events
    monitoring.use_tool_id(TOOL, "rlscope-bench")

    def on_call(code: Any, offset: int, callee: Any, arg0: Any) -> Any:
        return monitoring.DISABLE

    def on_return(code: Any, offset: int, callee: Any, arg0: Any) -> None:
        return None  # C_RETURN cannot be disabled; it stops with the call site's CALL

    monitoring.register_callback(TOOL, events.CALL, on_call)
    monitoring.register_callback(TOOL, events.C_RETURN, on_return)
    monitoring.register_callback(TOOL, events.C_RAISE, on_return)
    hooked = events.CALL | events.C_RETURN | events.C_RAISE
    monitoring.set_events(TOOL, hooked)
    for _ in range(200):  # every call site seen and disabled
        work()
    times: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(rounds):
        times["hooked, steady"].append(timed_us())
        monitoring.set_events(TOOL, events.NO_EVENTS)
        times["first run after hooks out"].append(timed_us())
        times["second run after hooks out"].append(timed_us())
        monitoring.set_events(TOOL, hooked)
        times["first run after hooks back"].append(timed_us())
        times["second run after hooks back"].append(timed_us())
    print(f"Python {sys.version.split()[0]}, {rounds} rounds, median µs per run:")
    for name, values in times.items():
        print(f"  {name:>28}: {statistics.median(values):8.1f}")


if __name__ == "__main__":
    main()
