"""The RL frameworks of the framework comparison (RL-Scope §2.5.1, Fig. 4): the same algorithm with
the same hyperparameters under each of today's execution models.

- ``sb3``: Stable-Baselines3, PyTorch eager: every layer of every network is a Python call into torch;
- ``sb3_compile``: the same SB3 model with its networks compiled in place by ``torch.compile``
  (``nn.Module.compile``, default mode: TorchDynamo captures each forward, AOTAutograd derives the
  backward, Inductor generates fused kernels for both). The optimiser step and the polyak
  update of the target networks stay eager. Compiled: the actor, the critic, their targets, and the
  critic's ``q1_forward`` (TD3's actor loss). Compilation happens before training, in ``warm_up``;
- ``sbx``: SBX (Stable-Baselines3 in JAX): acting is one ``jax.jit`` call per step, and each
  training call is one jitted function over all its gradient steps.

Every framework is warmed up before training (``warm_up``) so that no first-use work (compiling,
tracing, library handles) is in the profile. TensorFlow is absent: no maintained TD3/DDPG
implementation runs on current TensorFlow (``docs/results/case-studies.md`` says what was tried).
"""

from __future__ import annotations

import copy
import os
from typing import Any

__all__ = ["FRAMEWORKS", "INSTALL", "COMPILABLE", "framework_problem", "algorithm_class", "prepare", "compile_networks",
           "warm_up"]

FRAMEWORKS = {"sb3": "PyTorch eager", "sb3_compile": "PyTorch torch.compile", "sbx": "JAX jit"}
INSTALL = {"sbx": "pip install 'rlscope[jax]'  (sbx-rl: Stable-Baselines3 in JAX)"}
COMPILABLE = ("td3", "ddpg")  # the algorithms whose networks compile_networks and warm_up know
SBX_ALGORITHMS = ("ppo", "sac", "td3", "ddpg", "dqn")


def framework_problem(framework: str, algorithm: str) -> str | None:
    """Why ``framework`` cannot run ``algorithm`` (unknown, or not implemented there), or None."""
    if framework not in FRAMEWORKS:
        return f"unknown framework {framework!r}; known: {', '.join(FRAMEWORKS)}"
    if framework == "sb3_compile" and algorithm not in COMPILABLE:
        return f"sb3_compile compiles {' and '.join(COMPILABLE)} only, not {algorithm}"
    if framework == "sbx" and algorithm not in SBX_ALGORITHMS:
        return f"SBX has no {algorithm}; it has {', '.join(SBX_ALGORITHMS)}"
    return None


def algorithm_class(framework: str, algorithm: str, device: str) -> Any:
    """The class implementing ``algorithm`` in ``framework`` (ImportError where it is not
    installed). For SBX on the CPU, JAX is kept off any GPU."""
    if framework == "sbx":
        if device == "cpu":
            os.environ["JAX_PLATFORMS"] = "cpu"
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import sbx

        return getattr(sbx, algorithm.upper())
    import stable_baselines3 as sb3

    return getattr(sb3, algorithm.upper())


def prepare(model: Any, framework: str, n_envs: int) -> None:
    """Get ``model`` to steady state before training: compile its networks (``sb3_compile``), then
    warm it up (``warm_up``)."""
    if framework == "sb3_compile":
        compile_networks(model)
    warm_up(model, framework, n_envs)


def compile_networks(model: Any) -> list[str]:
    """Compile a TD3/DDPG model's networks in place (see the module docstring); their names."""
    import torch

    policy = model.policy
    names = ["actor", "actor_target", "critic", "critic_target"]
    for name in names:
        getattr(policy, name).compile()
    policy.critic.q1_forward = torch.compile(policy.critic.q1_forward)
    return [*names, "critic.q1_forward"]


def warm_up(model: Any, framework: str, n_envs: int) -> None:
    """Two training calls of one gradient step on random transitions (the critic's update, then
    the critic's and the delayed actor's) and one action choice for ``n_envs`` observations, then
    everything they changed put back: weights, optimiser state, random key, update counter, replay
    buffer. What stays is what a framework builds on first use (compiled graphs, JAX's traced
    functions, cuBLAS handles), so the profile measures steady-state training in every framework."""
    import numpy as np
    from stable_baselines3.common.buffers import ReplayBuffer
    from stable_baselines3.common.logger import configure

    restore = _snapshot(model, framework)
    buffer, updates = model.replay_buffer, model._n_updates
    model.set_logger(configure(None, []))
    rng = np.random.default_rng(0)
    shape, actions = model.observation_space.shape, model.action_space.shape
    warm = ReplayBuffer(model.batch_size, model.observation_space, model.action_space, buffer.device)
    for _ in range(model.batch_size):
        obs = rng.standard_normal((1, *shape)).astype(model.observation_space.dtype)
        action = rng.uniform(-1, 1, (1, *actions)).astype(np.float32)
        warm.add(obs, obs, action, np.zeros(1, np.float32), np.zeros(1, np.float32), [{}])
    model.replay_buffer = warm
    try:
        for _ in range(2):
            model.train(gradient_steps=1, batch_size=model.batch_size)
        model.predict(rng.standard_normal((n_envs, *shape)).astype(model.observation_space.dtype))
    finally:
        model.replay_buffer, model._n_updates = buffer, updates
        restore()


def _snapshot(model: Any, framework: str) -> Any:
    """A function that puts back the model's learnable state as it is now."""
    policy = model.policy
    if framework == "sbx":  # flax train states and the JAX key are immutable: keeping references is a copy
        states = {k: v for k, v in vars(policy).items() if k.endswith("_state")}
        key = model.key

        def restore_sbx() -> None:
            vars(policy).update(states)
            model.key = key

        return restore_sbx
    optimisers = {name: getattr(policy, name).optimizer for name in ("actor", "critic")}
    saved = copy.deepcopy({"policy": policy.state_dict(), **{k: o.state_dict() for k, o in optimisers.items()}})

    def restore_torch() -> None:
        policy.load_state_dict(saved["policy"])
        for name, optimiser in optimisers.items():
            optimiser.load_state_dict(saved[name])

    return restore_torch
