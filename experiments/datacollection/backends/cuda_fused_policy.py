"""Data collection in one kernel (``csrc/cuda/cartpole_policy.cu``): K steps of policy inference,
action choice, CartPole step and recording per launch.

``precision="fp32"``: one thread per environment, FP32 throughout (actions equal PyTorch's but
for near-ties). ``precision="fp16"``: a warp per 16 environments, all three layers on tensor
cores (fp16 operands; fp32 accumulation but in the five-term input layer), tanh in fp16
(`tanh.approx.f16x2`).

The simulator is the ``cuda`` backend's (same state, same reset generator, same physics), so
``step`` and ``simulate`` are inherited; ``rollout`` is the fused loop. The policy's weights are
read from the torch module's own parameters through DLPack at every launch: no copies, and a
learner's in-place update is seen by the next launch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from experiments.datacollection.backends.cuda import KERNEL_SOURCE, CudaKernels

__all__ = ["CudaFusedPolicy", "FUSED_SOURCE", "PRECISIONS"]

FUSED_SOURCE: Path = KERNEL_SOURCE.with_name("cartpole_policy.cu")
PRECISIONS = ("fp32", "fp16")
_ENVS_PER_WARP = 16  # the fp16 kernel's tile
_SHAPES = [(64, 4), (64,), (64, 64), (64,), (2, 64), (2,)]  # torch Linear: weight[out][in], bias[out]


class CudaFusedPolicy(CudaKernels):
    """``rollout(policy, obs, K)`` is one launch; ``sample`` picks sampled instead of argmax
    actions; ``record`` keeps every step's (obs, action, reward, done) in ``trajectory``."""

    name = "cuda_fused_policy"

    def __init__(self, num_envs: int, seed: int = 0, device: str = "cuda", sample: bool = False,
                 record: bool = False, precision: str = "fp32", **options: Any) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r}: use one of {', '.join(PRECISIONS)}")
        super().__init__(num_envs, seed, device, **options)
        self.precision = precision
        if self.state_factor != 1 or self.compute_factor != 1 or self.precise != "true":
            raise ValueError("the fused policy kernel runs CartPole itself (state and compute factor 1, precise)")
        cp = self.cp
        self.sample, self.record = bool(sample), bool(record)
        self.sample_rng = cp.zeros(num_envs, dtype=cp.uint32)
        self.episode_steps = cp.zeros(num_envs, dtype=cp.int64)
        self.trajectory: dict[str, Any] = {}
        self._none = cp.zeros(1, dtype=cp.uint8)  # stands for the trajectory arrays when not recording
        self._weight_key: tuple[int, ...] | None = None
        self._weight_views: list[Any] = []

    def reset(self, seed: int | None = None) -> Any:
        obs = super().reset(seed)
        seed = self.seed if seed is None else seed
        # A hash of (seed, index), never zero (xorshift would stay at zero); wraps modulo 2^64 on the device.
        index = self.cp.arange(self.num_envs, dtype=self.cp.uint64)
        offset = np.uint64((seed + 1) * 0xBF58476D1CE4E5B9 % 2**64)
        mixed = index * np.uint64(0x9E3779B97F4A7C15) + offset
        self.sample_rng[...] = ((mixed >> np.uint64(29)) | np.uint64(1)).astype(self.cp.uint32)
        self.episode_steps.fill(0)
        return obs

    def _weights(self, policy: Any) -> list[Any]:
        """CuPy views of the policy's parameters, made again only when a parameter's storage
        changes: the views alias it (and keep it alive, so its address is not reused), and
        in-place updates need no new ones."""
        import torch

        params = [p.detach() for p in policy.parameters()]
        key = tuple(p.data_ptr() for p in params)
        if key == self._weight_key:
            return self._weight_views
        shapes = [tuple(p.shape) for p in params]
        if shapes != _SHAPES or any(p.dtype != torch.float32 for p in params):
            raise ValueError(f"the fused kernel runs the 4-64-64-2 float32 MLP of make_policy(); got shapes {shapes}")
        if any(p.device.type != "cuda" for p in params):
            raise ValueError("the policy must be on the GPU for the fused kernel (make_policy(device='cuda'))")
        self._weight_views = [self.cp.from_dlpack(p.contiguous()) for p in params]
        # A non-contiguous parameter is copied: its copy must be made again at every launch.
        self._weight_key = key if all(p.is_contiguous() for p in params) else None
        return self._weight_views

    def _trajectory(self, fused_steps: int) -> list[Any]:
        if not self.record:
            return [self._none] * 4
        n, cp = self.num_envs, self.cp
        if self.trajectory.get("steps") != fused_steps:
            self.trajectory = {"steps": fused_steps, "obs": cp.zeros((fused_steps, 4, n), dtype=cp.float32),
                               "action": cp.zeros((fused_steps, n), dtype=cp.uint8),
                               "reward": cp.zeros((fused_steps, n), dtype=cp.float32),
                               "done": cp.zeros((fused_steps, n), dtype=cp.uint8)}
        return [self.trajectory[k] for k in ("obs", "action", "reward", "done")]

    def rollout(self, policy: Any, obs: Any, fused_steps: int) -> Any:
        self.collect(self._weights(policy), fused_steps)
        return self.to_policy(self.obs)

    def collect(self, weights: list[Any], fused_steps: int) -> None:
        """``fused_steps`` steps in one launch with the policy's CuPy ``weights`` in torch's
        layout (weight[out][in], bias[out], contiguous float32: ``_SHAPES``); the observations
        after them in ``obs``, the steps in ``trajectory`` when recording."""
        kernel = "cartpole_policy_collect" if self.precision == "fp32" else "cartpole_policy_collect_mma"
        threads = None if self.precision == "fp32" else 32 * -(-self.num_envs // _ENVS_PER_WARP)
        self._launch(f"{kernel}<{int(fused_steps)},{int(self.record)},{'true' if self.sample else 'false'}>",
                     self.state[0], self.elapsed, self.rng, self.sample_rng,
                     *weights, self.episodes, self.episode_steps, self.obs,
                     *self._trajectory(fused_steps), source=FUSED_SOURCE, threads=threads)
