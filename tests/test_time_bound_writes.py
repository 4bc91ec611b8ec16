"""Time-bound writes: a process killed without warning leaves its events up to about a second
before; writes from two threads lose no row; the flusher thread's own calls are not recorded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import rlscope
from rlscope.collect.flusher import ENV_FLUSH_INTERVAL
from rlscope.collect.python import TransitionCollector
from rlscope.errors import RlscopeError
from rlscope.trace import Kind, TraceWarning, TraceWriter, read_process, read_trace

SLOW_LOOP = textwrap.dedent("""
    import sys, time
    import numpy as np
    import rlscope

    steps = open(sys.argv[2], "w", buffering=1)  # each line on its way before the next step
    a = np.ones(16)
    with rlscope.profile(sys.argv[1], process="loop", gpu=False):
        recorded = 0
        while True:
            rlscope.step()  # ends the iteration before: its STEP row is recorded now
            steps.write(f"{recorded} {time.perf_counter_ns()}\\n")
            recorded += 1
            with rlscope.operation("work"):
                a.sum()
            time.sleep(0.01)
""")


def kill_slow_loop(tmp_path: Path, env: dict[str, str], ready: Callable[[Path, int], bool]) -> tuple[int, Path]:
    """Run the slow loop and SIGKILL it once ``ready(trace file, steps recorded)``: (steps it had
    recorded, the process's trace directory). Waits on what happened, never on how long it took
    (the deadline only catches a hang)."""
    script, steps = tmp_path / "loop.py", tmp_path / "steps.txt"
    script.write_text(SLOW_LOOP)
    child = subprocess.Popen([sys.executable, str(script), str(tmp_path / "trace"), str(steps)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert child.poll() is None, "the slow loop ended by itself"
            assert time.monotonic() < deadline, "the slow loop never got there"
            recorded = len(steps.read_text().splitlines()) if steps.exists() else 0
            events = next((tmp_path / "trace").glob("*/events.arrows"), None)
            if recorded and events is not None and ready(events, recorded):
                break
            time.sleep(0.02)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    (directory,) = (tmp_path / "trace").iterdir()
    return len(steps.read_text().splitlines()), directory


def test_a_killed_process_keeps_what_its_time_bound_writes_wrote(tmp_path: Path, cli_env) -> None:
    env = {k: v for k, v in cli_env.items() if k != ENV_FLUSH_INTERVAL}
    empty = 0

    def written_after_first_step(events: Path, recorded: int) -> bool:
        nonlocal empty
        empty = empty or events.stat().st_size  # the stream's header, written at the start
        return events.stat().st_size > empty  # a time-bound write, long before a chunk is full

    recorded, directory = kill_slow_loop(tmp_path, env, written_after_first_step)
    with pytest.warns(TraceWarning, match="did not finish profiling"):
        trace = read_process(directory)
    steps = trace.events[trace.events["kind"] == int(Kind.STEP)]
    assert 0 < len(steps) <= recorded and steps["end_ns"].tolist() == sorted(steps["end_ns"])
    operations = trace.events[trace.events["kind"] == int(Kind.OPERATION)]
    assert len(operations) >= len(steps)  # each kept iteration's operation came before its step's end


def test_without_the_time_bound_a_killed_slow_process_keeps_nothing(tmp_path: Path, cli_env) -> None:
    env = {**cli_env, ENV_FLUSH_INTERVAL: "inf"}
    recorded, directory = kill_slow_loop(tmp_path, env, lambda events, recorded: recorded >= 100)
    with pytest.warns(TraceWarning, match="did not finish profiling"):
        trace = read_process(directory)
    assert recorded >= 100 and (trace.events["kind"] == int(Kind.STEP)).sum() == 0  # all in an unfilled chunk


def test_rows_appended_while_another_thread_writes_are_each_written_once(tmp_path: Path) -> None:
    (tmp_path / "p.1").mkdir()
    writer = TraceWriter(tmp_path / "p.1" / "events.arrows", chunk_events=1 << 30)  # writes when asked only
    name = writer.symbol("op")
    n, blocks = 100_000, 300
    appended = threading.Event()

    def append_rows() -> None:
        for i in range(n):
            writer.rows.append((int(Kind.OPERATION), 0, 1, 0, i, i + 1, name, 0, -1))
        appended.set()

    def append_blocks() -> None:
        for j in range(blocks):
            writer.append_block(np.array([[int(Kind.OPERATION), 0, 2, 0, j, j + 1, name, 0, -1]], dtype=np.int64))
            time.sleep(0)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads take turns often: inside writes too
    try:
        threads = [threading.Thread(target=append_rows), threading.Thread(target=append_blocks)]
        for thread in threads:
            thread.start()
        writes = 0
        while not appended.is_set() or threads[1].is_alive():
            writer.flush()
            writes += 1
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    writer.close()
    (tmp_path / "p.1" / "meta.json").write_text('{"schema_version": 2, "process": "p", "pid": 1, "start_ns": 0, '
                                                '"complete": true}')
    ops = read_process(tmp_path / "p.1").events.query(f"kind == {int(Kind.OPERATION)}")
    assert sorted(ops.loc[ops["tid"] == 1, "start_ns"]) == list(range(n))
    assert sorted(ops.loc[ops["tid"] == 2, "start_ns"]) == list(range(blocks))


@pytest.mark.parametrize("native", [True, False])
def test_an_ignored_threads_calls_are_not_recorded_while_the_others_are(tmp_path: Path, native: bool) -> None:
    """The session's flusher writes (numpy, pyarrow) while the workload's threads are recorded."""
    (tmp_path / "p.1").mkdir()
    writer = TraceWriter(tmp_path / "p.1" / "events.arrows")
    collector = TransitionCollector(writer, native=native)
    a = np.ones(4)
    go, done = threading.Event(), threading.Event()

    def ignored() -> None:
        go.wait()
        for _ in range(50):
            a.sum()
        done.set()

    thread = threading.Thread(target=ignored)
    collector.start()
    try:
        thread.start()
        collector.ignore_thread(thread.ident)
        go.set()
        for _ in range(20):
            a.sum()
        done.wait()
    finally:
        collector.stop()
        thread.join()
        writer.close()
    (tmp_path / "p.1" / "meta.json").write_text('{"schema_version": 2, "process": "p", "pid": 1, "start_ns": 0, '
                                                '"complete": true}')
    calls = read_process(tmp_path / "p.1").events.query(f"kind == {int(Kind.CPU_CALL)}")
    assert len(calls) >= 20 and set(calls["tid"]) == {threading.get_ident()}


def test_a_session_writes_on_its_flusher_thread_while_it_runs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_FLUSH_INTERVAL, "0.05")
    a = np.ones(4)
    sizes: list[int] = []
    iterations = 0
    deadline = time.monotonic() + 300  # only catches a hang: the loop ends on what it sees written
    with rlscope.profile(tmp_path, process="p", gpu=False):
        while len(set(sizes)) < 4:  # the header, then three writes while the loop runs
            assert time.monotonic() < deadline, f"the flusher wrote {len(set(sizes)) - 1} times"
            rlscope.step()
            iterations += 1
            with rlscope.operation("work"):
                a.sum()
            time.sleep(0.005)
            sizes.append(next(tmp_path.glob("p.*/events.arrows")).stat().st_size)
        assert any(t.name == "rlscope-flusher" for t in threading.enumerate())
    assert not any(t.name == "rlscope-flusher" for t in threading.enumerate())  # stopped with the session
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (trace,) = read_trace(tmp_path)
    events, main = trace.events, trace.meta["main_tid"]
    writes = events[events["kind"] == int(Kind.PROFILER_WRITE)]
    assert (writes["tid"] != main).sum() >= 3  # the writes it saw, on the flusher's own thread
    assert set(events.loc[events["kind"] == int(Kind.CPU_CALL), "tid"]) == {main}
    steps, ops = (events["kind"] == int(Kind.STEP)).sum(), (events["kind"] == int(Kind.OPERATION)).sum()
    assert steps == ops == iterations


def test_a_bad_flush_interval_is_one_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_FLUSH_INTERVAL, "soon")
    with pytest.raises(RlscopeError, match=f"{ENV_FLUSH_INTERVAL}='soon': expected seconds > 0"):
        with rlscope.profile(tmp_path, gpu=False):
            pass
    assert not list(tmp_path.iterdir())


def test_no_flusher_thread_when_the_time_bound_is_off(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_FLUSH_INTERVAL, "inf")
    with rlscope.profile(tmp_path, gpu=False):
        assert not any(t.name == "rlscope-flusher" for t in threading.enumerate())
    assert os.path.getsize(next(tmp_path.glob("*/events.arrows"))) > 0


def test_rlscope_prof_refuses_a_bad_flush_interval_before_running(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "rlscope.cli", "prof", "--output", str(tmp_path / "t"), "--",
                           sys.executable, "-c", "open('ran', 'w')"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, ENV_FLUSH_INTERVAL: "-1"})
    assert done.returncode != 0 and "Traceback" not in done.stderr and f"{ENV_FLUSH_INTERVAL}='-1'" in done.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "t").exists()


@pytest.mark.parametrize(("text", "value"), [("", None), ("  ", None), ("2.5", 2.5), ("inf", float("inf"))])
def test_a_number_from_the_environment_is_read_or_left_unset(monkeypatch, text: str, value) -> None:
    from rlscope.collect.environment import number_from_env

    monkeypatch.setenv("RLSCOPE_TEST_NUMBER", text)
    assert number_from_env("RLSCOPE_TEST_NUMBER", float, lambda v: v > 0, "a positive number") == value


@pytest.mark.parametrize("text", ["soon", "0", "-3"])
def test_a_bad_number_in_the_environment_names_the_variable_and_what_it_expects(monkeypatch, text: str) -> None:
    from rlscope.collect.environment import number_from_env

    monkeypatch.setenv("RLSCOPE_TEST_NUMBER", text)
    with pytest.raises(RlscopeError, match=f"RLSCOPE_TEST_NUMBER={text!r}: expected a positive number"):
        number_from_env("RLSCOPE_TEST_NUMBER", float, lambda v: v > 0, "a positive number")
