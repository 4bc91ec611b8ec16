"""Where and when a benchmark ran, for the JSON records its ``--json`` option writes: a results
page's tables are generated from these records (``bench/tables_profiler.py``), so each says which
machine, interpreter and commit gave its numbers.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["host", "gpu", "provenance", "write"]

_REPO = Path(__file__).resolve().parents[1]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _commit() -> str | None:
    """The checkout's commit, with ``+dirty`` where tracked files differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(_REPO), *args], capture_output=True, text=True, check=True).stdout

    try:
        commit = git("rev-parse", "--short", "HEAD").strip()
        return commit + ("+dirty" if git("status", "--porcelain", "--untracked-files=no").strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def host() -> dict[str, Any]:
    """This machine and checkout: CPU model, cores (and those this process may run on, which
    ``taskset`` narrows), Python, date (UTC) and commit."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "allowed_cores": allowed, "machine": platform.machine(),
            "python": platform.python_version(), "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
            "commit": _commit()}


def gpu() -> str:
    """The first GPU's name and the driver's version ("NAME, DRIVER", as NVML gives them), or
    "none" where NVML cannot be used (no driver, or nvidia-ml-py not installed)."""
    from rlscope.nvidia import NvmlUnavailable, gpu_names_and_driver

    try:
        names, driver = gpu_names_and_driver()
    except NvmlUnavailable:
        return "none"
    return f"{names[0]}, {driver}" if names else "none"


def write(path: Path, record: dict[str, Any]) -> None:
    """``record`` with :func:`host` under ``"host"``, as indented JSON at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"host": host(), **record}, indent=1) + "\n")


def provenance(script: str, args: list[str], tree: str | None) -> dict[str, Any]:
    """Where and with what a record was made: host, GPU, the command (``python bench/SCRIPT
    ARGS``) and the commit of the code that ran (``tree`` where the machine's git metadata lags, as
    a lent machine's does: it is sent a working tree). Asked once, before the timed runs."""
    machine = host()
    return {"host": machine, "gpu": gpu(), "tree": tree or machine["commit"],
            "command": " ".join([f"python bench/{script}", *args]), "environment": settings_in_environment()}


def settings_in_environment() -> dict[str, str]:
    """The environment variables that change what a bench measures: rlscope's own (RLSCOPE_*),
    which GPUs the runs see, and XLA's flags."""
    return {k: v for k, v in sorted(os.environ.items())
            if k.startswith("RLSCOPE_") or k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "XLA_FLAGS")}
