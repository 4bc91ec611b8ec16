"""N gymnasium ``CartPole-v1`` objects stepped one after another on one core (the status quo)."""

from __future__ import annotations

from typing import Any

import numpy as np

from experiments.datacollection.backends.base import CartPoleBackend, Transition

__all__ = ["GymnasiumLoop"]


class GymnasiumLoop(CartPoleBackend):
    name = "gymnasium"

    def __init__(self, num_envs: int, seed: int = 0, device: str = "cpu") -> None:
        super().__init__(num_envs, seed, device)
        import gymnasium as gym

        # The env checker only validates the first calls; the TimeLimit wrapper gives the 500-step limit.
        self.envs = [gym.make("CartPole-v1", disable_env_checker=True) for _ in range(num_envs)]
        self._reward = np.ones(num_envs, dtype=np.float32)

    def reset(self, seed: int | None = None) -> np.ndarray:
        seed = self.seed if seed is None else seed
        return np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)])

    def step(self, actions: Any) -> Transition:
        n = self.num_envs
        obs = np.empty((n, 4), dtype=np.float32)
        final = np.empty((n, 4), dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        for i, (env, action) in enumerate(zip(self.envs, np.asarray(actions).tolist())):
            o, _, term, trunc, _ = env.step(action)
            final[i] = o
            terminated[i] = term
            truncated[i] = trunc
            obs[i] = env.reset()[0] if term or trunc else o
        return Transition(obs, self._reward.copy(), terminated, truncated, final)

    def set_state(self, state: np.ndarray, elapsed: np.ndarray) -> None:
        for env, s, e in zip(self.envs, state, elapsed):
            core = env.unwrapped
            core.state = np.array(s, dtype=np.float64)
            core.steps_beyond_terminated = None
            env._elapsed_steps = int(e)  # the TimeLimit wrapper's counter
