"""What calibration and correction read from a trace: when each counted event happened, the
time spent writing the trace, a process's start-up and steady spans, and its alternating windows.

Events are counted exactly as the transitions table counts them, so a cost derived from these
counts is subtracted with the same counts it came from.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from rlscope.analyze.attribution import launching_call, outermost_per_thread
from rlscope.analyze.sampled import is_sampled, sampled_calls, sampled_windows
from rlscope.calibrate.model import CPU_EVENTS, EVENT_TYPES
from rlscope.collect.windows import WINDOWS_FILE
from rlscope.trace.schema import Kind

__all__ = ["event_times", "write_time_in", "first_step_ns", "iterating_process", "profiled_span", "profiled_startup",
           "profiled_steady", "trace_iteration", "window_rows", "measure_windows"]


def event_times(events: pd.DataFrame) -> list[np.ndarray]:
    """When each counted event happened, per event type of ``WINDOW_COLUMNS``, counted as the
    transitions table counts them: operations and native calls at their start, outermost CUDA
    API calls per thread at theirs, kernels at the start of the API call that launched them
    (what recording a kernel costs is paid at its launch)."""
    kind = events["kind"].to_numpy()
    start, end = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    tid, correlation = events["tid"].to_numpy(), events["correlation"].to_numpy()
    api = np.flatnonzero(kind == int(Kind.CUDA_API))
    outer = api[outermost_per_thread(tid[api], start[api], end[api])]
    kernels = np.flatnonzero(kind == int(Kind.GPU_KERNEL))
    launch = launching_call(correlation[api], correlation[kernels])
    kernel_times = np.where(launch >= 0, start[api][np.maximum(launch, 0)], start[kernels]) if len(api) \
        else start[kernels]
    return [start[kind == int(Kind.OPERATION)],
            start[(kind == int(Kind.CPU_CALL)) & (events["category"].to_numpy() > 0)],
            start[outer], kernel_times]


def write_time_in(spans: np.ndarray, events: pd.DataFrame, tid: int) -> np.ndarray:
    """Per span (rows ``[level, start_ns, end_ns, iterations]``), how long thread ``tid`` spent
    writing the trace out (``Kind.PROFILER_WRITE`` intervals, clipped to the span)."""
    writes = events[(events["kind"] == int(Kind.PROFILER_WRITE)) & (events["tid"] == tid)]
    out = np.zeros(len(spans), dtype=np.int64)
    for start, end in zip(writes["start_ns"].to_numpy(), writes["end_ns"].to_numpy()):
        out += np.maximum(np.minimum(spans[:, 2], end) - np.maximum(spans[:, 1], start), 0)
    return out


def first_step_ns(process: Any) -> int | None:
    """When a process first called rlscope.step() (profiled or wall-clock only), or None."""
    if process.meta.get("wall_only"):
        return process.meta.get("first_step_ns")
    if is_sampled(process):  # step rows only inside its windows; samples.json has the first call
        times = sampled_calls(process)[1]
        return int(times[0]) if len(times) else None
    events = process.events
    steps = events.loc[events["kind"] == int(Kind.STEP), "start_ns"]
    return int(steps.min()) if len(steps) else None


def iterating_process(processes: list[Any]) -> Any:
    """The process of a trace that made the most ``rlscope.step()`` iterations on its main
    thread (the training loop's), or None where none did."""
    best, most = None, 0
    for process in processes:
        events = process.events
        n = int(((events["kind"] == int(Kind.STEP)) & (events["tid"] == process.meta.get("main_tid"))).sum())
        if n > most:
            best, most = process, n
    return best


def profiled_span(process: Any, start_ns: int, end_ns: int) -> dict[str, Any]:
    """A profiled process's main thread from ``start_ns`` to ``end_ns``: ``{"raw_ns",
    "writes_ns", "events": {event type: count}}``."""
    main = process.meta["main_tid"]
    own = process.events[process.events["tid"] == main]
    span = np.array([[0, start_ns, end_ns, 0]], dtype=np.int64)
    return {"raw_ns": end_ns - start_ns, "writes_ns": int(write_time_in(span, own, main)[0]),
            "events": {e: int(((t >= start_ns) & (t < end_ns)).sum())
                       for e, t in zip(EVENT_TYPES, event_times(own))}}


def profiled_startup(process: Any) -> dict[str, Any] | None:
    """A profiled process's start-up, interpreter start to its first ``rlscope.step()``
    (``profiled_span``), or None where it made no step."""
    first = first_step_ns(process)
    return None if first is None else profiled_span(process, int(process.meta["start_ns"]), first)


def profiled_steady(process: Any) -> dict[str, Any] | None:
    """A profiled process from its first ``rlscope.step()`` to its end (``profiled_span``), or
    None where it made no step."""
    first = first_step_ns(process)
    return None if first is None else profiled_span(process, first, int(process.meta["end_ns"]))


def trace_iteration(processes: list[Any], span_ns: float = 10e6) -> tuple[float, float] | None:
    """How fast a profiled trace ran, as ``window_costs.window_iteration`` says it of
    calibration's windows: its main process's (the one with most iterations)
    ``rlscope.step()`` iterations, grouped into consecutive spans of at least ``span_ns`` as
    calibration's windows are, less trace writes; the median over spans of the time per
    iteration, and the CPU-side events per iteration. None without enough iterations."""
    best = iterating_process(processes)
    if best is None:
        return None
    main = best.meta.get("main_tid")
    if is_sampled(best):  # iterations are recorded inside its windows only: the windows are the spans
        spans = np.array([[0, start, end, n] for _, start, end, n in sampled_windows(best)],
                         dtype=np.int64).reshape(-1, 4)
        if not len(spans):
            return None
    else:
        steps = best.events[(best.events["kind"] == int(Kind.STEP)) & (best.events["tid"] == main)]
        steps = steps.sort_values("start_ns")
        if len(steps) < 2:
            return None
        start, end = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
        cuts = [0]
        for i in range(1, len(start)):
            if start[i] - start[cuts[-1]] >= span_ns:
                cuts.append(i)
        spans = np.array([[0, start[a], end[b - 1], b - a] for a, b in zip(cuts, [*cuts[1:], len(start)])],
                         dtype=np.int64)
        spans = spans[:-1] if len(spans) > 1 else spans  # the last ends with profiling: teardown, not an iteration
    times = (spans[:, 2] - spans[:, 1] - write_time_in(spans, best.events, main)) / spans[:, 3]
    counted = dict(zip(EVENT_TYPES, event_times(best.events[best.events["tid"] == main])))
    events = 0
    for e, t in counted.items():
        if e in CPU_EVENTS:
            t = np.sort(t)
            events += int((np.searchsorted(t, spans[:, 2]) - np.searchsorted(t, spans[:, 1])).sum())
    return float(np.median(times)), events / float(spans[:, 3].sum())


def window_rows(windows: np.ndarray, process: Any) -> list[list[int]]:
    """Stretches ``[level, start_ns, end_ns, iterations]`` of one process's trace as
    ``WINDOW_COLUMNS`` rows: duration less the main thread's trace writes in it, iterations, and
    the events of each type that fall in it."""
    durations = windows[:, 2] - windows[:, 1] - write_time_in(windows, process.events, process.meta["main_tid"])
    counts = []
    for times in event_times(process.events):
        index = np.searchsorted(windows[:, 1], times, side="right") - 1
        inside = (index >= 0) & (times < windows[np.maximum(index, 0), 2])
        counts.append(np.bincount(index[inside], minlength=len(windows)))
    return [[int(w[0]), int(durations[i]), int(w[3]), *(int(c[i]) for c in counts)] for i, w in enumerate(windows)]


def measure_windows(processes: list[Any]) -> list[list[list[int]]]:
    """Per process of a trace (``ProcessTrace`` objects) that alternated, its complete windows
    laid out as ``WINDOW_COLUMNS``. A window's duration leaves out the main thread's trace
    writes: they are timed as they happen and corrected exactly, and one of a few ms in a 10 ms
    window would otherwise read as a cost of that window's events."""
    out = []
    for process in processes:
        path = process.directory / WINDOWS_FILE
        if not path.exists():
            continue
        windows = np.array(json.loads(path.read_text())["windows"], dtype=np.int64).reshape(-1, 4)
        if len(windows):
            out.append(window_rows(windows, process))
    return out
