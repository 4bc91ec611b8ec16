"""Time-bound trace writes: a session's events reach its file about a second after they happen,
so a process killed without warning (SIGKILL, the OOM killer, a lost node) leaves them behind.

Without this, events are written when a chunk of 65,536 has accumulated, which a slow loop
takes minutes to do: everything since the last chunk dies with the process. The ``Flusher`` is
a daemon thread per session that wakes when the trace's last write is ``interval`` old and has
the session write what is buffered; a loop fast enough to fill chunks within the interval never
wakes it to write. What it costs the workload: the write itself runs on this thread (recorded
there as ``Kind.PROFILER_WRITE``), but it holds the GIL while it converts the rows.

The GPU side has its own time bound, in the native tracer (``csrc/cupti/tracer.hpp``).

``RLSCOPE_FLUSH_INTERVAL_S`` sets the interval for both: seconds, 1 by default; ``inf`` turns
the time bound off (events are written in full chunks only).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable

from rlscope.collect.environment import number_from_env
from rlscope.trace.writer import TraceWriter

__all__ = ["ENV_FLUSH_INTERVAL", "DEFAULT_FLUSH_INTERVAL_S", "Flusher", "flush_interval_s"]

ENV_FLUSH_INTERVAL = "RLSCOPE_FLUSH_INTERVAL_S"
DEFAULT_FLUSH_INTERVAL_S = 1.0


def flush_interval_s() -> float:
    """The interval ``RLSCOPE_FLUSH_INTERVAL_S`` asks for (``math.inf``: no time bound)."""
    value = number_from_env(ENV_FLUSH_INTERVAL, float, lambda v: v > 0,
                            "seconds > 0 between trace writes (e.g. 1, or inf for writes of full chunks only)")
    return DEFAULT_FLUSH_INTERVAL_S if value is None else value


class Flusher:
    """A daemon thread calling ``write()`` whenever ``writer``'s last write is ``interval_s`` old.

    ``write`` must take the writer's lock, drain what is buffered elsewhere and write, and may
    write nothing when nothing is new; ``ident`` names the thread, for the transition collector
    to ignore.
    """

    def __init__(self, writer: TraceWriter, write: Callable[[], None], interval_s: float) -> None:
        self._writer = writer
        self._write = write
        self._interval_ns = int(interval_s * 1e9)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlscope-flusher", daemon=True)

    def start(self) -> int:
        """Start the thread; returns its ident."""
        self._thread.start()
        assert self._thread.ident is not None
        return self._thread.ident

    def stop(self) -> None:
        """Stop the thread, waiting for a write under way to end."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        checked = 0  # when a wake-up last found nothing to write: not again before interval after it
        while True:
            due = max(self._writer.last_write_ns, checked) + self._interval_ns
            if self._stop.wait(max(due - time.perf_counter_ns(), 0) / 1e9):
                return
            now = time.perf_counter_ns()
            if now - self._writer.last_write_ns < self._interval_ns:
                continue  # written meanwhile (a full chunk)
            checked = now
            try:
                self._write()
            except Exception as err:  # a full disk: the next chunk written will say so where it matters
                warnings.warn(f"rlscope: time-bound trace writes stopped ({type(err).__name__}: {err}); "
                              f"events are written in full chunks only from now on", RuntimeWarning, stacklevel=1)
                return
