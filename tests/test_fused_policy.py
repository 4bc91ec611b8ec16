"""The fused data-collection kernel (simulation + MLP policy in one launch).

CPU: the kernel compiles for sm_90 with nvcc where the CUDA toolkit is, without register spills.
GPU: its argmax actions equal PyTorch's on the same weights and states (but for near-ties), its
trajectory equals the unfused CUDA simulator driven step by step by the torch policy, sampled
actions follow softmax(logits), and weights changed in place between launches change actions.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from experiments.datacollection.backends import make_backend
from experiments.datacollection.backends.cuda_fused_policy import FUSED_SOURCE
from experiments.datacollection.policy import make_policy
from tests.test_cartpole_dynamics import as_numpy, random_states

N = 4096
TIE = 1e-4  # |l1 - l0| below this is a near-tie: rounding may pick either action


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next((str(p) for p in sorted(Path("/usr/local").glob("cuda*/bin/nvcc"))), None)


@pytest.mark.skipif(_nvcc() is None, reason="needs nvcc (the CUDA toolkit)")
def test_both_fused_kernels_compile_for_hopper_without_spills(tmp_path: Path) -> None:
    unit = tmp_path / "instances.cu"
    unit.write_text(f'#include "{FUSED_SOURCE.name}"\n'
                    "void instantiate() {\n"
                    "  (void)&cartpole_policy_collect<1000, 0, false>;\n"
                    "  (void)&cartpole_policy_collect<128, 1, true>;\n"
                    "  (void)&cartpole_policy_collect_mma<1000, 0, false>;\n"
                    "  (void)&cartpole_policy_collect_mma<128, 1, true>;\n"
                    "}\n")
    done = subprocess.run([_nvcc(), "-std=c++17", "-arch=sm_90", f"-I{FUSED_SOURCE.parent}", "-cubin",
                           "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(unit)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill stores", done.stderr)]
    assert len(spills) >= 4 and not any(spills), done.stderr


def fused(sample: bool = False, record: bool = False, seed: int = 0, precision: str = "fp32", n: int = N):
    backend = make_backend("cuda_fused_policy", n, seed=seed, device="cuda", sample=sample, record=record,
                           precision=precision)
    backend.reset()
    return backend


def logits_of(policy, obs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return policy(torch.as_tensor(obs, dtype=torch.float32, device="cuda")).cpu().numpy()


@pytest.mark.gpu
def test_argmax_actions_equal_pytorch_on_the_same_states_but_for_near_ties() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    policy = make_policy(device="cuda", seed=3)
    backend = fused(record=True)
    states = random_states(np.random.default_rng(0), N).astype(np.float32)
    states[:, 0] = np.clip(states[:, 0], -2.3, 2.3)  # no termination needed here
    backend.set_state(states, np.zeros(N, dtype=np.int64))
    backend.rollout(policy, None, 1)
    backend.synchronize()
    recorded = as_numpy(backend.trajectory["obs"][0]).T
    np.testing.assert_array_equal(recorded, states)
    logits = logits_of(policy, states)
    expected = logits[:, 1] > logits[:, 0]
    actions = as_numpy(backend.trajectory["action"][0]).astype(bool)
    differ = actions != expected
    assert not np.any(differ & (np.abs(logits[:, 1] - logits[:, 0]) >= TIE))
    assert 0.05 < actions.mean() < 0.95, "the policy should pick both actions, or this test checks little"


@pytest.mark.gpu
def test_trajectory_equals_the_unfused_simulator_driven_by_the_torch_policy() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    policy = make_policy(device="cuda", seed=4)
    k = 64
    # Start states spread over the observation space: many episodes end within k steps, so the
    # same-step resets are compared too.
    states = random_states(np.random.default_rng(5), N).astype(np.float32)
    backend = fused(record=True, seed=7)
    backend.set_state(states, np.zeros(N, dtype=np.int64))
    backend.rollout(policy, None, k)
    backend.synchronize()
    reference = make_backend("cuda", N, seed=7, device="cuda")
    reference.reset()
    reference.set_state(states, np.zeros(N, dtype=np.int64))
    obs = reference.to_policy(reference.cp.asarray(states))
    agree = np.ones(N, dtype=bool)
    for step in range(k):
        recorded = as_numpy(backend.trajectory["obs"][step]).T
        current = as_numpy(obs)
        on_track = agree & np.all(recorded == current, axis=1)
        assert on_track.sum() >= agree.sum() - 2, f"step {step}: {agree.sum() - on_track.sum()} envs diverged"
        logits = logits_of(policy, current)
        actions = torch.as_tensor(logits[:, 1] > logits[:, 0], device="cuda").long()
        fused_actions = as_numpy(backend.trajectory["action"][step]).astype(bool)
        agree = on_track & (fused_actions == (logits[:, 1] > logits[:, 0]))
        t = reference.step(reference.from_policy(actions))
        done = as_numpy(t.terminated) | as_numpy(t.truncated)
        assert np.array_equal(as_numpy(backend.trajectory["done"][step]).astype(bool)[agree], done[agree])
        obs = t.obs
    assert agree.mean() > 0.999
    assert backend.episodes_finished() > N // 10, "many episodes should end in 64 steps, or resets go unchecked"
    assert backend.episodes_finished() == int(as_numpy(backend.trajectory["done"]).sum())


@pytest.mark.gpu
def test_sampled_actions_follow_the_softmax_of_the_logits() -> None:
    policy = make_policy(device="cuda", seed=5)
    backend = fused(sample=True, record=True)
    state = np.array([[0.01, 0.2, -0.03, 0.1]], dtype=np.float32)
    backend.set_state(np.repeat(state, N, axis=0), np.zeros(N, dtype=np.int64))
    backend.rollout(policy, None, 1)
    backend.synchronize()
    logits = logits_of(policy, state)[0]
    p_right = float(np.exp(logits[1]) / np.exp(logits).sum())
    share = as_numpy(backend.trajectory["action"][0]).mean()
    sigma = np.sqrt(p_right * (1 - p_right) / N)
    assert abs(share - p_right) < 5 * sigma, (share, p_right)


@pytest.mark.gpu
def test_weights_changed_in_place_between_launches_change_the_actions() -> None:
    policy = make_policy(device="cuda", seed=6)
    backend = fused(record=True)
    states = random_states(np.random.default_rng(1), N).astype(np.float32)
    backend.set_state(states, np.zeros(N, dtype=np.int64))
    backend.rollout(policy, None, 1)
    first = as_numpy(backend.trajectory["action"][0]).copy()
    with torch.no_grad():  # what an optimiser step does: the same tensors, new values
        policy[4].weight.neg_()
        policy[4].bias.neg_()
    backend.set_state(states, np.zeros(N, dtype=np.int64))
    backend.rollout(policy, None, 1)
    second = as_numpy(backend.trajectory["action"][0])
    logits = logits_of(policy, states)
    clear = np.abs(logits[:, 1] - logits[:, 0]) >= TIE
    assert np.array_equal(second[clear], 1 - first[clear])


FP16_MARGIN = 0.002  # |l1 - l0| (FP32) under which fp16 may pick the other action: 5x the largest seen (4e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [N, N + 5])  # a last tile of the fp16 kernel partly padding
def test_fp16_argmax_agrees_with_fp32_and_disagrees_only_near_ties(n: int) -> None:
    policy = make_policy(device="cuda", seed=8)
    states = random_states(np.random.default_rng(2), n).astype(np.float32)
    actions = {}
    for precision in ("fp32", "fp16"):
        backend = fused(record=True, precision=precision, n=n)
        backend.set_state(states, np.zeros(n, dtype=np.int64))
        backend.rollout(policy, None, 1)
        backend.synchronize()
        actions[precision] = as_numpy(backend.trajectory["action"][0])
        np.testing.assert_array_equal(as_numpy(backend.trajectory["obs"][0]).T, states)
    logits = logits_of(policy, states)
    differ = actions["fp32"] != actions["fp16"]
    assert differ.mean() <= 1e-3, differ.mean()
    assert np.all(np.abs(logits[differ, 1] - logits[differ, 0]) < FP16_MARGIN)


@pytest.mark.gpu
def test_fp16_kernel_steps_the_simulator_as_the_fp32_one_where_actions_agree() -> None:
    """In closed loop the policy keeps the pole near its decision boundary, where near-ties are
    common: an environment whose fp16 action once differs follows another trajectory from then
    on. Up to its first difference, every recorded value must be the fp32 kernel's."""
    policy = make_policy(device="cuda", seed=9)
    runs = {}
    for precision in ("fp32", "fp16"):
        backend = fused(record=True, precision=precision, seed=3)
        backend.rollout(policy, None, 32)
        backend.synchronize()
        runs[precision] = {k: as_numpy(v) for k, v in backend.trajectory.items() if k != "steps"}
    same_so_far = np.cumprod(runs["fp32"]["action"] == runs["fp16"]["action"], axis=0).astype(bool)
    assert same_so_far[-1].mean() > 0.9
    for key in ("obs", "done", "reward"):
        a, b = runs["fp32"][key], runs["fp16"][key]
        if key == "obs":
            mask = np.repeat(same_so_far[:, None, :], 4, axis=1)
        else:
            mask = same_so_far
        np.testing.assert_array_equal(a[mask], b[mask])
