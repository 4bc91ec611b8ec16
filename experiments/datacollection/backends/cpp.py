"""Multi-threaded C++ CartPole (``csrc/cpu``); Python reads its state arrays without copies."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from experiments.datacollection.backends.base import CartPoleBackend, Transition

__all__ = ["CppThreads"]


class CppThreads(CartPoleBackend):
    name = "cpp"

    def __init__(self, num_envs: int, seed: int = 0, device: str = "cpu", threads: int = 0,
                 dtype: str = "float32", min_envs_per_thread: int = 1024) -> None:
        super().__init__(num_envs, seed, device)
        from rlscope import _cartpole_cpu

        cls = {"float32": _cartpole_cpu.CartPoleF32, "float64": _cartpole_cpu.CartPoleF64}[dtype]
        self.threads = threads or os.cpu_count() or 1
        self.env = cls(num_envs, self.threads, seed, min_envs_per_thread)

    def reset(self, seed: int | None = None) -> np.ndarray:
        self.env.reset(self.seed if seed is None else seed)
        return self.env.state

    def step(self, actions: Any) -> Transition:
        self.env.step(np.ascontiguousarray(actions, dtype=np.int64))
        env = self.env
        return Transition(env.state, env.reward, env.terminated.view(bool), env.truncated.view(bool), env.final_state)

    def set_state(self, state: np.ndarray, elapsed: np.ndarray) -> None:
        self.env.state[:] = state
        self.env.elapsed[:] = elapsed
