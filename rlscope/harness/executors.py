"""Executors decide where runs execute; the runner decides what a run is.

An executor takes a list of runs and the runner's launcher and yields outcomes as runs finish.
The launcher executes a run here (``launcher(run, slot_env)``), or, for an executor that runs
workers elsewhere (:mod:`rlscope.harness.ray_executor`), prepares its directory
(``launcher.prepare(run)``) and turns what came back into its outcome (``launcher.settle``,
``launcher.lost``). The local executor keeps ``jobs`` runs in flight and, where GPUs are visible,
pins each slot to one GPU through ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Protocol, TypeVar

from rlscope.nvidia import NvmlUnavailable, nvml

__all__ = ["Executor", "LocalExecutor", "visible_gpus"]

Run = TypeVar("Run")
Outcome = TypeVar("Outcome")
Launch = Callable[[Run, Mapping[str, str]], Outcome]


class Executor(Protocol):
    def run_all(self, runs: Sequence[Run], launch: Launch) -> Iterator[Outcome]:
        """Yield one outcome per run, in completion order."""
        ...

    def close(self) -> None:
        """Release what the executor holds (a Ray connection); runs are over by then."""
        ...


def visible_gpus() -> list[str]:
    """GPU indices this process may use: CUDA_VISIBLE_DEVICES if set, else what NVML counts."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g for g in (x.strip() for x in env.split(",")) if g and g != "-1"]
    try:
        with nvml() as pynvml:
            return [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except NvmlUnavailable:
        return []


class LocalExecutor:
    """Run up to ``jobs`` subprocesses at once on this machine.

    Threads suffice here: each thread only waits on its run's subprocess, which does the work.
    """

    def __init__(self, jobs: int = 1, gpus: Sequence[str] | None = None) -> None:
        self.jobs = max(1, jobs)
        self.gpus = list(visible_gpus() if gpus is None else gpus)

    def run_all(self, runs: Sequence[Run], launch: Launch) -> Iterator[Outcome]:
        slots: queue.Queue[dict[str, str]] = queue.Queue()
        for i in range(self.jobs):
            slots.put({"CUDA_VISIBLE_DEVICES": self.gpus[i % len(self.gpus)]} if self.gpus else {})

        def pinned(run: Run) -> Outcome:
            env = slots.get()
            try:
                return launch(run, env)
            finally:
                slots.put(env)

        pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="rlscope-run")
        pending: set[Future[Outcome]] = set()
        todo = iter(runs)
        try:
            for run in todo:
                pending.add(pool.submit(pinned, run))
                if len(pending) >= self.jobs:
                    break
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()
                    run = next(todo, None)
                    if run is not None:
                        pending.add(pool.submit(pinned, run))
        finally:
            # Never block here: on Ctrl-C the runner kills the subprocesses these threads wait on.
            pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Nothing to release: each sweep's threads end with it."""
