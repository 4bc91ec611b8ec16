"""What machine and software a report's results came from: host, Python, GPU and driver, the
packages rlscope's workloads use, and the code's commit."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path

from rlscope._version import __version__
from rlscope.nvidia import NvmlUnavailable, gpu_names_and_driver

__all__ = ["environment", "PACKAGES"]

PACKAGES = ("torch", "jax", "jaxlib", "numpy", "gymnasium", "stable-baselines3", "sbx-rl", "mujoco", "ale-py",
            "cupy-cuda13x", "brax", "nvidia-ml-py")


def environment(repo: Path | None = None) -> dict[str, str]:
    """Name -> value, in the order a reader wants them: machine first, then software."""
    info = {"host": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
            "rlscope": __version__, "commit": _commit(repo), "GPU": _gpu()}
    for package in PACKAGES:
        try:
            info[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            info[package] = "not installed"
    return info


def _commit(repo: Path | None) -> str:
    """The checkout's commit (``repo``, default rlscope's own), marked where the tree differs from it."""
    where = repo or Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"unknown ({where} is not a git checkout)"
    return commit + (" + uncommitted changes" if dirty else "")


def _gpu() -> str:
    """Every visible GPU's name and the driver version, from NVML; why not, where it cannot say."""
    try:
        names, driver = gpu_names_and_driver()
    except NvmlUnavailable as why:
        return "unknown (nvidia-ml-py not installed)" if not why.installed else f"none visible ({why})"
    return f"{', '.join(names) or 'none'}; driver {driver}"
