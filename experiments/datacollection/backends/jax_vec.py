"""CartPole vectorised with JAX/XLA on the CPU or a CUDA device.

``simulate(K)`` and ``rollout(policy, K)`` are one jitted call each: ``lax.scan`` runs the K
steps inside XLA, so Python calls the backend once per K steps however large K is (paper
Figs. 5, 6, 8). Arrays meet PyTorch (the policy of the generic loop) by DLPack, without copies.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from experiments.datacollection.backends.base import CARTPOLE as P
from experiments.datacollection.backends.base import CartPoleBackend, Transition
from experiments.datacollection.backends.dynamics import cartpole_dynamics, slots_step, terminated_mask
from rlscope.errors import SkipRun

__all__ = ["JaxVectorized", "policy_params"]


def _jax() -> Any:
    # XLA would otherwise reserve 75% of GPU memory at start, starving the PyTorch policy.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
    except ImportError as err:
        raise SkipRun("needs JAX (pip install 'rlscope[jax]')") from err
    return jax


def policy_params(policy: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight, bias) of each Linear layer of the PyTorch MLP policy, as NumPy arrays."""
    from torch import nn

    return [(layer.weight.detach().cpu().numpy(), layer.bias.detach().cpu().numpy())
            for layer in policy if isinstance(layer, nn.Linear)]


def _mlp_actions(params: Any, obs: Any) -> Any:
    import jax.numpy as jnp

    h = obs
    for weight, bias in params[:-1]:
        h = jnp.tanh(h @ weight.T + bias)
    weight, bias = params[-1]
    return jnp.argmax(h @ weight.T + bias, axis=1)


class _Kernels:
    """The jitted functions of one (compute factor) configuration; state is a carry tuple
    (slots N x S x 4, elapsed N, episodes N, key)."""

    def __init__(self, compute_factor: int) -> None:
        jax = _jax()
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp
        self.compute_factor = compute_factor
        self.step = jax.jit(self._step)
        self.simulate = jax.jit(self._simulate, static_argnums=1)
        self.rollout = jax.jit(self._rollout, static_argnums=3)

    def _advance(self, mean: Any, push_right: Any) -> Any:
        jnp, c = self.jnp, self.compute_factor
        if c == 1:
            return cartpole_dynamics(mean, push_right, jnp)
        tau = P.tau / c
        return self.jax.lax.fori_loop(0, c, lambda _, m: cartpole_dynamics(m, push_right, jnp, tau), mean)

    def _step(self, carry: Any, push_right: Any) -> tuple[Any, Any]:
        jax, jnp = self.jax, self.jnp
        slots, elapsed, episodes, key = carry
        key, sub = jax.random.split(key)
        final, moved = slots_step(slots, lambda m: self._advance(m, push_right))
        terminated = terminated_mask(final)
        elapsed = elapsed + 1
        truncated = elapsed >= P.max_episode_steps
        done = terminated | truncated
        fresh = jax.random.uniform(sub, final.shape, final.dtype, -P.reset_bound, P.reset_bound)
        slots = jnp.where(done[:, None, None], fresh[:, None, :], moved)
        elapsed = jnp.where(done, 0, elapsed)
        obs = jnp.where(done[:, None], fresh, final)
        return (slots, elapsed, episodes + done, key), (obs, terminated, truncated, final)

    def _simulate(self, carry: Any, fused_steps: int) -> Any:
        jax = self.jax

        def body(carry: Any, _: Any) -> tuple[Any, None]:
            slots, elapsed, episodes, key = carry
            key, sub = jax.random.split(key)
            push_right = jax.random.bernoulli(sub, 0.5, elapsed.shape)
            return self._step((slots, elapsed, episodes, key), push_right)[0], None

        return jax.lax.scan(body, carry, None, length=fused_steps)[0]

    def _rollout(self, params: Any, carry: Any, obs: Any, fused_steps: int) -> tuple[Any, Any]:
        def body(state: Any, _: Any) -> tuple[Any, None]:
            carry, obs = state
            carry, (obs, *_) = self._step(carry, _mlp_actions(params, obs) == 1)
            return (carry, obs), None

        return self.jax.lax.scan(body, (carry, obs), None, length=fused_steps)[0]


@functools.cache
def _kernels(compute_factor: int) -> _Kernels:
    return _Kernels(compute_factor)


class JaxVectorized(CartPoleBackend):
    name = "jax"

    def __init__(self, num_envs: int, seed: int = 0, device: str = "cpu", state_factor: int = 1,
                 compute_factor: int = 1) -> None:
        super().__init__(num_envs, seed, device)
        jax = _jax()
        if state_factor < 1 or compute_factor < 1:
            raise ValueError("state_factor and compute_factor must be >= 1")
        platform = "gpu" if device.startswith("cuda") else "cpu"
        try:
            devices = jax.devices(platform)
        except RuntimeError as err:
            raise SkipRun(f"JAX has no {platform} device here ({err})") from err
        index = int(device.partition(":")[2] or 0)
        self.jax_device = devices[index]
        self.state_factor, self.compute_factor = int(state_factor), int(compute_factor)
        self.kernels = _kernels(self.compute_factor)
        self._params: tuple[int, Any] | None = None
        self.reset()

    def _put(self, value: Any) -> Any:
        return self.jax.device_put(value, self.jax_device)

    @property
    def jax(self) -> Any:
        return self.kernels.jax

    def reset(self, seed: int | None = None) -> Any:
        jax, jnp = self.jax, self.kernels.jnp
        key = self._put(jax.random.key(self.seed if seed is None else seed))
        key, sub = jax.random.split(key)
        n, s = self.num_envs, self.state_factor
        fresh = jax.random.uniform(sub, (n, 4), jnp.float32, -P.reset_bound, P.reset_bound)
        slots = jnp.broadcast_to(fresh[:, None, :], (n, s, 4))
        zeros = self._put(jnp.zeros(n, jnp.int32))
        self.carry = (slots, zeros, zeros, key)
        self._reward = self._put(jnp.ones(n, jnp.float32))
        return fresh

    def step(self, actions: Any) -> Transition:
        actions = self._put(self.kernels.jnp.asarray(actions))
        self.carry, (obs, terminated, truncated, final) = self.kernels.step(self.carry, actions == 1)
        return Transition(obs, self._reward, terminated, truncated, final)

    def simulate(self, fused_steps: int) -> None:
        self.carry = self.kernels.simulate(self.carry, int(fused_steps))

    def rollout(self, policy: Any, obs: Any, fused_steps: int) -> Any:
        if self._params is None or self._params[0] != id(policy):
            params = [(self._put(w), self._put(b)) for w, b in policy_params(policy)]
            self._params = (id(policy), params)
        if not isinstance(obs, self.jax.Array):
            obs = self._put(self.kernels.jnp.from_dlpack(obs))
        self.carry, obs = self.kernels.rollout(self._params[1], self.carry, obs, int(fused_steps))
        return obs

    def episodes_finished(self) -> int:
        return int(self.carry[2].sum())

    def set_state(self, state: np.ndarray, elapsed: np.ndarray) -> None:
        jnp = self.kernels.jnp
        values = jnp.asarray(np.asarray(state, dtype=np.float32))
        slots = self._put(jnp.broadcast_to(values[:, None, :], (self.num_envs, self.state_factor, 4)))
        self.carry = (slots, self._put(jnp.asarray(elapsed, jnp.int32)), *self.carry[2:])

    def to_policy(self, obs: Any) -> Any:
        import torch

        return torch.from_dlpack(obs)

    def from_policy(self, actions: Any) -> Any:
        # JAX keeps 32-bit integers (x64 off): cast on the policy's device, then share by DLPack.
        import torch

        return self.kernels.jnp.from_dlpack(actions.to(torch.int32).contiguous())

    def synchronize(self) -> None:
        self.jax.block_until_ready(self.carry)
