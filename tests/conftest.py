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


@pytest.fixture(autouse=True, scope="session")
def _sb3_logs_in_the_session_s_directory(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Stable-Baselines3 makes a log folder for every model it trains (the system's temporary
    directory, ``SB3-<time>``, unless SB3_LOGDIR says where): the tests' and their workloads' go
    under pytest's own temporary directory, removed with it, not left in /tmp."""
    os.environ.setdefault("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3-logs")))


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workloads are importable relative to the working directory, as when users run from the repo."""
    monkeypatch.chdir(REPO)


@pytest.fixture(autouse=True)
def _no_profiler_left_behind():
    """No session, profile function or sys.monitoring tool may survive a test."""
    import sys

    import rlscope.api

    yield
    leaks = []
    if rlscope.api._bound is not None or rlscope.api._session is not None:
        leaks.append("an rlscope session is still active")
        rlscope.api._bind(None)
    if sys.getprofile() is not None:
        leaks.append("a profile function is still installed")
        sys.setprofile(None)
    if hasattr(sys, "monitoring") and sys.monitoring.get_tool(sys.monitoring.PROFILER_ID) is not None:
        leaks.append("sys.monitoring's profiler slot is still held")
        sys.monitoring.free_tool_id(sys.monitoring.PROFILER_ID)
    assert not leaks, "; ".join(leaks)


@pytest.fixture
def cli_env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


@pytest.fixture(scope="session")
def ppo_step() -> str:
    """A PureJaxRL-like step compiled on the CPU (its optimised HLO text): a scanned rollout
    (inference, env), GAE, and a gradient update (tests/test_hlo_scopes.py, test_jax_scopes.py)."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def step(params, obs):
        def body(o, _):
            with jax.named_scope("rollout"):
                with jax.named_scope("inference"):
                    a = jnp.tanh(o @ params)
                with jax.named_scope("env"):
                    o = o + 0.1 * jnp.sin(a)
            return o, a.sum()

        o, rewards = jax.lax.scan(body, obs, None, length=4)
        with jax.named_scope("gae"):
            adv = jnp.cumsum(rewards[::-1])[::-1]
        with jax.named_scope("update"):
            grad = jax.grad(lambda p: jnp.sum(jnp.tanh(o @ p) ** 2) * adv.sum())(params)
        return params - 0.01 * grad

    return jax.jit(step).lower(jnp.ones((8, 8)), jnp.ones((16, 8))).compile().as_text()
