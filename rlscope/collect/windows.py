"""Alternating windows: one run that switches rlscope's layers on and off as it goes.

Whole runs of one workload differ widely in wall time on a shared machine, which swamps what a
layer costs. Within one process the machine's speed drifts slowly (successive stretches of a
few milliseconds are strongly correlated: docs/results/overhead.md), so comparing stretches a
few milliseconds apart cancels the drift that comparing runs suffers from. Calibration and its validation therefore
switch layers at iteration boundaries (``rlscope.step()``) in windows of at least ``window_ms``:

- ``off``: annotations are no-ops exactly as in an unprofiled process, and the transition
  collector's hooks are out (on Python 3.11, those of the thread calling step());
- ``annotations``: annotations recorded, hooks out;
- ``transitions``: both (what ``rlscope prof`` records on the CPU);
- ``cuda_api``: and CUDA API calls recorded by CUPTI;
- ``gpu_activities``: and kernels, copies and memsets (everything ``rlscope prof`` records).

Some switches cost the iterations that run next, which would read as a cost of the level
switched to, or hide cost from the level below. The window after such a switch only settles: it
runs at the new level but is not recorded, and the next one is. Two switches do this:

- on Python 3.12+, the transition collector's hooks: the code that runs next is re-instrumented
  and its disabled call sites re-armed;
- CUPTI's recording: the first iterations after it is switched off run slower than later ones,
  which would take that time off the CUDA API cost.

The GPU layers are switched only where the process traces its GPU; elsewhere the top two levels
equal ``transitions``. Below ``cuda_api`` CUPTI records nothing but stays attached. A process
that has recorded with CUPTI stays slower until it is detached (``cuptiFinalize``), so windows
that all follow a recording carry that cost at every level and measure it at none. Detaching
between windows would measure it, but detaching hundreds of times a run can crash a process
whose other threads are inside CUDA at the time (XLA's); a profiler must not do that. That cost
is measured per CUDA call in a process of rlscope's own instead (``rlscope.calibrate.residual``)
and added to the CUDA API cost the windows give.

The configurations follow a palindrome (``off, annotations, transitions, transitions,
annotations, off``, ...), so a drift linear over one block of windows adds the same time to
every configuration. A window's configuration is what was in force: annotations are switched
only while the calling thread has no operation open (a loop inside an annotated operation keeps
them on throughout, and says so).

``windows.json`` beside the events lists every complete window: ``[level, start_ns, end_ns,
iterations]`` with level an index into ``LEVELS``, and how many settling windows were left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlscope import recorder
from rlscope.errors import RlscopeError
from rlscope.files import write_json_atomic

__all__ = ["LEVELS", "WINDOWS_FILE", "AlternatingWindows", "LayerSwitch", "parse_windows", "format_windows"]

LEVELS = ("off", "annotations", "transitions", "cuda_api", "gpu_activities")
WINDOWS_FILE = "windows.json"


def parse_windows(spec: str) -> tuple[float, list[int]]:
    """``"10:off,annotations,transitions"`` -> (window ms, level indices)."""
    ms, _, names = spec.partition(":")
    try:
        window_ms = float(ms)
        levels = [LEVELS.index(n.strip()) for n in names.split(",") if n.strip()]
    except ValueError:
        raise RlscopeError(f"windows {spec!r}: expected MILLISECONDS:LEVEL,LEVEL,... with levels from "
                           f"{', '.join(LEVELS)}, e.g. 10:off,transitions") from None
    if window_ms <= 0 or len(set(levels)) < 2:
        raise RlscopeError(f"windows {spec!r}: need a positive window length and two different levels")
    return window_ms, levels


def format_windows(window_ms: float, levels: list[str]) -> str:
    return f"{window_ms:g}:{','.join(levels)}"


class LayerSwitch:
    """Switches a session's layers to one of ``LEVELS`` at an iteration boundary (alternating
    windows here, sampled windows in ``rlscope.collect.sampling``). ``apply`` returns whether
    the switch leaves a cost on the iterations that run next (see above): the caller does not
    count those."""

    settle_after_gpu_switch = True  # the window after a CUPTI switch carries the switch's cost

    def __init__(self, session: Any) -> None:
        self.session = session
        self.level = len(LEVELS) - 1  # a session starts with everything on
        self.annotations_switched: bool | None = None  # decided at the first switch

    def decide_annotations(self) -> bool:
        """Whether annotations can be switched: only where the calling thread has no operation
        open at the first switch (a loop inside an annotated operation keeps them on)."""
        if self.annotations_switched is None:
            self.annotations_switched = not self.session._ops.current_stack()
        return self.annotations_switched

    def apply(self, level: int) -> bool:
        session = self.session
        annotate = level >= 1 or not self.decide_annotations() or bool(session._ops.current_stack())
        recorder.annotate_into(session if annotate else None)
        settling = False
        collector = session._collector
        if collector is not None and (level >= 2) != (self.level >= 2):
            if level >= 2:
                collector.resume()
            else:
                collector.suspend()
            settling = collector.switch_leaves_cost
        gpu = session._gpu
        if gpu is not None and ((level >= 3) != (self.level >= 3) or (level >= 4) != (self.level >= 4)):
            gpu.record(api=level >= 3, gpu=level >= 4)
            settling = settling or self.settle_after_gpu_switch
        self.level = 1 if annotate and level == 0 else level
        return settling

    def restore(self) -> None:
        """Everything back on (a session's end: its last layers' state is what it stops from)."""
        if self.level < 2 and self.session._collector is not None:
            self.session._collector.resume()
        if self.level < 4 and self.session._gpu is not None:
            self.session._gpu.record(api=True, gpu=True)
        self.level = len(LEVELS) - 1
        if recorder.bound() is self.session:  # still profiling (not stopping through the API)
            recorder.annotate_into(self.session)


class AlternatingWindows:
    """Switches a session's layers at iteration boundaries. The native ``rlscope.step()`` counts
    the iterations and calls ``on_window`` once a window has lasted ``window_ms``, so a step
    costs the same in every window and the switching itself falls in none."""

    def __init__(self, session: Any, window_ms: float, levels: list[int]) -> None:
        self.session = session
        self.window_ms = window_ms
        self.cycle = levels + levels[::-1]
        self.windows: list[list[int]] = []
        self.switch = LayerSwitch(session)
        self._position = -1  # index into cycle of the open window; -1: before the first step()
        self._settling = False  # the open window follows a switch that leaves a cost
        self.settled = 0  # windows left out for that

    def on_window(self, start_ns: int, end_ns: int, iterations: int) -> None:
        """The window open since ``start_ns`` (-1: none yet) ended at ``end_ns`` after
        ``iterations`` steps: record it and switch to the next configuration, or after a
        settling window, time the same configuration afresh."""
        if self._settling:
            self._settling = False
            self.settled += 1
            return
        if self._position >= 0:
            self.windows.append([self.switch.level, start_ns, end_ns, iterations])
        self._position = (self._position + 1) % len(self.cycle)
        self._apply(self.cycle[self._position])

    def _apply(self, level: int) -> None:
        if self.switch.annotations_switched is None and not self.switch.decide_annotations():
            levels = sorted({max(lv, 1) for lv in self.cycle})  # "off" is "annotations" then
            self.cycle = levels + levels[::-1] if len(levels) > 1 else [1, 2, 2, 1]
            self._position = 0
            level = self.cycle[0]
        self._settling = self.switch.apply(level)

    def close(self, directory: Path) -> None:
        """Switch everything back on and write the complete windows."""
        self.switch.restore()
        write_json_atomic(directory / WINDOWS_FILE, {
            "levels": list(LEVELS), "window_ns": int(self.window_ms * 1e6),
            "annotations_switched": bool(self.switch.annotations_switched), "settled": self.settled,
            "windows": self.windows})
