"""CartPole vectorised with PyTorch operators on the CPU or a CUDA device (eager execution)."""

from __future__ import annotations

from typing import Any

import numpy as np

from experiments.datacollection.backends.base import CARTPOLE as P
from experiments.datacollection.backends.base import CartPoleBackend, Transition
from experiments.datacollection.backends.dynamics import slots_step, substeps, terminated_mask

__all__ = ["TorchVectorized"]


class TorchVectorized(CartPoleBackend):
    """State is an N x S x 4 tensor (S = state factor, 1 for CartPole) updated in place, so a
    captured CUDA graph (``torch_graph``) can replay the same code; resets are branch-free
    (``torch.where``), so no step waits for the device."""

    name = "torch"

    def __init__(self, num_envs: int, seed: int = 0, device: str = "cpu", dtype: str = "float32",
                 state_factor: int = 1, compute_factor: int = 1) -> None:
        super().__init__(num_envs, seed, device)
        import torch

        if state_factor < 1 or compute_factor < 1:
            raise ValueError("state_factor and compute_factor must be >= 1")
        self.torch = torch
        self.dtype = getattr(torch, dtype)
        self.state_factor, self.compute_factor = int(state_factor), int(compute_factor)
        self.generator = self._make_generator()
        self.slots = torch.zeros((num_envs, self.state_factor, 4), dtype=self.dtype, device=device)
        self.elapsed = torch.zeros(num_envs, dtype=torch.int32, device=device)
        self.episodes = torch.zeros(num_envs, dtype=torch.int32, device=device)
        self._reward = torch.ones(num_envs, dtype=torch.float32, device=device)

    def _make_generator(self) -> Any:
        return self.torch.Generator(device=self.device)

    def _seed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def _fresh(self) -> Any:
        fresh = self.torch.empty((self.num_envs, 4), dtype=self.dtype, device=self.device)
        return fresh.uniform_(-P.reset_bound, P.reset_bound, generator=self.generator)

    def reset(self, seed: int | None = None) -> Any:
        self._seed(self.seed if seed is None else seed)
        self.slots.copy_(self._fresh()[:, None, :].expand_as(self.slots))
        self.elapsed.zero_()
        self.episodes.zero_()
        return self.slots[:, 0].float()

    def _advance(self, push_right: Any) -> tuple[Any, Any, Any, Any]:
        """One step in place; returns (obs after autoreset, terminated, truncated, final obs)."""
        torch = self.torch
        final, moved = slots_step(self.slots, lambda m: substeps(m, push_right, self.compute_factor, torch))
        terminated = terminated_mask(final)
        self.elapsed += 1
        truncated = self.elapsed >= P.max_episode_steps
        done = terminated | truncated
        fresh = self._fresh()
        self.slots.copy_(torch.where(done[:, None, None], fresh[:, None, :], moved))
        self.elapsed.masked_fill_(done, 0)
        self.episodes += done
        return torch.where(done[:, None], fresh, final), terminated, truncated, final

    def step(self, actions: Any) -> Transition:
        obs, terminated, truncated, final = self._advance(actions == 1)
        return Transition(obs.float(), self._reward, terminated, truncated, final.float())

    def simulate(self, fused_steps: int) -> None:
        for _ in range(fused_steps):
            push_right = self.torch.randint(0, 2, (self.num_envs,), device=self.device, generator=self.generator)
            self._advance(push_right.bool())

    def episodes_finished(self) -> int:
        return int(self.episodes.sum())

    def set_state(self, state: np.ndarray, elapsed: np.ndarray) -> None:
        values = self.torch.as_tensor(state, dtype=self.dtype, device=self.device)
        self.slots.copy_(values[:, None, :].expand_as(self.slots))
        self.elapsed.copy_(self.torch.as_tensor(elapsed, dtype=self.torch.int32, device=self.device))

    def to_policy(self, obs: Any) -> Any:
        return obs

    def from_policy(self, actions: Any) -> Any:
        return actions

    def synchronize(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize(self.device)
