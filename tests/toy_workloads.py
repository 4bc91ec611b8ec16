"""Tiny workloads for harness tests: fast, and able to fail, hang, crash or skip on request."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from rlscope.errors import SkipRun


_calls_in_this_process = 0


class OutOfMemoryError(RuntimeError):
    """Named as PyTorch's and CuPy's GPU out-of-memory errors are."""


def echo(x: int, fail_on: int = -1, sleep_s: float = 0.0, hang_on: int = -1, crash_on: int = -1,
         skip_on: int = -1, fail_on_call: int = -1, hang_on_call: int = -1, oom_on: int = -1,
         mode: str = "") -> dict[str, float]:
    """Return x squared; on request raise, run out of (GPU) memory, sleep past any timeout, SIGKILL
    itself, or skip: for one x (``*_on``) or on the worker's Nth call, i.e. its Nth repetition
    (``*_on_call``, from 1)."""
    global _calls_in_this_process
    _calls_in_this_process += 1
    marker = Path(os.environ["RLSCOPE_RUN_DIR"]) / "calls.txt"
    with marker.open("a") as f:
        f.write(f"{x}\n")
    if x == skip_on:
        raise SkipRun("toy reason")
    if fail_on_call == _calls_in_this_process:
        raise RuntimeError(f"toy failure on call {_calls_in_this_process}")
    if x == fail_on:
        raise RuntimeError(f"toy failure for x={x}")
    if x == oom_on:
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 32.00 GiB")
    if x == hang_on or hang_on_call == _calls_in_this_process:
        time.sleep(3600)
    if x == crash_on:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(sleep_s)
    return {"y": float(x * x)}


def wait_for(x: int, path: str, wait_s: float = 60.0) -> dict[str, float]:
    """Return x squared once the file ``path`` exists, or after ``wait_s`` if it never does
    (``seen`` says which): a run that outlasts another, however slow the machine."""
    deadline = time.monotonic() + wait_s
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    return {"y": float(x * x), "seen": float(os.path.exists(path))}


def gpu_env(x: int, device: str = "auto", sleep_s: float = 0.0) -> dict[str, str | float]:
    """Which GPUs the run was given, as its executor set them."""
    time.sleep(sleep_s)
    return {"y": float(x * x), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "unset")}


def recorded_start(x: int, starts: str, sleep_s: float = 0.0) -> dict[str, float]:
    """Append x and the worker's parent (the process executing the run: a test kills it to stand
    for a dying machine) to the file ``starts`` when starting, then sleep."""
    with open(starts, "a") as f:
        f.write(f"{x} {os.getppid()}\n")
    time.sleep(sleep_s)
    return {"y": float(x * x)}
