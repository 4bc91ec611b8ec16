"""Simulation-only stepping, the state factor S and compute factor C, and DLPack hand-offs.

CPU backends run here; the CUDA kernels and CUDA-graph PyTorch run as ``gpu`` tests.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from experiments.datacollection.backends import make_backend
from experiments.datacollection.backends.base import CARTPOLE
from experiments.datacollection.backends.dynamics import substeps
from tests.test_cartpole_dynamics import as_numpy, random_states

N = 64
KNOB_BACKENDS = ["torch", "jax", pytest.param("cuda", marks=pytest.mark.gpu),
                 pytest.param("torch_graph", marks=pytest.mark.gpu)]
SIMULATE_BACKENDS = ["numpy", "cpp", *KNOB_BACKENDS]


def options(name: str, **extra) -> dict:
    return {"device": "cuda", **extra} if name in ("cuda", "torch_graph") else extra


def calm_states(rng: np.random.Generator) -> np.ndarray:
    """States well inside the thresholds, so no environment resets during the step."""
    return rng.uniform(-0.04, 0.04, size=(N, 4))


def one_step(name: str, states: np.ndarray, actions: np.ndarray, **knobs):
    backend = make_backend(name, N, seed=2, **options(name, **knobs))
    backend.reset()
    backend.set_state(states, np.zeros(N, dtype=np.int64))
    t = backend.step(backend.from_policy(torch.as_tensor(actions, device=options(name).get("device", "cpu"))))
    backend.synchronize()
    return backend, as_numpy(t.obs)


@pytest.mark.parametrize("name", KNOB_BACKENDS)
def test_compute_factor_integrates_c_substeps(name: str) -> None:
    rng = np.random.default_rng(1)
    states, actions = calm_states(rng), rng.integers(0, 2, N)
    _, obs = one_step(name, states, actions, compute_factor=4)
    expected = substeps(states, actions == 1, 4)
    np.testing.assert_allclose(obs, expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(expected, substeps(states, actions == 1, 1), rtol=1e-6, atol=1e-7), \
        "four sub-steps must differ from one step, or this test checks nothing"


@pytest.mark.parametrize("name", KNOB_BACKENDS)
def test_state_factor_with_equal_slots_is_cartpole(name: str) -> None:
    rng = np.random.default_rng(2)
    states, actions = calm_states(rng), rng.integers(0, 2, N)
    _, base = one_step(name, states, actions)
    _, wide = one_step(name, states, actions, state_factor=8)
    np.testing.assert_allclose(wide, base, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["torch", "jax"])
def test_state_factor_moves_every_slot_by_the_mean_increment(name: str) -> None:
    rng = np.random.default_rng(3)
    backend = make_backend(name, N, seed=2, state_factor=3)
    backend.reset()
    slots = rng.uniform(-0.03, 0.03, size=(N, 3, 4)).astype(np.float32)
    if name == "torch":
        backend.slots.copy_(torch.as_tensor(slots))
    else:
        import jax.numpy as jnp

        backend.carry = (jnp.asarray(slots), *backend.carry[1:])
    actions = rng.integers(0, 2, N)
    obs = as_numpy(backend.step(backend.from_policy(torch.as_tensor(actions))).obs)
    after = as_numpy(backend.slots) if name == "torch" else np.asarray(backend.carry[0])
    mean = slots.astype(np.float64).mean(1)
    np.testing.assert_allclose(obs, substeps(mean, actions == 1, 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(after - slots, np.broadcast_to((obs - mean)[:, None], slots.shape), atol=2e-6)


@pytest.mark.parametrize("name", SIMULATE_BACKENDS)
def test_simulate_runs_episodes_to_their_end(name: str) -> None:
    """600 random steps: every environment ends at least one episode (the 500-step limit)."""
    extra = {"threads": 2, "min_envs_per_thread": 8} if name == "cpp" else {}
    backend = make_backend(name, N, seed=4, **options(name, **extra))
    backend.reset()
    for _ in range(6):
        backend.simulate(100)
    backend.synchronize()
    # Random actions end an episode in ~20 steps, so far more than N episodes end.
    assert backend.episodes_finished() > 10 * N


@pytest.mark.gpu
def test_cuda_fused_steps_equal_unfused_launches() -> None:
    fused = make_backend("cuda", 4096, seed=6)
    unfused = make_backend("cuda", 4096, seed=6)
    fused.reset(), unfused.reset()
    fused.simulate(96)
    for _ in range(96):
        unfused.simulate(1)
    np.testing.assert_array_equal(as_numpy(fused.state), as_numpy(unfused.state))
    assert fused.episodes_finished() == unfused.episodes_finished() > 4096


@pytest.mark.gpu
@pytest.mark.parametrize("precise", [True, False])
def test_cuda_precision_modes_match_gymnasium(precise: bool) -> None:
    from tests.test_cartpole_dynamics import ATOL, RTOL, reference_step

    rng = np.random.default_rng(8)
    states, actions, elapsed = random_states(rng, N), rng.integers(0, 2, N), rng.integers(0, 499, N)
    backend = make_backend("cuda", N, seed=1, precise=precise)
    backend.reset()
    backend.set_state(states, elapsed)
    t = backend.step(backend.from_policy(torch.as_tensor(actions, device="cuda")))
    ref_obs, *_ = reference_step(states, actions, elapsed)
    scale = 1 if precise else 10  # the hardware sin/cos/divide are a few ulp looser
    np.testing.assert_allclose(as_numpy(t.final_obs), ref_obs, rtol=RTOL * scale, atol=ATOL * scale)


def test_jax_and_torch_share_memory_through_dlpack() -> None:
    backend = make_backend("jax", N, seed=0)
    obs = backend.reset()
    tensor = backend.to_policy(obs)
    assert tensor.data_ptr() == obs.unsafe_buffer_pointer()
    actions = torch.ones(N, dtype=torch.int32)  # JAX's own integer width: no cast, so no copy
    assert backend.from_policy(actions).unsafe_buffer_pointer() == actions.data_ptr()


@pytest.mark.gpu
def test_cuda_and_torch_share_memory_through_dlpack() -> None:
    backend = make_backend("cuda", N, seed=0)
    obs = backend.reset()
    assert backend.to_policy(obs).data_ptr() == obs.data.ptr
    actions = torch.ones(N, dtype=torch.int64, device="cuda")
    assert backend.from_policy(actions).data.ptr == actions.data_ptr()


@pytest.mark.gpu
def test_jax_on_gpu_shares_memory_with_torch() -> None:
    backend = make_backend("jax", N, seed=0, device="cuda")
    obs = backend.reset()
    tensor = backend.to_policy(obs)
    assert tensor.is_cuda and tensor.data_ptr() == obs.unsafe_buffer_pointer()


def test_rollout_in_one_call_matches_the_eager_loop_on_jax() -> None:
    """K steps in one lax.scan (policy + simulation) end where K eager steps end."""
    from experiments.datacollection.policy import make_policy

    policy = make_policy(16, "cpu", seed=0)
    fused, eager = make_backend("jax", N, seed=9), make_backend("jax", N, seed=9)
    states = calm_states(np.random.default_rng(9))
    for b in (fused, eager):
        b.set_state(states, np.zeros(N, dtype=np.int64))
    with torch.inference_mode():
        obs_fused = as_numpy(fused.rollout(policy, torch.as_tensor(states, dtype=torch.float32), 5))
        obs = torch.as_tensor(states, dtype=torch.float32)
        for _ in range(5):
            obs = eager.to_policy(eager.step(eager.from_policy(policy(obs).argmax(dim=1))).obs)
    np.testing.assert_allclose(obs_fused, obs.numpy(), rtol=1e-4, atol=1e-5)
    assert np.isfinite(obs_fused).all() and not np.allclose(obs_fused, states, atol=1e-3)


def test_knobs_are_validated() -> None:
    with pytest.raises(ValueError, match="state_factor"):
        make_backend("torch", 4, state_factor=0)
    assert CARTPOLE.max_episode_steps == 500


def test_simulator_complexity_reports_the_device_it_ran_on() -> None:
    from experiments.datacollection.simulate import simulator_complexity

    result = simulator_complexity(num_envs=8, state_factor=1, fused_steps="1,2", compute_factors="1",
                                  backend="jax", device="auto", min_seconds=0.0)
    assert result["device"] in ("cpu", "cuda")
    assert [row["fused_steps"] for row in result["rows"]] == [1, 2] and result["rows"][0]["fusion_speedup"] == 1.0
