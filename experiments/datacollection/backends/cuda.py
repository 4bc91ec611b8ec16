"""CartPole as hand-written CUDA kernels (``csrc/cuda/cartpole.cu``), compiled at run time by
NVRTC through CuPy, one thread per environment.

``simulate(K)`` runs K steps in one kernel launch (K = 1 is the unfused baseline); ``step``
takes the policy's actions for the data-collection loop. Arrays meet PyTorch by DLPack: the
observation handed to the policy and the actions handed back share memory with the kernels'
buffers, no copies.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from experiments.datacollection.backends.base import CartPoleBackend, Transition
from rlscope.errors import SkipRun

__all__ = ["CudaKernels", "KERNEL_SOURCE", "compile_kernel", "cupy_or_skip"]

KERNEL_SOURCE = Path(__file__).resolve().parents[3] / "csrc" / "cuda" / "cartpole.cu"
_BLOCK = 256


def cupy_or_skip() -> Any:
    try:
        import cupy
    except ImportError as err:
        raise SkipRun("needs CuPy (pip install cupy-cuda13x) and a CUDA GPU") from err
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise SkipRun("needs a CUDA GPU; none is visible on this machine")
    except cupy.cuda.runtime.CUDARuntimeError as err:
        raise SkipRun(f"needs a CUDA GPU; CUDA reports: {err}") from err
    return cupy


@functools.cache
def _module(source: Path, expressions: tuple[str, ...], sources_mtime_ns: int) -> Any:
    cupy = cupy_or_skip()
    module = cupy.RawModule(code=source.read_text(), options=("-std=c++17", f"-I{source.parent}"),
                            name_expressions=list(expressions))
    module.compile()
    return module


def compile_kernel(expression: str, source: Path = KERNEL_SOURCE) -> Any:
    """The kernel named by a template instance such as ``cartpole_simulate<1000,1,1,true>`` in
    ``source`` (a file of csrc/cuda/, which may include the others); compiled once per process
    and per change of any of those files. CuPy also caches the binary on disk."""
    mtime = max(path.stat().st_mtime_ns for path in source.parent.glob("*.cu"))
    return _module(source, (expression,), mtime).get_function(expression)


class CudaKernels(CartPoleBackend):
    """State lives in CuPy arrays laid out slot-major (S x 4 x N) for coalesced access."""

    name = "cuda"

    def __init__(self, num_envs: int, seed: int = 0, device: str = "cuda", state_factor: int = 1,
                 compute_factor: int = 1, precise: bool = True) -> None:
        if not device.startswith("cuda"):
            raise SkipRun("the CUDA kernels run on a CUDA GPU only")
        super().__init__(num_envs, seed, device)
        cp = self.cp = cupy_or_skip()
        self.state_factor, self.compute_factor = int(state_factor), int(compute_factor)
        if self.state_factor < 1 or self.compute_factor < 1:
            raise ValueError("state_factor and compute_factor must be >= 1")
        self.precise = "true" if precise else "false"
        n = num_envs
        self.state = cp.zeros((self.state_factor, 4, n), dtype=cp.float32)
        self.elapsed = cp.zeros(n, dtype=cp.int32)
        self.rng = cp.zeros(2 * n, dtype=cp.uint32)  # generator state, unused action bits
        self.episodes = cp.zeros(n, dtype=cp.int32)
        self.obs = cp.zeros((n, 4), dtype=cp.float32)
        self.final_obs = cp.zeros((n, 4), dtype=cp.float32)
        self.terminated = cp.zeros(n, dtype=cp.bool_)
        self.truncated = cp.zeros(n, dtype=cp.bool_)
        self.reward = cp.ones(n, dtype=cp.float32)
        self._grid = ((n + _BLOCK - 1) // _BLOCK,)
        self._n = np.int64(n)
        self._kernels: dict[tuple[str, Path], Any] = {}

    def _launch(self, expression: str, *args: Any, source: Path = KERNEL_SOURCE, threads: int | None = None) -> None:
        """Launch with one thread per environment, or ``threads`` in all (blocks of 256). The
        kernel is looked up once per backend: a launch is on the K = 1 loops' hot path, where
        compile_kernel's look at the sources' modification times would cost as much as a step."""
        kernel = self._kernels.get((expression, source))
        if kernel is None:
            kernel = self._kernels[expression, source] = compile_kernel(expression, source)
        grid = self._grid if threads is None else ((threads + _BLOCK - 1) // _BLOCK,)
        kernel(grid, (_BLOCK,), (*args, self._n))

    def reset(self, seed: int | None = None) -> Any:
        seed = self.seed if seed is None else seed
        self._launch(f"cartpole_reset<{self.state_factor}>", self.state, self.elapsed, self.rng, np.uint64(seed))
        self.episodes.fill(0)
        self.obs[...] = self.state.mean(axis=0).T
        return self.obs

    def step(self, actions: Any) -> Transition:
        actions = self.cp.asarray(actions, dtype=self.cp.int64)
        self._launch(f"cartpole_step<{self.state_factor},{self.compute_factor},{self.precise}>", self.state,
                     self.elapsed, self.rng, actions, self.obs, self.final_obs, self.terminated, self.truncated)
        return Transition(self.obs, self.reward, self.terminated, self.truncated, self.final_obs)

    def simulate(self, fused_steps: int) -> None:
        self._launch(f"cartpole_simulate<{int(fused_steps)},{self.state_factor},{self.compute_factor},"
                     f"{self.precise}>", self.state, self.elapsed, self.rng, self.episodes)

    def episodes_finished(self) -> int:
        return int(self.episodes.sum())

    def set_state(self, state: np.ndarray, elapsed: np.ndarray) -> None:
        cp = self.cp
        slots = cp.asarray(np.asarray(state, dtype=np.float32).T)  # 4 x N, every slot the same
        self.state[...] = slots[None]
        self.elapsed[...] = cp.asarray(elapsed, dtype=cp.int32)

    def to_policy(self, obs: Any) -> Any:
        import torch

        return torch.from_dlpack(obs)

    def from_policy(self, actions: Any) -> Any:
        return self.cp.from_dlpack(actions.contiguous())

    def synchronize(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()
