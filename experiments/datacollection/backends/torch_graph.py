"""PyTorch CartPole with K steps captured once in a CUDA graph and replayed with one call.

This is today's PyTorch answer to the eager-vs-XLA gap the paper measured: the Python loop and
per-operator dispatch run once, at capture; each ``simulate(K)`` or ``rollout(policy, K)``
afterwards is one ``graph.replay()``. The kernels are the eager backend's own (no fusion), so
the GPU work per step is unchanged.
"""

from __future__ import annotations

from typing import Any

from experiments.datacollection.backends.torch_vec import TorchVectorized
from rlscope.errors import SkipRun

__all__ = ["TorchCudaGraph"]

_WARMUP_REPLAYS = 3  # eager runs on a side stream before capture, as torch.cuda.graphs advises


class TorchCudaGraph(TorchVectorized):
    """Random numbers come from the device's default generator, which graph replay advances."""

    name = "torch_graph"

    def __init__(self, num_envs: int, seed: int = 0, device: str = "cuda", **options: Any) -> None:
        if not device.startswith("cuda"):
            raise SkipRun("CUDA graphs need a CUDA GPU")
        super().__init__(num_envs, seed, device, **options)
        self._graphs: dict[tuple[str, int], tuple[Any, Any]] = {}

    def _make_generator(self) -> Any:
        return None  # the default CUDA generator is the one graph capture knows how to replay

    def _seed(self, seed: int) -> None:
        with self.torch.cuda.device(self.device):
            self.torch.cuda.manual_seed(seed)

    def _capture(self, key: tuple[str, int], body: Any) -> tuple[Any, Any]:
        if key not in self._graphs:
            torch = self.torch
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(_WARMUP_REPLAYS):
                    body()
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: another library's runtime thread (JAX's, in a process that runs both)
            # calling the CUDA API during the capture must not invalidate it.
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                out = body()
            self._graphs[key] = (graph, out)
        return self._graphs[key]

    def simulate(self, fused_steps: int) -> None:
        graph, _ = self._capture(("simulate", fused_steps), lambda: TorchVectorized.simulate(self, fused_steps))
        graph.replay()

    def rollout(self, policy: Any, obs: Any, fused_steps: int) -> Any:
        if not hasattr(self, "_obs_in"):
            self._obs_in = obs.clone()
        self._obs_in.copy_(obs)

        def body() -> Any:
            current = self._obs_in
            for _ in range(fused_steps):
                actions = policy(current).argmax(dim=1)
                current = self._advance(actions == 1)[0].float()
            return current

        graph, out = self._capture(("rollout", fused_steps), body)
        graph.replay()
        return out
