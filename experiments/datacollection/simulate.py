"""Simulation-only workloads (random actions, no policy): the kernel-fusion and simulator-
complexity studies of the paper's section 4 (Figs. 8 and 9).

Throughput is ``num_envs * K * calls / seconds``: one call of ``simulate(K)`` advances every
environment K steps; calls repeat until ``min_seconds`` have passed, after untimed calls that
compile (JIT, NVRTC, graph capture), with the device drained before the clock stops. Reset steps
are counted. XLA compilations inside the timed window are counted and reported: a non-zero count
means the number measures the compiler, not the simulator.
"""

from __future__ import annotations

import sys
import time
from typing import Any, NamedTuple

__all__ = ["simulation", "simulator_complexity", "time_simulation", "SimulationTiming", "xla_compilations"]

_WARMUP_CALLS = 3  # at most: JAX compiles again when a step's output types differ from its input's
_compilations = 0
_listening = False


def _on_jax_event(name: str, _seconds: float, **_: Any) -> None:
    global _compilations
    if name == "/jax/core/compile/backend_compile_duration":
        _compilations += 1


def xla_compilations() -> int:
    """XLA compilations in this process since this was first called (0 while JAX is not imported:
    then nothing can compile)."""
    global _listening
    if "jax" not in sys.modules:
        return 0
    if not _listening:
        from jax import monitoring

        monitoring.register_event_duration_secs_listener(_on_jax_event)
        _listening = True
    return _compilations


class SimulationTiming(NamedTuple):
    seconds: float
    calls: int
    timed_compilations: int  # XLA compilations inside the timed window; 0 for a valid number


def time_simulation(env: Any, fused_steps: int, min_seconds: float) -> SimulationTiming:
    """Seconds and calls of ``env.simulate(fused_steps)`` repeated for at least ``min_seconds``.

    Warm-up calls repeat until one compiles nothing: a JAX state whose types change after the
    first step (brax's weakly typed rewards) compiles twice, and a single warm-up call would leave
    the second compilation in the timed window. The device is drained only at doubling
    checkpoints (1, 2, 4, ... calls), so waiting for it does not dominate short calls."""
    for _ in range(_WARMUP_CALLS):
        before = xla_compilations()
        env.simulate(fused_steps)
        env.synchronize()
        if xla_compilations() == before:
            break
    compiled = xla_compilations()
    calls, checkpoint = 0, 1
    started = time.perf_counter()
    while True:
        env.simulate(fused_steps)
        calls += 1
        if calls == checkpoint:
            env.synchronize()
            seconds = time.perf_counter() - started
            if seconds >= min_seconds:
                return SimulationTiming(seconds, calls, xla_compilations() - compiled)
            checkpoint *= 2


def simulation(backend: str, num_envs: int, fused_steps: int = 1, state_factor: int = 1,
               compute_factor: int = 1, device: str = "auto", min_seconds: float = 0.5,
               precise: bool = True, seed: int = 0) -> dict[str, Any]:
    """Steps/s of ``backend`` simulating N envs, K steps per call, at state/compute factors S, C."""
    from experiments.datacollection.backends import make_backend
    from experiments.datacollection.collect import backend_options
    from experiments.devices import resolve_device

    device = resolve_device(device)
    knobs: dict[str, Any] = {}
    if (state_factor, compute_factor) != (1, 1):
        knobs = {"state_factor": state_factor, "compute_factor": compute_factor}
    if backend == "cuda":
        knobs["precise"] = precise
    env = make_backend(backend, num_envs, seed, **backend_options(backend, device, **knobs))
    env.reset()
    seconds, calls, compilations = time_simulation(env, fused_steps, min_seconds)
    steps = num_envs * fused_steps * calls
    return {"steps_per_s": steps / seconds, "seconds": seconds, "calls": calls, "env_steps": steps,
            "device": device, "timed_compilations": compilations}


def simulator_complexity(num_envs: int, state_factor: int, fused_steps: list[int] | str,
                         compute_factors: list[int] | str, backend: str = "cuda", device: str = "auto",
                         min_seconds: float = 0.2, seed: int = 0) -> dict[str, Any]:
    """Fig. 9 for one (N, S): steps/s for every K x C, and the fusion speedup over K = 1.

    One process measures the whole K x C sub-grid so the per-process start-up (imports, CUDA
    context) is paid once; returns one row per (K, C)."""
    ks, cs = _ints(fused_steps), _ints(compute_factors)
    rows = []
    for c in cs:
        base = None
        for k in sorted(ks):
            result = simulation(backend, num_envs, k, state_factor, c, device, min_seconds, seed=seed)
            base = result["steps_per_s"] if k == 1 else base
            rows.append({"fused_steps": k, "compute_factor": c, "steps_per_s": result["steps_per_s"],
                         "fusion_speedup": result["steps_per_s"] / base if base else float("nan"),
                         "seconds": result["seconds"]})
            device = result["device"]  # where it ran ("auto" resolved), as the figure names it
    return {"rows": rows, "device": device}


def _ints(values: list[int] | str) -> list[int]:
    """Manifest parameters are scalars, so lists arrive as "1,10,100" text."""
    if isinstance(values, str):
        return [int(v) for v in values.split(",") if v.strip()]
    return [int(v) for v in values]
