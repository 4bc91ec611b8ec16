"""The jitted PPO's environments (``experiments.casestudies.jitted_ppo``), as pure batched JAX
functions it can scan inside its one ``jax.jit``: our CartPole (discrete actions) and any brax
environment (continuous actions in [-1, 1]).

Both reset a finished environment inside ``step`` (CartPole after 500 steps at the latest, as
gymnasium's CartPole-v1; brax after its default 1,000), and both end a cut-off episode as a
terminal one, so the PPO does not bootstrap it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from experiments.datacollection.backends.base import CARTPOLE as P
from experiments.datacollection.backends.dynamics import cartpole_dynamics, terminated_mask

__all__ = ["JaxEnv", "make_env", "CARTPOLE"]

CARTPOLE = "cartpole"


@dataclass(frozen=True)
class JaxEnv:
    """A batch of ``envs`` environments. ``reset(key)`` -> state; ``observe(state)`` -> obs of
    shape (envs, obs_size); ``step(state, action, key)`` -> (state, reward, done), where ``action``
    is an int per environment if ``discrete`` (``action_size`` choices) or ``action_size`` floats."""

    name: str
    envs: int
    obs_size: int
    action_size: int
    discrete: bool
    reset: Callable[[Any], Any]
    observe: Callable[[Any], Any]
    step: Callable[[Any, Any, Any], tuple[Any, Any, Any]]


def _cartpole(envs: int) -> JaxEnv:
    import jax
    import jax.numpy as jnp

    def fresh(key: Any) -> Any:
        return jax.random.uniform(key, (envs, 4), minval=-P.reset_bound, maxval=P.reset_bound)

    def reset(key: Any) -> Any:
        return fresh(key), jnp.zeros(envs, jnp.int32)

    def step(state: Any, action: Any, key: Any) -> tuple[Any, Any, Any]:
        physics, elapsed = state
        moved = cartpole_dynamics(physics, action == 1, jnp)
        elapsed = elapsed + 1
        done = terminated_mask(moved) | (elapsed >= P.max_episode_steps)
        physics = jnp.where(done[:, None], fresh(key), moved)
        return (physics, jnp.where(done, 0, elapsed)), jnp.ones(envs), done

    return JaxEnv(CARTPOLE, envs, 4, 2, True, reset, lambda state: state[0], step)


def _brax(name: str, envs: int, backend: str) -> JaxEnv:
    import jax
    import jax.numpy as jnp

    from experiments.datacollection.simulators import brax_env, strongly_typed

    env = brax_env(name, envs, backend)

    def step(state: Any, action: Any, key: Any) -> tuple[Any, Any, Any]:
        # brax's step returns some fields weakly typed where reset returns them strong: a scan's
        # carry must keep its types (strongly_typed says more).
        state = strongly_typed(env.step(state, jnp.clip(action, -1.0, 1.0)))
        return state, state.reward, state.done.astype(bool)

    # Traced, not run: brax's observation_size resets the environment eagerly, one small compile per
    # operation (1,061 for ant on MJX, 50 s of a CPU's set-up, minutes on a GPU).
    obs_size = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs.shape[-1]
    return JaxEnv(name, envs, obs_size, env.action_size, False,
                  lambda key: strongly_typed(env.reset(key)), lambda state: state.obs, step)


def make_env(name: str, envs: int, brax_backend: str = "mjx") -> JaxEnv:
    """``cartpole`` (ours), or a brax environment's name (``ant``, ``inverted_pendulum``, ...) on
    ``brax_backend``; SkipRun without brax, ValueError for an unknown name."""
    return _cartpole(envs) if name == CARTPOLE else _brax(name, envs, brax_backend)
