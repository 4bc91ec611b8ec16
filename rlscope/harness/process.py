"""The worker subprocess as its parent sees it: its environment, starting it, stopping it.

Shared by every executor, so a run executes the same way on this machine and on a Ray node.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO

__all__ = ["worker_env", "start_worker", "die_with_parent_here", "kill_worker", "run_worker", "ENV_PARENT_PID"]

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
ENV_PARENT_PID = "RLSCOPE_DIE_WITH_PARENT"  # the pid whose death kills the worker (start_worker)


def worker_env(run_dir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: this process's, ``extra`` (e.g. a pinned GPU), the run directory,
    and the working directory on PYTHONPATH, since workloads are named as modules relative to it."""
    env = {**os.environ, **(extra or {}), "PYTHONUNBUFFERED": "1", "RLSCOPE_RUN_DIR": str(run_dir)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p)
    return env


def start_worker(run_dir: Path, env: Mapping[str, str], log: IO[bytes],
                 die_with_parent: bool = False) -> subprocess.Popen[bytes]:
    """``python -m rlscope.harness.worker RUN_DIR`` in a session of its own: Ctrl-C reaches the
    parent only, which stops its runs itself, child processes included.

    ``die_with_parent``: the kernel kills the worker if its parent dies (Linux), for parents that
    may be killed outright, as a Ray worker is when it crashes; otherwise the run would go on
    beside its retry. The worker asks for that itself, first thing (``die_with_parent_here``), so
    no Python code runs between fork and exec: in a process with other threads (JAX's, torch's)
    that is unsafe, and under the container's Python 3.13.5 such children died by SIGSEGV, Ray's
    (tests/test_ray_executor.py) and this function's when it used a ``preexec_fn``."""
    child_env = dict(env)
    if die_with_parent:
        child_env[ENV_PARENT_PID] = str(os.getpid())
    return subprocess.Popen(
        [sys.executable, "-m", "rlscope.harness.worker", str(run_dir)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env, start_new_session=True,
    )


def die_with_parent_here() -> None:
    """In the worker: with ``ENV_PARENT_PID`` set (``start_worker(die_with_parent=True)``), ask
    the kernel to kill this process when its parent dies (Linux), then make sure the parent has
    not died already, between the fork and the request; the variable is not passed on."""
    parent = os.environ.pop(ENV_PARENT_PID, None)
    if parent is None or sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) refused")
    if os.getppid() != int(parent):
        os.kill(os.getpid(), signal.SIGKILL)


def kill_worker(proc: subprocess.Popen[bytes]) -> None:
    """Kill the worker and every process it started, then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_worker(run_dir: Path, env: Mapping[str, str], timeout_s: float) -> int | None:
    """Run the worker to its end; its exit code, or None if it was killed at ``timeout_s``.

    For executors whose process may be cancelled or killed (Ray tasks): anything that interrupts
    the wait (a cancelled task receives KeyboardInterrupt) kills the worker, and so does this
    process's death, so no run outlives the task that asked for it."""
    with open(run_dir / "log.txt", "wb") as log:
        proc = start_worker(run_dir, env, log, die_with_parent=True)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_worker(proc)
            return None
        except BaseException:
            kill_worker(proc)
            raise
