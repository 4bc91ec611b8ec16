"""The interface every CartPole backend implements, and the registry.

Semantics are gymnasium ``CartPole-v1`` (see DESIGN.md, "CartPole reference semantics"), with
one autoreset mode for all backends: *same-step*. When an environment terminates or reaches
the 500-step limit, ``step`` returns the reset observation in ``obs`` and keeps the pre-reset
observation in ``final_obs``, as SB3's VecEnv and gymnax do.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, NamedTuple

import numpy as np

__all__ = ["CartPoleBackend", "Transition", "CARTPOLE"]


class _CartPoleConstants(NamedTuple):
    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5  # half the pole's length
    force_mag: float = 10.0
    tau: float = 0.02
    theta_threshold: float = 12 * 2 * np.pi / 360
    x_threshold: float = 2.4
    max_episode_steps: int = 500
    reset_bound: float = 0.05

    @property
    def total_mass(self) -> float:
        return self.masspole + self.masscart

    @property
    def polemass_length(self) -> float:
        return self.masspole * self.length


CARTPOLE = _CartPoleConstants()


class Transition(NamedTuple):
    """What one step of N environments returns; arrays are the backend's own kind (NumPy or torch)."""

    obs: Any  # N x 4, after same-step autoreset
    reward: Any  # N
    terminated: Any  # N, bool
    truncated: Any  # N, bool (the 500-step limit; may coincide with terminated, as in gymnasium)
    final_obs: Any  # N x 4, the observation before any reset


class CartPoleBackend(abc.ABC):
    """N CartPole environments stepped together.

    Subclasses implement the dynamics; the data-collection loop only uses ``reset``, ``step``,
    ``to_policy`` and ``from_policy``, so a backend decides how its arrays meet the policy.
    """

    name: ClassVar[str]

    def __init__(self, num_envs: int, seed: int = 0, device: str = "cpu") -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.num_envs = num_envs
        self.seed = seed
        self.device = device
        self._action_rng = np.random.default_rng(seed)  # random actions of the default simulate()
        self._episodes = 0  # episodes the default simulate() saw end

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> Any:
        """Reset every environment; return the N x 4 observation."""

    @abc.abstractmethod
    def step(self, actions: Any) -> Transition:
        """Advance every environment one step with ``actions`` (N ints, 1 pushes right)."""

    @abc.abstractmethod
    def set_state(self, state: np.ndarray, elapsed: np.ndarray) -> None:
        """Overwrite the physical state (N x 4, float64) and episode lengths, to check or re-sync dynamics."""

    def to_policy(self, obs: Any) -> Any:
        """The observation as a float32 torch tensor on the policy's device."""
        import torch

        return torch.from_numpy(np.ascontiguousarray(obs, dtype=np.float32)).to(self.device, non_blocking=True)

    def from_policy(self, actions: Any) -> Any:
        """Policy actions (a torch tensor) in the form ``step`` takes."""
        return actions.cpu().numpy()

    def synchronize(self) -> None:
        """Wait for queued device work, so a timer that stops next measures completed steps."""

    def rollout(self, policy: Any, obs: Any, fused_steps: int) -> Any:
        """Collect ``fused_steps`` steps with ``policy`` choosing every action; return the last obs.

        This default is the eager loop (one round of Python->backend calls per step); backends
        that can hand the whole loop to the backend in one call (JAX ``lax.scan``, a captured
        CUDA graph) override it, which is what the K-step amortisation figures measure.
        """
        for _ in range(fused_steps):
            actions = policy(self.to_policy(obs)).argmax(dim=1)
            obs = self.step(self.from_policy(actions)).obs
        return obs

    def simulate(self, fused_steps: int) -> None:
        """Advance ``fused_steps`` steps with uniformly random actions (simulation only).

        The default steps from Python; backends that fuse or batch the K steps override it
        (and ``episodes_finished`` with it).
        """
        for _ in range(fused_steps):
            done = self.step(self._action_rng.integers(0, 2, self.num_envs))
            self._episodes += int(np.count_nonzero(np.asarray(done.terminated) | np.asarray(done.truncated)))

    def episodes_finished(self) -> int:
        """Episodes that ended during ``simulate`` since the backend was made."""
        return self._episodes
