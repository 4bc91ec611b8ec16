"""Profiling sessions started and stopped inside one run: the in-process whole-run check.

Alternating windows (``rlscope.collect.windows``) switch what rlscope *records*, so whatever a
session costs while recording nothing (CUPTI attached, the NVML sampler's thread, the
collectors installed) is in both kinds of window and measured by neither. Comparing whole
processes catches it, but identical processes on a shared or virtualised host differ by more
than the ±5% the correction is held to.

Here one process runs its loop in segments, each of about ``segment_ms``, in palindromic
order ``unprofiled, profiled, profiled, unprofiled, ...``. A profiled segment runs inside its
own ``rlscope.profile()`` session, started and stopped through the public API as a user would,
so it pays everything a profiled process pays once its interpreter has started; an unprofiled
segment runs with no session at all, exactly as an uninstrumented process. Each segment's first
stretch (``warmup_fraction`` of ``segment_ms``, at least one tick) is left out of its time:
it holds the session's start-up, a one-off that the whole-run checks measure instead.

``segments.json`` in the output directory lists every timed stretch:
``[profiled, start_ns, end_ns, iterations, trace directory or ""]``, times on the trace clock,
and ``sessions`` every profiled session's ``[ns to open, ns to close, iterations it saw]``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

import rlscope
from rlscope.files import write_json_atomic

__all__ = ["SEGMENTS_FILE", "SessionSegments"]

SEGMENTS_FILE = "segments.json"


class SessionSegments:
    """Call ``tick()`` at the top of every ``every``-th iteration (the first included), before
    ``rlscope.step()``, and ``close()`` once the loop is done (also as a context manager;
    closing twice is harmless). A tick is a Python call that a profiled segment pays more for
    than an unprofiled one (on 3.11 the profile function sees it and its clock read: ~0.15 us,
    1.5% of a 10 us CartPole iteration), so a fast loop ticks every few dozen iterations. Sessions are
    started and stopped only at iteration boundaries, where the loop has no rlscope operation
    open; a loop that runs inside an operation closes before leaving it, since the last
    segment's session may still be open and would see the operation end without its start.

    ``open_session(trace)`` opens a profiled segment's session (default: ``rlscope.profile(trace,
    gpu=gpu)``); bench/gpu_overhead.py passes other rlscope layers and the frameworks' profilers."""

    PATTERN = (False, True, True, False)

    def __init__(self, directory: Path, segment_ms: float = 100.0, warmup_fraction: float = 0.1,
                 gpu: bool | str | None = None, every: int = 1,
                 open_session: Callable[[Path], AbstractContextManager[Any]] | None = None) -> None:
        if segment_ms <= 0 or not 0 <= warmup_fraction < 1 or every < 1:
            raise ValueError(f"segment_ms {segment_ms} must be > 0, warmup_fraction {warmup_fraction} in [0, 1) "
                             f"and every {every} >= 1")
        self.every = every
        self.directory = Path(directory)
        self.segment_ns = int(segment_ms * 1e6)
        self.warmup_ns = int(segment_ms * warmup_fraction * 1e6)
        self.open_session = open_session or (lambda trace: rlscope.profile(trace, gpu=gpu))
        self.segments: list[list[Any]] = []
        self._index = -1  # segment being run; -1 before the first tick
        self._session: contextlib.ExitStack | None = None
        self._trace = ""
        self._started = self._timed_from = 0
        self._iterations = 0
        self._ticks = 0  # in the segment running, the one it began with included
        self._open_ns = 0
        # Per profiled session: [ns to open it, ns to close it, iterations it saw]: what a session
        # costs outside the timed stretches (bench/gpu_overhead.py reports it).
        self.sessions: list[list[int]] = []
        self._closed = False

    def __enter__(self) -> SessionSegments:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tick(self) -> None:
        now = time.perf_counter_ns()
        if self._index < 0:
            self._next(now)
            return
        if self._timed_from and now - self._timed_from >= self.segment_ns:
            self.segments.append([int(self._profiled()), self._timed_from, now, self._iterations, self._trace])
            self._next(now)
            return
        self._ticks += 1
        if not self._timed_from:  # warming up: at least the iteration the segment began with
            if now - self._started >= self.warmup_ns:
                self._timed_from, self._iterations = now, self.every
            return
        self._iterations += self.every

    def close(self) -> None:
        """Stop an open session (its stretch, cut short, is dropped) and write the segments."""
        if self._closed:
            return
        self._closed = True
        self._stop()
        self.directory.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.directory / SEGMENTS_FILE, {"pattern": [int(p) for p in self.PATTERN],
                                                            "segment_ns": self.segment_ns, "segments": self.segments,
                                                            "sessions": self.sessions})

    def _profiled(self) -> bool:
        return self.PATTERN[self._index % len(self.PATTERN)]

    def _next(self, now: int) -> None:
        self._stop()
        self._index += 1
        self._trace = ""
        if self._profiled():
            trace = self.directory / f"segment-{self._index:05d}"
            opening = time.perf_counter_ns()
            self._session = contextlib.ExitStack()
            self._session.enter_context(self.open_session(trace))
            self._trace = trace.name
            now = time.perf_counter_ns()
            self._open_ns = now - opening
        self._started, self._timed_from, self._ticks = now, 0, 1

    def _stop(self) -> None:
        if self._session is not None:
            closing = time.perf_counter_ns()
            self._session.close()
            self.sessions.append([self._open_ns, time.perf_counter_ns() - closing, self._ticks * self.every])
            self._session = None


def read_segments(directory: Path) -> list[list[int]]:
    """The timed stretches of a ``--sessions`` run as ``WINDOW_COLUMNS`` rows (level 0:
    unprofiled, the top level: profiled), in order: a profiled stretch's duration leaves out its
    trace writes and its events are counted from its session's trace, as for alternating windows."""
    from rlscope.calibrate.spans import window_rows
    from rlscope.collect.windows import LEVELS
    from rlscope.errors import RlscopeError
    from rlscope.analyze.attribution import read_attributed

    path = Path(directory) / SEGMENTS_FILE
    try:
        segments = json.loads(path.read_text())["segments"]
    except (OSError, ValueError, KeyError) as err:
        raise RlscopeError(f"{path}: no segments ({err}); make them with "
                           f"`python -m experiments.overhead.loops WORKLOAD STEPS --sessions DIR`") from err
    top = len(LEVELS) - 1
    rows = []
    for profiled, start, end, iterations, trace in segments:
        if not profiled:
            rows.append([0, end - start, iterations])
            continue
        (process,) = read_attributed(Path(directory) / trace)
        rows += window_rows(np.array([[top, start, end, iterations]], dtype=np.int64), process)
    width = max(len(r) for r in rows) if rows else 3
    return [r + [0] * (width - len(r)) for r in rows]
