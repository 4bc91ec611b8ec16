"""Data-collection workload: N CartPole envs stepped with an MLP policy choosing every action.

Throughput is ``num_envs * steps / seconds`` over the timed steps only, after ``warmup_steps``
untimed ones, with device work finished before the clock stops. Reset steps are counted (same-
step autoreset makes every step produce one sample per environment).
"""

from __future__ import annotations

import os
import time
from typing import Any

from rlscope.errors import SkipRun

__all__ = ["data_collection", "resolve_device"]


def resolve_device(device: str) -> str:
    """``auto`` picks CUDA when present; asking for CUDA without it skips the run with the reason."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SkipRun("needs a CUDA GPU; none is visible on this machine")
    return device


def data_collection(
    backend: str,
    num_envs: int,
    steps: int = 64,
    warmup_steps: int = 4,
    device: str = "cpu",
    threads: int = 0,
    hidden: int = 64,
    seed: int = 0,
    torch_threads: int = 0,
) -> dict[str, Any]:
    """Run ``steps`` timed steps of policy inference + simulation; return throughput and counts."""
    import torch

    from experiments.datacollection.backends import make_backend
    from experiments.datacollection.policy import make_policy

    if torch_threads:
        torch.set_num_threads(torch_threads)
    device = resolve_device(device)
    options: dict[str, Any] = {"device": device}
    if backend == "cpp":
        options["threads"] = threads
    env = make_backend(backend, num_envs, seed, **options)
    policy = make_policy(hidden, device, seed)

    episodes = 0
    obs = env.reset()
    with torch.inference_mode():
        for step in range(warmup_steps + steps):
            if step == warmup_steps:
                env.synchronize()
                started = time.perf_counter()
                episodes = 0
            actions = policy(env.to_policy(obs)).argmax(dim=1)
            transition = env.step(env.from_policy(actions))
            obs = transition.obs
            episodes += transition.terminated
        env.synchronize()
        seconds = time.perf_counter() - started
    finished = int(episodes.sum())
    return {
        "samples_per_s": num_envs * steps / seconds,
        "seconds": seconds,
        "samples": num_envs * steps,
        "episodes_finished": finished,
        "device": device,
        "threads": getattr(env, "threads", 1),
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
    }
