"""Shared fixtures: the repository root as working directory, and GPU tests skipped without a GPU."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU; none is visible")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workloads are importable relative to the working directory, as when users run from the repo."""
    monkeypatch.chdir(REPO)


@pytest.fixture
def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}
