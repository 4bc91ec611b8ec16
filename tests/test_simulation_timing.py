"""Simulation timing leaves every JIT compilation out of the timed window, and says if one got in.

brax's step once returned weakly typed fields where reset returned strong ones, so the call after
the first compiled the whole scan again inside the timed window: 11 s per call for ant.
"""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from experiments.datacollection.simulate import time_simulation, xla_compilations  # noqa: E402
from experiments.datacollection.simulators import strongly_typed  # noqa: E402


class _TypesChangeAfterOneStep:
    """A state that starts strongly typed and comes back from a step weakly typed, as brax's did."""

    def __init__(self, strong_output: bool = False) -> None:
        self.state = jnp.zeros(8, jnp.float32)

        def run(state: jax.Array, fused_steps: int) -> jax.Array:
            out = jnp.where(state > -1.0, 1.0, 0.0) + 0 * fused_steps  # Python floats: a weak result
            return strongly_typed(out) if strong_output else out

        self._run = jax.jit(run, static_argnums=1)

    def simulate(self, fused_steps: int) -> None:
        self.state = self._run(self.state, fused_steps)

    def synchronize(self) -> None:
        jax.block_until_ready(self.state)


class _NewShapeEveryCall(_TypesChangeAfterOneStep):
    def simulate(self, fused_steps: int) -> None:
        self.state = self._run(jnp.zeros(self.state.shape[0] + 1, jnp.float32), fused_steps)


def test_a_state_whose_types_change_after_one_step_compiles_only_in_the_warm_up() -> None:
    env = _TypesChangeAfterOneStep()
    before = xla_compilations()
    timing = time_simulation(env, 3, min_seconds=0.01)
    assert timing.timed_compilations == 0
    assert xla_compilations() - before == 2  # once for the strong input, once for the weak one


def test_strongly_typed_output_compiles_once() -> None:
    env = _TypesChangeAfterOneStep(strong_output=True)
    before = xla_compilations()
    compiled_while_timed = time_simulation(env, 4, min_seconds=0.01).timed_compilations
    assert compiled_while_timed == 0
    assert xla_compilations() - before == 1
    assert not env.state.weak_type


def test_compilations_inside_the_timed_window_are_reported() -> None:
    timing = time_simulation(_NewShapeEveryCall(), 5, min_seconds=0.01)
    assert timing.timed_compilations >= timing.calls >= 1  # (making each new-shaped input compiles too)
