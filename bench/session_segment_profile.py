"""Where in a profiled stretch its cost lies: whole sessions started and stopped, against one
session whose hooks and annotations are switched as calibration's windows switch them.

The sessions check (``experiments.overhead.sessions``) starts a fresh ``rlscope.profile()``
session for every profiled segment; calibration measures the costs in one long session. If a
fresh session costs more per event than a long one, the sessions check reads high although the
correction is right. This runs gym_numpy (CPU) in 100 ms segments, unprofiled / profiled /
profiled / unprofiled, either way:

    python bench/session_segment_profile.py session STEPS
    python bench/session_segment_profile.py toggle STEPS

and prints, per stretch of time since a segment began (0-2 ms, 2-5 ms, ...), the median over
blocks of the time per iteration against the same block's unprofiled segments (after their
first 10 ms): how the cost of profiling develops within a segment. Run both modes alternately,
a few times: on a shared machine a single run moves by a few points.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

import numpy as np

import rlscope
from experiments.overhead import loops
from rlscope import api

SEGMENT_NS = 100_000_000
PATTERN = (0, 1, 1, 0)
EVERY = 32  # iterations per tick, as the sessions check ticks gym_numpy
BINS_MS = (0, 2, 5, 10, 20, 40, 60, 80, 101)


class Segments:
    """Switches profiling at the first tick after each segment's 100 ms; records every tick's
    time per iteration with its segment and offset."""

    every = EVERY

    def __init__(self, mode: str, directory: Path) -> None:
        self.mode, self.directory = mode, directory
        self.index, self.started, self.last = -1, 0, 0
        self.rows: list[tuple[int, float, float]] = []
        self.stack: contextlib.ExitStack | None = None
        if mode == "toggle":
            self.stack = contextlib.ExitStack()
            self.stack.enter_context(rlscope.profile(directory / "one", gpu=False))
            self.session = api._bound

    def _set(self, profiled: bool) -> None:
        if self.mode == "session":
            if self.stack is not None:
                self.stack.close()
                self.stack = None
            if profiled:
                self.stack = contextlib.ExitStack()
                self.stack.enter_context(rlscope.profile(self.directory / f"s{self.index}", gpu=False))
            return
        collector = self.session._collector
        (collector.resume if profiled else collector.suspend)()
        api._annotate_into(self.session if profiled else None)

    def tick(self) -> None:
        now = time.perf_counter_ns()
        if self.index >= 0:
            self.rows.append((self.index, (self.last - self.started) / 1e6, (now - self.last) / EVERY))
        if self.index < 0 or now - self.started >= SEGMENT_NS:
            self.index += 1
            self._set(bool(PATTERN[self.index % len(PATTERN)]))
            now = self.started = time.perf_counter_ns()
        self.last = now

    def close(self) -> None:
        if self.stack is not None:
            if self.mode == "toggle":
                self._set(True)
            self.stack.close()


def profile_by_offset(rows: np.ndarray) -> dict[str, list[float]]:
    """Per kind of segment, per offset bin: median over blocks of time per iteration / the
    block's unprofiled median (from 10 ms into those segments), minus one."""
    out: dict[str, list[list[float]]] = {"profiled": [], "unprofiled": []}
    size = len(PATTERN)
    for block in range(1, int(rows[:, 0].max()) // size):
        inside = rows[(rows[:, 0] >= size * block) & (rows[:, 0] < size * (block + 1))]
        profiled = np.array([PATTERN[int(i) % size] for i in inside[:, 0]], dtype=bool)
        reference = np.median(inside[~profiled & (inside[:, 1] >= 10), 2])
        for name, chosen in (("profiled", inside[profiled]), ("unprofiled", inside[~profiled])):
            curve = []
            for low, high in zip(BINS_MS, BINS_MS[1:]):
                picked = chosen[(chosen[:, 1] >= low) & (chosen[:, 1] < high), 2]
                curve.append(np.median(picked) / reference - 1 if len(picked) else np.nan)
            out[name].append(curve)
    return {name: list(np.nanmedian(np.array(curves), axis=0)) for name, curves in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("session", "toggle"))
    parser.add_argument("steps", type=int, help="gym_numpy steps (3,000,000: about a minute here)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        segments = Segments(args.mode, Path(directory))
        loops.gym_numpy(args.steps, segments)  # type: ignore[arg-type]
        segments.close()
    for name, curve in profile_by_offset(np.array(segments.rows)).items():
        bins = " ".join(f"{low}-{high} ms {100 * value:+.1f}%"
                        for low, high, value in zip(BINS_MS, BINS_MS[1:], curve))
        print(f"{args.mode} {name}: {bins}")


if __name__ == "__main__":
    main()
