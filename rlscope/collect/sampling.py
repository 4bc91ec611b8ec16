"""Sampled sessions: full collection in short windows placed at random, for runs of hours.

Full tracing writes every event; a training loop of 5 ms iterations with a thousand GPU events
each would write tens of GB an hour, and pay CUPTI's per-event cost all along. A sampled session
(``rlscope.profile(sample=...)``, ``rlscope prof --sample``) instead records everything only
inside windows of ``window`` iterations, on average one per ``block`` iterations, after
``warmup`` iterations that are never sampled (start-up: compilation, allocator growth, the first
launches of each kernel). Between windows ``rlscope.step()`` only counts: the iterations there
are kept as the call count and time at each switch (``calls`` below), which gives the run's
iteration time between any two switches exactly, and each stretch's mean iteration time. A row
per iteration, tens of bytes at thousands of iterations a second, would alone take a fast loop
past a trace budget of 100 MB an hour.

The gap between one window's end and the next window's start is drawn uniformly from 1 to
``2 (block - window) - 1`` iterations, so windows never line up with anything periodic in the loop
(an evaluation every 100 iterations, a target-network update every 1,000), and every iteration
is measured with the same probability, ``(window - settle) / block``: what makes the shares'
ratio estimate unbiased. One window at a uniform place inside each fixed block does not do
that: an iteration near a block's edge falls in fewer of the possible windows than one in its
middle, and an evaluation every 100 iterations with blocks of 200 was then seen in about 6% of
the windows instead of 10%, which biased a share's estimate by about twice its standard error
(``bench/sampled_validation.py synthetic``, docs/results/sampled.md). The first ``settle``
iterations of each window are recorded but left out of its time (``rlscope.analyze.sampled``):
switching CUPTI's recording on slows the launches that follow it for a while.

A window is fully traced, so what a sampled trace grows by per hour is a window's bytes times
the windows per hour, and a fast loop with many events per iteration makes that gigabytes at the
default block. ``budget`` bounds it: the trace's bytes (all of them, the start-up traced before
the first ``rlscope.step()`` included) are held to ``budget`` MB per hour since the session began
(0: no bound; a process that never steps stays a full trace, unbounded). At most every
``BUDGET_CHECK_S``, at a window's end, the bytes written and the windows closed over the last
``BUDGET_SPAN_S`` or so give a window's size, and with the step rate over the same span, the next
gap is drawn from the block whose windows write at the rate ``catch_up_rate`` allows: the
budget's rate less what the trace is ahead of the budget so far over ``BUDGET_CATCH_UP_S``
(never below ``MIN_RATE_SHARE`` of the budget, never above it, and never a block below
``block``). The whole trace's size is what is held, not a recent rate: the bytes on disk trail
the events by the time-bound writes' interval (about a second), so the first second's windows
are drawn from ``block`` whatever they write, and a start-up traced whole may alone be more than
the budget's first minute; both are paid back by drawing from larger blocks afterwards, which
takes a minute or more, with few windows meanwhile. Iterations are measured with a probability
that changes over the run, ``(window - settle) / block``, so each window counts in proportion to
the block its gap was drawn from (``blocks`` in ``samples.json``; ``rlscope.analyze.sampled``
weights by it).

Between windows the layers are off as in calibration's ``off`` level (``rlscope.collect.windows``):
annotations are no-ops, the transition hooks are out and CUPTI records nothing, but stays
attached. Detaching between windows (``cuptiFinalize``, then subscribing again) would also drop
what an attached CUPTI costs each CUDA call, but hundreds of detaches a run crashed processes
whose XLA threads were inside CUDA at the time (``windows.py``); a profiler that may crash the
run it watches is not one to leave on for hours.

A process is fully traced until its first ``rlscope.step()``, which switches it off; one that
never calls it (a worker, a helper process) stays an ordinary full trace.

``samples.json`` beside the events lists every window: ``[first_iteration, start_ns, end_ns,
iterations]`` of its measured part (after settling); ``blocks``: the block each window's gap was
drawn from; ``calls``: ``[call, time_ns]`` of the ``rlscope.step()`` call at every switch, at the
warm-up's end and of the last call (calls counted from 1); and the schedule it was drawn from.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlscope import _hotpath
from rlscope.collect.windows import LEVELS, LayerSwitch
from rlscope.errors import RlscopeError
from rlscope.files import write_atomic
from rlscope.trace.schema import SAMPLES_FILE

__all__ = ["SampleSpec", "SampledWindows", "TraceBudget", "parse_sample", "window_starts", "budgeted_block",
           "catch_up_rate", "BUDGET_CHECK_S", "BUDGET_SPAN_S", "BUDGET_CATCH_UP_S", "MIN_RATE_SHARE"]

_OFF, _ALL = 0, len(LEVELS) - 1
_NEVER = 1 << 62  # steps until the next call, once sampling has stopped
BUDGET_CHECK_S = 0.5  # how often at most the trace's size is looked at (at a window's end)
BUDGET_SPAN_S = 10.0  # a window's size and the step rate are measured over about this long
BUDGET_CATCH_UP_S = 60.0  # bytes written ahead of the budget are paid back over about this long
MIN_RATE_SHARE = 0.05  # while paying back, windows still write at least this share of the budget's rate


@dataclasses.dataclass(frozen=True)
class SampleSpec:
    """Windows of ``window`` iterations (their first ``settle`` left out), on average one per
    ``block`` iterations at random places, after ``warmup`` iterations; ``seed`` fixes the places;
    ``budget``: at most this many MB of trace per hour, by drawing from larger blocks (0: no bound)."""

    window: int = 20
    block: int = 500
    warmup: int = 50
    settle: int = 2
    budget: int = 100
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.window < 1 or self.block < 1 or self.warmup < 0 or self.settle < 0 or self.budget < 0:
            raise RlscopeError(f"sample {self.text()}: window and block must be at least 1, warmup, settle and "
                               "budget at least 0")
        if self.settle >= self.window:
            raise RlscopeError(f"sample {self.text()}: settle ({self.settle}) must be shorter than the window "
                               f"({self.window}), or no iteration of a window is measured")
        if self.block < 2 * self.window:
            raise RlscopeError(f"sample {self.text()}: a block ({self.block}) must be at least twice a window "
                               f"({self.window}), or the gaps between windows are nearly fixed and line up with "
                               "periodic work; for everything, profile without sampling")

    def text(self) -> str:
        fields = dataclasses.asdict(self)
        return ",".join(f"{k}={v}" for k, v in fields.items() if v is not None)


def parse_sample(spec: str | bool | SampleSpec | dict[str, Any]) -> SampleSpec:
    """``True`` (the defaults), a ``SampleSpec``, a dict of its fields, or ``"window=20,block=500"``
    (fields left out keep their defaults)."""
    if isinstance(spec, SampleSpec):
        return spec
    if spec is True or spec in ("", "1", "on"):
        return SampleSpec()
    if isinstance(spec, dict):
        fields = dict(spec)
        if bad := sorted(k for k, v in fields.items() if not isinstance(v, int) or isinstance(v, bool)):
            raise RlscopeError(f"sample {spec!r}: {', '.join(bad)} must be whole numbers of iterations")
    else:
        fields = {}
        for part in str(spec).split(","):
            key, sep, value = part.partition("=")
            if not sep or not value.strip().lstrip("-").isdigit():
                raise RlscopeError(f"sample {spec!r}: expected NAME=INTEGER,... with names from "
                                   f"{', '.join(f.name for f in dataclasses.fields(SampleSpec))}, "
                                   "e.g. window=20,block=500")
            fields[key.strip()] = int(value)
    known = {f.name for f in dataclasses.fields(SampleSpec)}
    if unknown := sorted(set(fields) - known):
        raise RlscopeError(f"sample {spec!r}: unknown {', '.join(unknown)}; use {', '.join(sorted(known))}")
    return SampleSpec(**fields)


def _gap(rng: random.Random, window: int, block: int) -> int:
    """Iterations from the end of one window (or of the warm-up) to the start of the next, on
    average ``block - window``."""
    return rng.randint(1, 2 * (block - window) - 1)


def catch_up_rate(budget_mb_per_h: float, written_bytes: float, elapsed_s: float) -> float:
    """Bytes per second the next stretch's windows may write, for a trace that has written
    ``written_bytes`` in the ``elapsed_s`` since its session began: the budget's rate less what is
    ahead of it, paid back over ``BUDGET_CATCH_UP_S``; between ``MIN_RATE_SHARE`` of the budget's
    rate and that rate (under the budget, windows are not drawn faster to make up for it: the
    block asked for is the most a loop is sampled)."""
    rate = budget_mb_per_h * 1e6 / 3600
    ahead = written_bytes - rate * elapsed_s
    return min(rate, max(MIN_RATE_SHARE * rate, rate - ahead / BUDGET_CATCH_UP_S))


def budgeted_block(spec: SampleSpec, window_bytes: float, iterations_per_s: float, bytes_per_s: float) -> int:
    """The block whose windows, each ``window_bytes`` long, write ``bytes_per_s`` in a loop of
    ``iterations_per_s``; never below ``spec.block`` (nor with no budget)."""
    if spec.budget <= 0 or window_bytes <= 0 or iterations_per_s <= 0 or bytes_per_s <= 0:
        return spec.block
    windows_per_s = bytes_per_s / window_bytes
    return max(spec.block, math.ceil(iterations_per_s / windows_per_s))


class TraceBudget:
    """The block each gap is drawn from, within ``spec.budget``: ``budgeted_block`` at the rate
    ``catch_up_rate`` gives for the trace's size, with a window's size and the step rate from the
    bytes written, the windows closed and the steps run since the newest earlier look at least
    ``BUDGET_SPAN_S`` old (or the first step), looking at most every ``BUDGET_CHECK_S``. Over a
    span of seconds, what trails the events on disk is a small part, and a slow start
    (compiling) no longer counts in the step rate. ``trace_bytes`` gives the trace's size on disk
    (-1: unreadable now); ``start_ns`` is when the session began."""

    def __init__(self, spec: SampleSpec, start_ns: int, trace_bytes: Callable[[], int]) -> None:
        self.spec = spec
        self.start_ns = start_ns
        self.block = spec.block  # the block the next gap is drawn from
        self._trace_bytes = trace_bytes
        # (time, trace bytes or -1, windows, steps) at the first step and at each look since
        self._looks: collections.deque[tuple[int, int, int, int]] = collections.deque()

    def first_step(self, now_ns: int, steps: int) -> None:
        """The first look, at the first ``rlscope.step()``: where the step rate is measured from."""
        self._looks.append((now_ns, self._trace_bytes(), 0, steps))

    def after_window(self, now_ns: int, windows: int, steps: int) -> int:
        """The block for the gap after a window that ended at ``now_ns``, with ``windows`` closed
        and ``steps`` run so far."""
        if self.spec.budget <= 0 or not self._looks or now_ns - self._looks[-1][0] < BUDGET_CHECK_S * 1e9:
            return self.block
        size = self._trace_bytes()
        if size < 0:  # the directory unreadable just now: the next look tries again
            return self.block
        while len(self._looks) > 1 and now_ns - self._looks[1][0] >= BUDGET_SPAN_S * 1e9:
            self._looks.popleft()
        then, size_then, windows_then, steps_then = self._looks[0]
        self._looks.append((now_ns, size, windows, steps))
        if size_then < 0 or size <= size_then or windows <= windows_then:
            return self.block  # nothing written yet (the first time-bound write is about a second away)
        rate = catch_up_rate(self.spec.budget, size, (now_ns - self.start_ns) / 1e9)
        self.block = budgeted_block(self.spec, (size - size_then) / (windows - windows_then),
                                    (steps - steps_then) / (now_ns - then) * 1e9, rate)
        return self.block


def window_starts(spec: SampleSpec, windows: int) -> list[int]:
    """The first iteration of each of the first ``windows`` windows (counted in ``rlscope.step()``
    calls), as ``SampledWindows`` draws them while the budget keeps the block at ``spec.block``."""
    rng = random.Random(spec.seed)
    # the first step() is the first a window can follow
    starts = [max(spec.warmup, 1) + _gap(rng, spec.window, spec.block)]
    while len(starts) < windows:
        starts.append(starts[-1] + spec.window + _gap(rng, spec.window, spec.block))
    return starts


class SampledWindows:
    """Drives a session's layers from ``rlscope.step()``: the native step calls ``on_window``
    with the stretch since its last call, and the int it returns is how many steps until the
    next call (``bind_step``), so the schedule costs nothing between switches."""

    def __init__(self, session: Any, spec: SampleSpec, directory: Path) -> None:
        self.session = session
        self.directory = directory
        if spec.seed is None:  # drawn now and written down, so the windows can be drawn again
            spec = dataclasses.replace(spec, seed=random.SystemRandom().randrange(2**31))
        if spec.settle == 0 and getattr(session, "_gpu", None) is not None:
            # switching CUPTI on slows the launches after it: one iteration at least is not measured
            spec = dataclasses.replace(spec, settle=1)
        self.spec = spec
        self.switch = LayerSwitch(session)
        self.windows: list[list[int]] = []
        self.calls: list[list[int]] = []  # [call, time_ns] at each on_window call, then the last call
        self.blocks: list[int] = []  # per window, the block its gap was drawn from
        self._rng = random.Random(spec.seed)
        self._budget = TraceBudget(spec, session.start_ns, self._trace_bytes)
        self._next_start = max(spec.warmup, 1) + _gap(self._rng, spec.window, spec.block)  # as window_starts does
        self._iteration = 0  # steps seen so far
        self._listed_bytes = 0  # what the windows, blocks and calls so far add to samples.json
        self._state = "start"  # start [-> warm-up] -> off -> settling -> measuring -> off ...; "stopped" after an error
        self._window_first = 0
        # Written now, so that a process killed before close() is still known to be sampled (its
        # trace is no full trace); close() writes the windows.
        self._write(directory, complete=False)

    def on_window(self, start_ns: int, end_ns: int, iterations: int) -> int:
        """The stretch since the last call (``start_ns`` -1 at the first, at the end of the first
        step) ended after ``iterations`` steps: switch, and say after how many steps to call again.
        Should switching fail, everything is switched back on and sampling stops, rather than
        leave the run half instrumented; the error goes on to the caller's ``rlscope.step()``."""
        if self._state == "stopped":
            return _NEVER
        try:
            return self._next(start_ns, end_ns, iterations)
        except BaseException:
            self._state = "stopped"
            self.switch.restore()
            _hotpath.set_step_rows(True)
            raise

    def _next(self, start_ns: int, end_ns: int, iterations: int) -> int:
        self._iteration += iterations  # steps so far
        self.calls.append([self._iteration, end_ns])
        self._listed_bytes += _json_bytes(self.calls[-1])
        if len(self.calls) == 1:
            self._budget.first_step(end_ns, self._iteration)
        if self._state == "measuring":
            self.windows.append([self._window_first, start_ns, end_ns, iterations])
            self.blocks.append(self._budget.block)
            self._listed_bytes += _json_bytes(self.windows[-1]) + _json_bytes(self.blocks[-1])
        if self._state in ("start", "measuring"):
            self.switch.apply(_OFF)
            _hotpath.set_step_rows(False)
            if self._state == "measuring":
                block = self._budget.after_window(end_ns, len(self.windows), self._iteration)
                self._next_start = self._iteration + _gap(self._rng, self.spec.window, block)
            elif self.spec.warmup > self._iteration:  # a call of its own where the estimates' run starts
                self._state = "warm-up"
                return self.spec.warmup - self._iteration
            self._state = "off"
            return max(1, self._next_start - self._iteration)
        if self._state == "warm-up":
            self._state = "off"
            return self._next_start - self._iteration
        if self._state == "off":
            self.switch.apply(_ALL)
            _hotpath.set_step_rows(True)
            self._window_first = self._iteration
            if self.spec.settle:
                self._state = "settling"
                return self.spec.settle
        self._window_first = self._iteration
        self._state = "measuring"
        return self.spec.window - self.spec.settle

    def _trace_bytes(self) -> int:
        """What the process's trace files hold on disk now (its directory's files: events, GPU
        rows, NVML's utilisation samples; XLA's dumps, written at compiles, are in a directory
        below and not counted), with what ``samples.json`` will hold of the windows and calls so
        far, which it gets only at the end (about 120 bytes a window, a percent of a budgeted
        trace); -1 where the directory cannot be read (the budget then waits for a look that
        can)."""
        try:
            with os.scandir(self.directory) as entries:
                on_disk = sum(e.stat().st_size for e in entries if e.is_file(follow_symlinks=False))
        except OSError:
            return -1
        return on_disk + self._listed_bytes

    def close(self, directory: Path) -> None:
        """Switch everything back on (a window open now is left out) and write the windows. A
        process that never called ``rlscope.step()`` was never switched: it is an ordinary full
        trace (a worker, a helper process started under ``rlscope prof --sample``)."""
        self.switch.restore()
        _hotpath.set_step_rows(True)
        if self._state == "start":
            (directory / SAMPLES_FILE).unlink(missing_ok=True)
            return
        calls, last_ns = self.session._ops.step_position()
        if calls > self.calls[-1][0]:
            self.calls.append([calls, last_ns])
        self._write(directory, complete=True)

    def _write(self, directory: Path, complete: bool) -> None:
        """``samples.json``, compact: it lists every window and switch of a run of hours."""
        switched = self.switch.annotations_switched
        write_atomic(directory / SAMPLES_FILE, _compact({
            "spec": dataclasses.asdict(self.spec), "complete": complete, "stopped_by_error": self._state == "stopped",
            "annotations_switched": None if switched is None else bool(switched), "windows": self.windows,
            "blocks": self.blocks, "calls": self.calls}) + "\n")


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _json_bytes(entry: Any) -> int:
    """What one entry of a list adds to ``_compact``'s text: itself and a comma."""
    return len(_compact(entry)) + 1
