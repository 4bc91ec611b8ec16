"""Every CartPole backend reproduces gymnasium CartPole-v1, compared one step at a time.

Each step starts all backends from the same state (re-synced to the reference), so float32
backends are held to one step's rounding, not to a diverged trajectory.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from experiments.datacollection.backends import NAMES, backend_class, make_backend
from experiments.datacollection.backends.base import CARTPOLE

N = 64
RTOL, ATOL = 1e-5, 1e-6
BAND = 1e-5  # done flags may differ only this close to a threshold (float32 rounding)
GPU_ONLY = {"cuda", "cuda_fused_policy", "torch_graph"}
# Every backend; those that need a GPU run as `gpu` tests (on the device, skipped in CI).
ALL = [pytest.param(name, marks=pytest.mark.gpu) if name in GPU_ONLY else name for name in NAMES]


def backend_options(name: str) -> dict:
    if name == "cpp":
        return {"threads": 2, "min_envs_per_thread": 8}
    return {"device": "cuda"} if name in GPU_ONLY else {}


def device_of(name: str) -> str:
    """Where the backend's policy actions live (the GPU-only backends take them on the GPU)."""
    return backend_options(name).get("device", "cpu")


def as_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.cpu().numpy()
    return x.get() if hasattr(x, "get") else np.asarray(x)  # CuPy arrays copy to the host with get()


def reference_step(states: np.ndarray, actions: np.ndarray, elapsed: np.ndarray):
    env = gym.make("CartPole-v1", disable_env_checker=True)
    env.reset(seed=0)
    out = []
    for s, a, e in zip(states, actions, elapsed):
        env.unwrapped.state = s.copy()
        env.unwrapped.steps_beyond_terminated = None
        env._elapsed_steps = int(e)
        obs, reward, term, trunc, _ = env.step(int(a))
        out.append((obs, reward, term, trunc))
    obs, reward, term, trunc = map(np.array, zip(*out))
    return obs, reward, term, trunc


def random_states(rng: np.random.Generator, n: int) -> np.ndarray:
    """States spread over and just beyond the termination region, so both outcomes occur."""
    high = np.array([2.6, 3.0, 0.25, 3.0])
    return rng.uniform(-high, high, size=(n, 4))


def near_threshold(obs: np.ndarray) -> np.ndarray:
    return (np.abs(np.abs(obs[:, 0]) - CARTPOLE.x_threshold) < BAND) | (
        np.abs(np.abs(obs[:, 2]) - CARTPOLE.theta_threshold) < BAND)


@pytest.mark.parametrize("name", ALL)
def test_one_step_matches_gymnasium_over_random_states(name: str) -> None:
    rng = np.random.default_rng(7)
    backend = make_backend(name, N, seed=1, **backend_options(name))
    backend.reset()
    for _ in range(10):
        states = random_states(rng, N)
        actions = rng.integers(0, 2, N)
        elapsed = rng.integers(0, 499, N)
        backend.set_state(states, elapsed)
        t = backend.step(backend.from_policy(torch.as_tensor(actions, device=device_of(name))))
        ref_obs, ref_reward, ref_term, ref_trunc = reference_step(states, actions, elapsed)
        np.testing.assert_allclose(as_numpy(t.final_obs), ref_obs, rtol=RTOL, atol=ATOL)
        np.testing.assert_array_equal(as_numpy(t.reward), ref_reward)
        agree = (as_numpy(t.terminated) == ref_term) | near_threshold(ref_obs)
        assert agree.all(), f"{name}: terminated differs away from the thresholds"
        np.testing.assert_array_equal(as_numpy(t.truncated), ref_trunc)
        assert ref_term.any() and not ref_term.all(), "the sample should cover both outcomes"


@pytest.mark.parametrize("name", ALL)
def test_done_envs_reset_in_the_same_step(name: str) -> None:
    backend = make_backend(name, N, seed=3, **backend_options(name))
    backend.reset()
    states = np.zeros((N, 4))
    states[: N // 2, 0] = 2.399  # pushed right past x = 2.4 by their velocity
    states[: N // 2, 1] = 1.0
    elapsed = np.zeros(N, dtype=np.int64)
    elapsed[-4:] = 499  # the 500th step truncates
    backend.set_state(states, elapsed)
    t = backend.step(backend.from_policy(torch.ones(N, dtype=torch.int64, device=device_of(name))))
    term, trunc = as_numpy(t.terminated), as_numpy(t.truncated)
    obs, final = as_numpy(t.obs), as_numpy(t.final_obs)
    assert term[: N // 2].all() and not term[N // 2:].any()
    assert trunc[-4:].all() and not trunc[:-4].any()
    done = term | trunc
    assert (np.abs(obs[done]) <= CARTPOLE.reset_bound).all(), "done rows hold a fresh reset state"
    assert (final[: N // 2, 0] > CARTPOLE.x_threshold).all(), "final_obs keeps the terminal observation"
    np.testing.assert_allclose(obs[~done], final[~done])


@pytest.mark.parametrize("name", ALL)
def test_reset_is_uniform_in_bounds_and_seeded(name: str) -> None:
    a = as_numpy(make_backend(name, N, seed=5, **backend_options(name)).reset())
    b = as_numpy(make_backend(name, N, seed=5, **backend_options(name)).reset())
    assert a.shape == (N, 4) and (np.abs(a) <= CARTPOLE.reset_bound).all()
    assert a.std() > 0.01
    np.testing.assert_array_equal(a, b)


def test_cpp_results_do_not_depend_on_thread_count() -> None:
    runs = []
    for threads in (1, 2):
        backend = make_backend("cpp", 4096, seed=9, threads=threads, min_envs_per_thread=64)
        backend.reset()
        for step in range(300):
            t = backend.step(np.full(4096, step % 2, dtype=np.int64))
        runs.append(as_numpy(t.obs).copy())
    np.testing.assert_array_equal(runs[0], runs[1])


def test_cpp_state_is_shared_without_copies() -> None:
    backend = make_backend("cpp", 8, seed=0)
    obs = backend.reset()
    t = backend.step(np.zeros(8, dtype=np.int64))
    assert np.shares_memory(t.obs, backend.env.state) and np.shares_memory(obs, t.obs)


def test_unknown_backend_lists_known_ones() -> None:
    known = "cpp, cuda, cuda_fused_policy, gymnasium, jax, numpy, torch, torch_graph"
    with pytest.raises(ValueError, match=f"known: {known}"):
        make_backend("nope", 1)


@pytest.mark.gpu
def test_torch_backend_on_cuda_matches_gymnasium() -> None:
    rng = np.random.default_rng(11)
    backend = make_backend("torch", N, seed=1, device="cuda")
    backend.reset()
    states, actions, elapsed = random_states(rng, N), rng.integers(0, 2, N), rng.integers(0, 499, N)
    backend.set_state(states, elapsed)
    t = backend.step(torch.as_tensor(actions, device="cuda"))
    backend.synchronize()
    ref_obs, _, ref_term, ref_trunc = reference_step(states, actions, elapsed)
    assert t.final_obs.is_cuda
    np.testing.assert_allclose(as_numpy(t.final_obs), ref_obs, rtol=RTOL, atol=ATOL)
    assert ((as_numpy(t.terminated) == ref_term) | near_threshold(ref_obs)).all()
    np.testing.assert_array_equal(as_numpy(t.truncated), ref_trunc)


@pytest.mark.parametrize("name", NAMES)
def test_the_registry_names_each_backend_as_the_backend_names_itself(name):
    assert backend_class(name).name == name


def test_an_unknown_backend_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown CartPole backend 'mujoco'; known: cpp, cuda, "):
        make_backend("mujoco", 4)
