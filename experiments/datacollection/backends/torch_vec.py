"""CartPole vectorised with PyTorch operators on the CPU or a CUDA device (eager execution)."""

from __future__ import annotations

from typing import Any

import numpy as np

from experiments.datacollection.backends.base import CARTPOLE as P
from experiments.datacollection.backends.base import CartPoleBackend, Transition, register
from experiments.datacollection.backends.numpy_vec import cartpole_dynamics, terminated_mask

__all__ = ["TorchVectorized"]


@register
class TorchVectorized(CartPoleBackend):
    """State is an N x 4 float32 tensor; resets are branch-free (``torch.where``), so no host sync."""

    name = "torch"

    def __init__(self, num_envs: int, seed: int = 0, device: str = "cpu", dtype: str = "float32") -> None:
        super().__init__(num_envs, seed, device)
        import torch

        self.torch = torch
        self.dtype = getattr(torch, dtype)
        self.generator = torch.Generator(device=device)
        self.state = torch.zeros((num_envs, 4), dtype=self.dtype, device=device)
        self.elapsed = torch.zeros(num_envs, dtype=torch.int32, device=device)
        self._fresh = torch.empty_like(self.state)
        self._reward = torch.ones(num_envs, dtype=torch.float32, device=device)

    def _uniform(self, out: Any) -> Any:
        return out.uniform_(-P.reset_bound, P.reset_bound, generator=self.generator)

    def reset(self, seed: int | None = None) -> Any:
        self.generator.manual_seed(self.seed if seed is None else seed)
        self._uniform(self.state)
        self.elapsed.zero_()
        return self.state.float()

    def step(self, actions: Any) -> Transition:
        torch = self.torch
        final = cartpole_dynamics(self.state, actions == 1, xp=torch)
        terminated = terminated_mask(final)
        self.elapsed += 1
        truncated = self.elapsed >= P.max_episode_steps
        done = terminated | truncated
        self.state = torch.where(done[:, None], self._uniform(self._fresh), final)
        self.elapsed = torch.where(done, torch.zeros_like(self.elapsed), self.elapsed)
        return Transition(self.state.float(), self._reward, terminated, truncated, final.float())

    def set_state(self, state: np.ndarray, elapsed: np.ndarray) -> None:
        self.state = self.torch.as_tensor(state, dtype=self.dtype, device=self.device).contiguous()
        self.elapsed = self.torch.as_tensor(elapsed, dtype=self.torch.int32, device=self.device).contiguous()

    def to_policy(self, obs: Any) -> Any:
        return obs

    def from_policy(self, actions: Any) -> Any:
        return actions

    def synchronize(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize(self.device)
