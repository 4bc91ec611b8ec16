"""Tiny workloads for harness tests: fast, and able to fail, hang, crash or skip on request."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from rlscope.errors import SkipRun


def echo(x: int, fail_on: int = -1, sleep_s: float = 0.0, hang_on: int = -1, crash_on: int = -1,
         skip_on: int = -1) -> dict[str, float]:
    """Return x squared; on request raise, sleep past any timeout, SIGKILL itself, or skip."""
    marker = Path(os.environ["RLSCOPE_RUN_DIR"]) / "calls.txt"
    with marker.open("a") as f:
        f.write(f"{x}\n")
    if x == skip_on:
        raise SkipRun("toy reason")
    if x == fail_on:
        raise RuntimeError(f"toy failure for x={x}")
    if x == hang_on:
        time.sleep(3600)
    if x == crash_on:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(sleep_s)
    return {"y": float(x * x)}
