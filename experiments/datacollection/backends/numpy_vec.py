"""CartPole vectorised over an N x 4 float64 NumPy array (one core, no Python loop over envs)."""

from __future__ import annotations

from typing import Any

import numpy as np

from experiments.datacollection.backends.base import CARTPOLE as P
from experiments.datacollection.backends.base import CartPoleBackend, Transition
from experiments.datacollection.backends.dynamics import cartpole_dynamics, terminated_mask

__all__ = ["NumpyVectorized"]


class NumpyVectorized(CartPoleBackend):
    name = "numpy"

    def __init__(self, num_envs: int, seed: int = 0, device: str = "cpu") -> None:
        super().__init__(num_envs, seed, device)
        self.rng = np.random.default_rng(seed)
        self.state = np.zeros((num_envs, 4))
        self.elapsed = np.zeros(num_envs, dtype=np.int64)
        self._reward = np.ones(num_envs, dtype=np.float32)

    def reset(self, seed: int | None = None) -> np.ndarray:
        self.rng = np.random.default_rng(self.seed if seed is None else seed)
        self.state = self.rng.uniform(-P.reset_bound, P.reset_bound, size=(self.num_envs, 4))
        self.elapsed[:] = 0
        return self.state.astype(np.float32)

    def step(self, actions: Any) -> Transition:
        final = cartpole_dynamics(self.state, np.asarray(actions) == 1)
        terminated = terminated_mask(final)
        self.elapsed += 1
        truncated = self.elapsed >= P.max_episode_steps
        done = terminated | truncated
        state = final
        if done.any():
            state = final.copy()
            count = int(done.sum())
            state[done] = self.rng.uniform(-P.reset_bound, P.reset_bound, size=(count, 4))
            self.elapsed[done] = 0
        self.state = state
        return Transition(state.astype(np.float32), self._reward.copy(), terminated, truncated,
                          final.astype(np.float32))

    def set_state(self, state: np.ndarray, elapsed: np.ndarray) -> None:
        self.state = np.array(state, dtype=np.float64)
        self.elapsed = np.array(elapsed, dtype=np.int64)
