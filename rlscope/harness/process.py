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

__all__ = ["worker_env", "start_worker", "kill_worker", "run_worker"]

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


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
    beside its retry."""
    preexec = None
    if die_with_parent and sys.platform == "linux":
        # Looked up here, in the parent: the child of a threaded process (a Ray worker) must not
        # load libraries between fork and exec, only make the call.
        prctl = ctypes.CDLL(None, use_errno=True).prctl

        def preexec() -> None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return subprocess.Popen(
        [sys.executable, "-m", "rlscope.harness.worker", str(run_dir)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(env), start_new_session=True,
        preexec_fn=preexec,
    )


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
