"""Simulators on XLA side by side (paper Fig. 2): CartPole (our JAX backend) next to brax's
physics environments, K steps per jitted call with random actions, simulation only.

brax is optional: without it (``pip install brax``) its environments are recorded as skipped.
"""

from __future__ import annotations

from typing import Any

from rlscope.errors import SkipRun

__all__ = ["xla_simulation", "brax_env", "strongly_typed"]


def brax_env(name: str, num_envs: int, backend: str) -> Any:
    """brax's ``name`` on ``backend`` (a pipeline: mjx, generalized, positional, spring), batched
    over ``num_envs`` and resetting each environment when it is done (after brax's default 1,000
    steps at the latest); SkipRun without brax, ValueError for an unknown name."""
    try:
        from brax import envs
    except ImportError as err:
        raise SkipRun(f"needs brax (pip install brax): {err}") from err
    try:
        return envs.create(name, batch_size=num_envs, auto_reset=True, backend=backend)
    except KeyError as err:
        raise ValueError(f"unknown brax environment {name!r}; known: {', '.join(sorted(envs._envs))}") from err


def strongly_typed(tree: Any) -> Any:
    """``tree`` with JAX's weak types made strong, dtypes unchanged.

    brax's step returns some float32 fields (``done``, contact and survival rewards) weakly typed
    where reset returns them strong; jit keys its cache on weak types, so the call after the first
    compiled the whole scan again (11 s for ant, the whole of the slow numbers once measured)."""
    import jax

    return jax.tree.map(lambda leaf: leaf.astype(leaf.dtype), tree)


class _BraxSimulator:
    """``simulate(K)``/``synchronize()`` over a batched brax env, so it times like our backends."""

    def __init__(self, name: str, num_envs: int, seed: int, backend: str) -> None:
        import jax

        self.jax = jax
        env = brax_env(name, num_envs, backend)
        self.state = jax.jit(env.reset)(jax.random.key(seed))
        self.key = jax.random.key(seed + 1)

        def run(state: Any, key: Any, fused_steps: int) -> tuple[Any, Any]:
            def body(carry: Any, _: Any) -> tuple[Any, None]:
                state, key = carry
                key, sub = jax.random.split(key)
                action = jax.random.uniform(sub, (num_envs, env.action_size), minval=-1.0, maxval=1.0)
                return (env.step(state, action), key), None

            state, key = jax.lax.scan(body, (state, key), None, length=fused_steps)[0]
            return strongly_typed(state), key

        self._run = jax.jit(run, static_argnums=2)

    def simulate(self, fused_steps: int) -> None:
        self.state, self.key = self._run(self.state, self.key, fused_steps)

    def synchronize(self) -> None:
        self.jax.block_until_ready(self.state)


def xla_simulation(environment: str, num_envs: int, fused_steps: int = 10, device: str = "auto",
                   min_seconds: float = 0.5, brax_backend: str = "mjx", seed: int = 0) -> dict[str, Any]:
    """Env-steps/s of ``environment`` (``cartpole`` or a brax name) on JAX, K steps per call."""
    from experiments.datacollection.backends import make_backend
    from experiments.devices import resolve_device
    from experiments.datacollection.simulate import time_simulation

    device = resolve_device(device)
    if environment == "cartpole":
        env = make_backend("jax", num_envs, seed, device=device)
        env.reset()
    else:
        if not device.startswith("cuda"):
            raise SkipRun("brax environments are measured on a GPU only (CPU runs take hours)")
        env = _BraxSimulator(environment, num_envs, seed, brax_backend)
    seconds, calls, compilations = time_simulation(env, fused_steps, min_seconds)
    return {"steps_per_s": num_envs * fused_steps * calls / seconds, "seconds": seconds, "calls": calls,
            "device": device, "brax_backend": brax_backend if environment != "cartpole" else "",
            "timed_compilations": compilations}
