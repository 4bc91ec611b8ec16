"""The case study "end-to-end jitted training": PPO with CartPole's hyperparameters in four
execution models, to a fixed number of environment steps, on our CartPole (and, whole-step jitted,
on a brax environment).

- ``jax_jit``: PPO compiled whole (``experiments.casestudies.jitted_ppo``: PureJaxRL-style, the
  rollout on the JAX CartPole, GAE and the updates in one ``jax.jit`` call per iteration),
  profiled with ``--jax-scopes`` so that its GPU time splits into rollout/inference,
  rollout/env, gae and update;
- ``jax_fused``: the same PPO with its rollout in the fused CUDA simulator+policy kernel
  (``experiments.casestudies.fused_rollout``: one launch per iteration, the policy read from
  JAX's parameters and the steps handed back through DLPack) and its learning in one
  ``jax.jit``; CartPole on a GPU only. The kernel's launch is the ``rollout`` operation inside
  ``train_step``: its kernel time is in the jax_scopes rows as that operation's, unmatched to
  any XLA module;
- ``sb3``: Stable-Baselines3's PPO (PyTorch eager) on gymnasium's CartPole-v1;
- ``sbx``: SBX's PPO (JAX, each update jitted; acting and the environment in Python).

The manifest's workload (``configs/jitted_training.yaml``). Each run trains once without the
profiler (``uninstrumented_learn_s``, the wall time to ``timesteps`` steps, compilation included,
and ``env_steps_per_s`` from it) and once under ``rlscope prof``; its rows are the breakdown
and transitions of the training (``experiments.casestudies.profiled.training_rows``) and, for
``jax_jit`` and ``jax_fused``, one row per scope of the jitted step (``table: jax_scopes``: its kernel seconds and
share of the step's kernel time, and how its kernels were matched). Not corrected for profiling
overhead: the calibrations are made for rl-zoo3's hyperparameters, not these.
"""

from __future__ import annotations

import importlib.util
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

from experiments.casestudies.jitted_envs import CARTPOLE
from rlscope.errors import SkipRun

__all__ = ["jitted_training", "check_params", "FRAMEWORKS", "ENVS", "ROLLOUT_STEPS"]

FRAMEWORKS = {"jax_jit": "JAX, the whole iteration in one jax.jit",
              "jax_fused": "JAX, the learning jitted, the rollout in the fused CUDA simulator+policy kernel",
              "sb3": "PyTorch eager (SB3)", "sbx": "JAX, updates jitted (SBX)"}
ROLLOUT = {"jax_jit": "scan", "jax_fused": "fused"}  # the jitted PPO's --rollout per framework
ENVS = 8  # parallel environments, as PureJaxRL's and CleanRL's CartPole runs use (4 there; 8 here, one per core)
ROLLOUT_STEPS = 128  # steps per environment per iteration, the same in every framework


def check_params(name: str, value: Any) -> str | None:
    """Manifest check (``rlscope.harness.manifest``): an unknown framework."""
    if name == "framework" and isinstance(value, str) and value not in FRAMEWORKS:
        return f"unknown framework {value!r}; known: {', '.join(FRAMEWORKS)}"
    return None


def _jitted_command(framework: str, timesteps: int, device: str, environment: str, brax_backend: str) -> list[str]:
    return [sys.executable, "-m", "experiments.casestudies.jitted_ppo", "--envs", str(ENVS), "--steps",
            str(ROLLOUT_STEPS), "--timesteps", str(timesteps), "--device", device, "--env", environment,
            "--brax-backend", brax_backend, "--rollout", ROLLOUT[framework]]


def _scope_rows(scopes: Any) -> list[dict[str, Any]]:
    """One row per (operation, scope) of the jitted step's kernel time; a row without a single
    scope (unmatched, ambiguous, library, across scopes) names its largest kernels."""
    rows = []
    for (operation, scope), group in scopes.groupby(["operation", "scope"], sort=False):
        rows.append({"table": "jax_scopes", "operation": operation, "scope": scope,
                     "seconds": float(group["duration_ns"].sum()) / 1e9, "share": float(group["share"].sum()),
                     "kernels": int(group["kernels"].sum()), "match": ",".join(sorted(set(group["match"]))),
                     "kernel_names": "; ".join(name for name in group["kernel_names"] if name)})
    return rows


def _jitted(framework: str, timesteps: int, device: str, environment: str, brax_backend: str, baseline: bool,
            timeout_s: float) -> dict[str, Any]:
    from experiments.casestudies.profiled import timed_runs, training_rows
    from rlscope.analyze import analyze_trace

    with tempfile.TemporaryDirectory(prefix="rlscope-jitted-") as tmp:
        command = _jitted_command(framework, timesteps, device, environment, brax_backend)
        trace, timings = timed_runs(command, Path(tmp), device, baseline, timeout_s, jax_scopes="default")
        tables = analyze_trace(trace)
    result = training_rows(tables["breakdown"], tables["transitions"])
    result["rows"] += _scope_rows(tables["jax_scopes"])
    return {**result, **timings}


def jitted_training(framework: str, timesteps: int, device: str = "auto", environment: str = CARTPOLE,
                    brax_backend: str = "mjx", brax_timesteps: int | None = None, baseline: bool = True,
                    timeout_s: float = 3600) -> dict[str, Any]:
    """Train PPO on ``environment`` (our CartPole, or for ``jax_jit`` also a brax environment on
    ``brax_backend``) to ``timesteps`` environment steps in ``framework`` (``brax_timesteps`` on a
    brax environment where given: a physics step launches hundreds of kernels, each a record in
    the trace); rows as the module docstring says, with ``uninstrumented_learn_s`` and
    ``env_steps_per_s`` where ``baseline``."""
    from experiments.devices import resolve_device

    problem = check_params("framework", framework)
    if problem:
        raise ValueError(problem)
    if framework != "jax_jit" and environment != CARTPOLE:
        raise ValueError(f"{framework} trains on gymnasium's CartPole-v1 here (environment: {CARTPOLE}); "
                         f"brax environments ({environment!r}) are jax_jit's only")
    device = resolve_device(device)
    if environment != CARTPOLE and brax_timesteps:
        timesteps = brax_timesteps
    if framework in ROLLOUT:
        missing = [name for name in ("jax", "optax") if importlib.util.find_spec(name) is None]
        if missing:  # looked up, not imported: the training runs in its own process
            raise SkipRun(f"the jitted PPO needs {' and '.join(missing)}; pip install 'rlscope[jax]'")
        result = _jitted(framework, timesteps, device, environment, brax_backend, baseline, timeout_s)
    else:
        from experiments.casestudies.profiled import profiled_training

        result = profiled_training("ppo", "CartPole-v1", timesteps, device=device, n_envs=ENVS, calibrate=False,
                                   framework=framework, baseline=baseline, timeout_s=timeout_s,
                                   hyperparameters="cartpole")
    learn_s = result.get("uninstrumented_learn_s")
    return {**result, "device": device, "python": platform.python_version(), "timesteps": timesteps,
            "brax_backend": brax_backend if environment != CARTPOLE else "",
            "framework_label": FRAMEWORKS[framework],
            "env_steps_per_s": timesteps / learn_s if learn_s else float("nan")}
