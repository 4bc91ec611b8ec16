"""Data-collection workload: N CartPole envs stepped with an MLP policy choosing every action.

Throughput is ``num_envs * steps / seconds`` over the timed steps only, after ``warmup_steps``
untimed ones (at least one call; they include JIT / NVRTC compilation and CUDA-graph capture), with device work
finished before the clock stops. Reset steps are counted (same-step autoreset makes every
step produce one sample per environment). ``fused_steps`` = K hands K steps to the backend per
Python call where the backend can take them (JAX ``lax.scan``, a CUDA graph); elsewhere the K
steps are an eager loop. ``steps`` is rounded up to whole calls of K.

``policy_device`` moves only the policy: ``same`` keeps it on ``device`` (the paper's setting:
its gym and C++ loops hand their observations to the policy on the GPU); a CPU simulator
(gymnasium, NumPy, C++) can take another one (``cpu``, a variant that shows whether the policy's
place matters), a GPU simulator cannot, since its observations stay on its own device.
"""

from __future__ import annotations

import os
import time
from typing import Any

__all__ = ["data_collection", "backend_options", "CPU_SIMULATORS"]

CPU_SIMULATORS = ("gymnasium", "numpy", "cpp")  # they step on the CPU whatever the policy's device


def backend_options(backend: str, device: str, threads: int = 0, **knobs: Any) -> dict[str, Any]:
    """Constructor options for ``backend``: the device, the C++ thread count, the S/C knobs."""
    options: dict[str, Any] = {"device": device}
    if backend == "cpp":
        options["threads"] = threads
    options.update({k: v for k, v in knobs.items() if v is not None})
    return options


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
    fused_steps: int = 1,
    precision: str = "",
    record: bool = False,
    policy_device: str = "same",
) -> dict[str, Any]:
    """Run ``steps`` timed steps of policy inference + simulation; return throughput and counts.

    ``precision`` and ``record`` are the fused policy kernel's (``cuda_fused_policy``): fp32 or
    fp16, and whether every step's (obs, action, reward, done) is stored (K rows per call)."""
    import torch

    from experiments.datacollection.backends import make_backend
    from experiments.devices import resolve_device
    from experiments.datacollection.policy import make_policy

    if torch_threads:
        torch.set_num_threads(torch_threads)
    steps = -(-steps // fused_steps) * fused_steps  # whole calls of K steps: round up
    device = resolve_device(device)
    if policy_device != "same":
        if backend not in CPU_SIMULATORS:
            raise ValueError(f"policy_device={policy_device!r} needs a CPU simulator ({', '.join(CPU_SIMULATORS)}); "
                             f"{backend} keeps its observations on {device}: use policy_device=same")
        device = resolve_device(policy_device)  # a CPU simulator's `device` is only where its policy runs
    knobs = {"precision": precision or "fp32", "record": record} if backend == "cuda_fused_policy" else {}
    if backend != "cuda_fused_policy" and (precision or record):
        raise ValueError(f"precision and record are options of cuda_fused_policy, not of {backend}")
    env = make_backend(backend, num_envs, seed, **backend_options(backend, device, threads, **knobs))
    policy = make_policy(hidden, device, seed)

    obs = env.reset()
    with torch.inference_mode():
        for _ in range(max(1, warmup_steps // fused_steps)):  # at least one call: compiles for K
            obs = env.rollout(policy, obs, fused_steps)
        env.synchronize()
        started = time.perf_counter()
        for _ in range(steps // fused_steps):
            obs = env.rollout(policy, obs, fused_steps)
        env.synchronize()
        seconds = time.perf_counter() - started
    return {
        "samples_per_s": num_envs * steps / seconds,
        "seconds": seconds,
        "samples": num_envs * steps,
        "device": device,
        "threads": getattr(env, "threads", 1),
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
    }
