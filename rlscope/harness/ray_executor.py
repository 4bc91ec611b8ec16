"""Run a sweep's runs as Ray tasks, on one machine or a cluster (``rlscope run --executor ray``).

Each run is one task that executes the same worker subprocess as the local executor, in a
temporary run directory on whichever node Ray picks, with the manifest's timeout. Its files come
back to this machine with its result (no shared filesystem is assumed) and are unpacked into
``runs/<id>/``, result.json last; this machine then writes DONE exactly as for a local run, so
resume, ``--force`` and results.csv behave the same. The stages an earlier attempt stored
(``runs/<id>/stages/``, :mod:`rlscope.stages`) go with the task, so a run resumes on any node.

Ray ships the working directory (the project: workloads are modules relative to it, files that
.gitignore names left out) to every node; rlscope itself must be installed on each node.

Failures: a task whose worker process or node dies is retried once by Ray on another node; a
second death marks the run failed with the reason and the sweep goes on.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import tarfile
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlscope.errors import RlscopeError
from rlscope.files import write_json_atomic
from rlscope.stages import STAGES_DIR

__all__ = ["RayExecutor", "needs_gpu", "INSTALL_HINT"]

INSTALL_HINT = "--executor ray needs Ray: pip install 'rlscope[dist]' (on this machine and on every node)"
# Not shipped to the nodes: rlscope's own source (each node imports its installed rlscope, whose
# native modules the source tree lacks) and what no workload reads.
_NOT_SHIPPED = ["/rlscope/", "/csrc/", "/docs/", "/output/", "/build/", "/.git/", "/.venv/", "*.so"]
_RESULT = "result.json"


def needs_gpu(params: Mapping[str, Any], cluster_has_gpus: bool) -> bool:
    """Whether a run asks Ray for a GPU: not where its ``device`` is the CPU, nor where the cluster
    has none (a run that insists on CUDA then skips itself with the reason, as it does locally)."""
    device = str(params.get("device", "auto"))
    return cluster_has_gpus and (device == "auto" or device.startswith("cuda"))


def _pack(directory: Path) -> bytes:
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w:gz") as tar:
        tar.add(directory, arcname=".")
    return packed.getvalue()


def _execute_run(config: dict[str, Any], stages: bytes = b"") -> dict[str, Any]:
    """The task: the run's worker subprocess in a temporary run directory, with the stages an
    earlier attempt stored (``stages``: packed, or empty); its files, packed."""
    from rlscope.harness.process import run_worker, worker_env

    with tempfile.TemporaryDirectory(prefix="rlscope-run-") as tmp:
        run_dir = Path(tmp) / config["run_id"]
        run_dir.mkdir()
        if stages:
            with tarfile.open(fileobj=io.BytesIO(stages), mode="r:gz") as tar:
                tar.extractall(run_dir / STAGES_DIR, filter="data")
        write_json_atomic(run_dir / "config.json", config)
        started = time.perf_counter()
        returncode = run_worker(run_dir, worker_env(run_dir), config["timeout_s"])
        seconds = time.perf_counter() - started
        files = _pack(run_dir)
    return {"returncode": returncode, "seconds": seconds, "files": files}


def _unpack(files: bytes, run_dir: Path) -> None:
    """The run's files into ``run_dir``, each replaced atomically, result.json last: a run
    directory never shows a result without the log that goes with it."""
    with tempfile.TemporaryDirectory(prefix=".incoming-", dir=run_dir.parent) as tmp:
        with tarfile.open(fileobj=io.BytesIO(files), mode="r:gz") as tar:
            tar.extractall(tmp, filter="data")
        incoming = Path(tmp)
        for entry in sorted(incoming.iterdir(), key=lambda p: p.name == _RESULT):
            target = run_dir / entry.name
            if entry.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            os.replace(entry, target)


class RayExecutor:
    """Runs as Ray tasks: one CPU each, and one GPU where :func:`needs_gpu` says so.

    ``address`` None starts a Ray instance on this machine (stopped by :meth:`close`); "auto" or
    "HOST:PORT" joins a running cluster.
    """

    def __init__(self, address: str | None = None) -> None:
        try:
            import ray
        except ImportError as err:
            raise RlscopeError(INSTALL_HINT) from err
        self._ray = ray
        self.address = address
        self._connected = False  # by this executor: a Ray session the caller opened stays theirs

    def _connect(self) -> None:
        ray = self._ray
        if ray.is_initialized():
            return
        options: dict[str, Any] = {
            "address": self.address, "log_to_driver": False, "logging_level": logging.WARNING,
            "runtime_env": {"working_dir": os.getcwd(), "excludes": _NOT_SHIPPED},
        }
        if self.address is None:
            options["include_dashboard"] = False
        try:
            ray.init(**options)
            self._connected = True
        except ConnectionError as err:
            raise RlscopeError(f"no Ray cluster at --address {self.address}: start one (`ray start --head`) "
                               f"or leave --address out to start Ray on this machine ({err})") from err
        except ValueError as err:  # e.g. the working directory is too large to ship
            raise RlscopeError(f"Ray refused to start the sweep from {os.getcwd()}: {err}; run from the "
                               f"project root, the directory that holds the workloads") from err

    def run_all(self, runs: Sequence[Any], launcher: Any) -> Iterator[Any]:
        """Submit every run, then yield outcomes as tasks finish. Closing the generator (Ctrl-C)
        cancels the tasks still out; each kills its worker subprocess."""
        ray = self._ray
        self._connect()
        gpus = ray.cluster_resources().get("GPU", 0) > 0
        task = ray.remote(_execute_run)
        pending: dict[Any, tuple[Any, Path, float]] = {}
        try:
            for run in runs:
                run_dir, config = launcher.prepare(run)
                stages = _pack(run_dir / STAGES_DIR) if (run_dir / STAGES_DIR).is_dir() else b""
                ref = task.options(num_cpus=1, num_gpus=1 if needs_gpu(config["params"], gpus) else 0,
                                   max_retries=1, retry_exceptions=False,
                                   name=f"rlscope {config['experiment']}/{config['run_id']}").remote(config, stages)
                pending[ref] = (run, run_dir, time.perf_counter())
            while pending:
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                run, run_dir, submitted = pending.pop(ref)
                try:
                    reply = ray.get(ref)
                except ray.exceptions.RayTaskError as err:  # the task itself raised, on its node
                    yield launcher.lost(run, time.perf_counter() - submitted, f"the Ray task failed: {err}")
                    continue
                except ray.exceptions.RayError as err:
                    reason = f"its Ray worker or node died twice (Ray retries a run once): {type(err).__name__}"
                    yield launcher.lost(run, time.perf_counter() - submitted, reason)
                    continue
                _unpack(reply["files"], run_dir)
                yield launcher.settle(run, reply["returncode"], reply["seconds"])
        finally:
            self._cancel(list(pending))

    def _cancel(self, refs: list[Any]) -> None:
        """Cancel outstanding tasks and give them a moment to kill their workers. Ray going down with
        this process (Ctrl-C) may refuse: then the tasks end at their runs' timeouts, and a warning
        says how many."""
        if not refs:
            return
        ray = self._ray
        from ray.exceptions import RayError

        failed: list[str] = []
        try:  # only those still running: cancelling a task as it completes has tripped Ray's own checks
            _, refs = ray.wait(refs, num_returns=len(refs), timeout=0)
        except (RayError, RuntimeError, ValueError) as err:
            failed.append(f"wait: {err}")
        for ref in refs:
            try:
                ray.cancel(ref)
            except (RayError, RuntimeError, ValueError) as err:
                failed.append(f"cancel: {err}")
        try:
            ray.wait(refs, num_returns=len(refs), timeout=10)
        except (RayError, RuntimeError, ValueError) as err:
            failed.append(f"wait: {err}")
        if failed:
            warnings.warn(f"Ray did not confirm that {len(refs)} run task(s) stopped ({failed[0]}); a run still "
                          f"going ends at its timeout", RuntimeWarning, stacklevel=2)

    def close(self) -> None:
        """Disconnect from Ray if this executor connected (stopping it, if it started it)."""
        if self._connected and self._ray.is_initialized():
            self._ray.shutdown()
        self._connected = False
