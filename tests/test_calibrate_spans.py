"""What calibration reads from traces: start-ups, iterations, trace writes."""

from __future__ import annotations

import sys

import pytest



def test_start_up_runs_end_at_their_first_step(tmp_path):
    from rlscope.calibrate.spans import iterating_process, profiled_startup
    from rlscope.collect.launch import run_profiled
    from rlscope.analyze.attribution import read_attributed

    # the first step inside an open operation, as SB3's loop runs inside "learn"
    script = ("import time, rlscope\ntime.sleep(0.05)\nwith rlscope.operation('loop'):\n"
              "    rlscope.step()\n    print('past the first step')\n")
    for name, wall_only in (("uninstrumented", True), ("profiled", False)):
        log = tmp_path / f"{name}.txt"
        with log.open("w") as out:
            _, code = run_profiled([sys.executable, "-c", script], tmp_path / name, wall_only=wall_only,
                                   gpu=False, until_first_step=True, stdout=out)
        assert code == 0 and "past the first step" not in log.read_text() and "Error" not in log.read_text()
        (process,) = read_attributed(tmp_path / name)
        assert process.meta["complete"]
        if wall_only:
            assert process.meta["first_step_ns"] >= process.meta["start_ns"] + 50_000_000
        else:
            startup = profiled_startup(iterating_process([process]))
            assert startup["raw_ns"] >= 50_000_000 and startup["events"]["annotation"] == 0


def test_trace_iteration_leaves_out_trace_writes_and_the_last_span():
    from rlscope.calibrate.spans import trace_iteration
    from rlscope.trace.schema import Kind
    from tests.synthetic import CALL, MAIN, OP, STEP, make_trace

    ms = 1_000_000
    rows = []
    for i in range(100):  # 1 ms iterations, each an operation with two intercepted calls
        t = i * ms
        rows += [(STEP, t, t + ms, "default"), (OP, t + 10, t + 500, "step"),
                 (CALL, t + 20, t + 30, "a", 1), (CALL, t + 40, t + 50, "b", 1)]
    rows += [(STEP, 100 * ms, 150 * ms, "default")]  # the last: ends with profiling
    rows += [(Kind.PROFILER_WRITE, t, t + 100_000, "rlscope: trace write") for t in range(5 * ms, 100 * ms, 10 * ms)]
    rows += [(Kind.PROFILER_WRITE, 3 * ms, 8 * ms, "rlscope: trace write", 0, 0, MAIN + 1)]  # another thread's
    trace = make_trace(rows, end=150 * ms)
    iteration_ns, events = trace_iteration([trace], span_ns=10 * ms)
    assert iteration_ns == pytest.approx((10 * ms - 100_000) / 10)  # 10 iterations per span, less its write
    assert events == pytest.approx(3.0)
    assert trace_iteration([make_trace([(STEP, 0, 10, "default")])]) is None


def test_uninstrumented_run_remembers_only_its_first_step(tmp_path):
    from rlscope.calibrate.spans import first_step_ns
    from rlscope.collect.launch import run_profiled
    from rlscope.analyze.attribution import read_attributed

    script = "import time, rlscope\ntime.sleep(0.05)\nfor _ in range(3): rlscope.step()\n"
    _, code = run_profiled([sys.executable, "-c", script], tmp_path, wall_only=True)
    assert code == 0
    (process,) = read_attributed(tmp_path)
    first = first_step_ns(process)
    assert process.meta["start_ns"] + 50_000_000 <= first <= process.meta["end_ns"]
