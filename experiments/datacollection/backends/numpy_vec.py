"""CartPole vectorised over an N x 4 float64 NumPy array (one core, no Python loop over envs)."""

from __future__ import annotations

from typing import Any

import numpy as np

from experiments.datacollection.backends.base import CARTPOLE as P
from experiments.datacollection.backends.base import CartPoleBackend, Transition, register

__all__ = ["NumpyVectorized", "cartpole_dynamics"]


def cartpole_dynamics(state: Any, push_right: Any, xp: Any = np) -> Any:
    """One explicit-Euler step of gymnasium's CartPole for N states; ``xp`` is numpy or torch."""
    x, x_dot, theta, theta_dot = state[:, 0], state[:, 1], state[:, 2], state[:, 3]
    force = xp.where(push_right, P.force_mag, -P.force_mag)
    costheta = xp.cos(theta)
    sintheta = xp.sin(theta)
    temp = (force + P.polemass_length * theta_dot * theta_dot * sintheta) / P.total_mass
    thetaacc = (P.gravity * sintheta - costheta * temp) / (
        P.length * (4.0 / 3.0 - P.masspole * costheta * costheta / P.total_mass)
    )
    xacc = temp - P.polemass_length * thetaacc * costheta / P.total_mass
    return xp.stack(
        (x + P.tau * x_dot, x_dot + P.tau * xacc, theta + P.tau * theta_dot, theta_dot + P.tau * thetaacc), 1
    )


def terminated_mask(state: Any) -> Any:
    """Strict thresholds on position and angle, as gymnasium."""
    x, theta = state[:, 0], state[:, 2]
    return (x < -P.x_threshold) | (x > P.x_threshold) | (theta < -P.theta_threshold) | (theta > P.theta_threshold)


@register
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
