"""Annotate any Stable-Baselines3 algorithm's training with RL-Scope's operations, without
forking SB3: one callback.

    import rlscope.integrations.sb3
    model.learn(total_timesteps, callback=rlscope.integrations.sb3.Annotate())

- ``inference``: the forward pass of the network SB3 acts with while it collects experience (the
  policy of an on-policy algorithm, the actor or Q-network of an off-policy one), through a torch
  forward hook that is live only during rollouts (the same network also runs inside ``train()``);
- ``simulation``: the vectorised environment's step, through a ``VecEnvWrapper`` put around the
  model's environment when training starts and taken off when it ends;
- ``backpropagation``: from the end of one rollout to the start of the next, which is SB3's
  ``train()`` (with its logging);
- phases ``data_collection`` (rollouts) and ``training``, and one iteration (``rlscope.step()``)
  per rollout.

Everything is a no-op when nothing profiles the process. With ``SubprocVecEnv`` the environments
step in child processes: run under ``rlscope prof`` to profile those too (each child writes its
own trace); ``SimulationWrapper`` marks their steps as ``simulation`` there.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

import rlscope

__all__ = ["Annotate", "AnnotatedVecEnv", "SimulationWrapper", "acting_network", "INFERENCE", "SIMULATION",
           "BACKPROPAGATION", "DATA_COLLECTION", "TRAINING"]

INFERENCE, SIMULATION, BACKPROPAGATION = "inference", "simulation", "backpropagation"
DATA_COLLECTION, TRAINING = "data_collection", "training"


class AnnotatedVecEnv(VecEnvWrapper):
    """A vectorised environment whose steps (``step_async`` to ``step_wait``) are ``simulation``."""

    def __init__(self, venv: VecEnv) -> None:
        super().__init__(venv)
        self._stepping = False

    def reset(self) -> Any:
        return self.venv.reset()

    def step_async(self, actions: Any) -> None:
        rlscope.operation(SIMULATION).__enter__()
        self._stepping = True
        try:
            self.venv.step_async(actions)
        except BaseException:
            self._finish()
            raise

    def step_wait(self) -> Any:
        try:
            return self.venv.step_wait()
        finally:
            self._finish()

    def _finish(self) -> None:
        if self._stepping:
            self._stepping = False
            rlscope.operation(SIMULATION).__exit__(None, None, None)


class SimulationWrapper(gym.Wrapper):
    """A gymnasium environment whose ``step`` is ``simulation``: for environments stepped in
    ``SubprocVecEnv`` workers (``make_vec_env(..., wrapper_class=SimulationWrapper)``)."""

    def step(self, action: Any) -> Any:
        with rlscope.operation(SIMULATION):
            return self.env.step(action)


def acting_network(model: Any) -> Any:
    """The torch module whose forward pass chooses actions while ``model`` collects experience:
    the policy of an on-policy algorithm (SB3 calls it), else the policy's actor (SAC, TD3,
    DDPG) or Q-network (DQN), which ``predict`` calls."""
    policy = model.policy
    if isinstance(model, OnPolicyAlgorithm):
        return policy
    for name in ("actor", "q_net"):
        network = getattr(policy, name, None)
        if network is not None:
            return network
    return policy


class Annotate(BaseCallback):
    """The SB3 callback that annotates training (see the module docstring)."""

    def __init__(self, verbose: int = 0) -> None:
        super().__init__(verbose)
        self._collecting = False
        self._in_inference = 0
        self._training = False
        self._hooks: list[Any] = []
        self._wrapped: AnnotatedVecEnv | None = None

    def _on_training_start(self) -> None:
        if not isinstance(self.model.env, AnnotatedVecEnv):
            self._wrapped = AnnotatedVecEnv(self.model.env)
            self.model.set_env(self._wrapped, force_reset=False)  # learn() reads model.env each rollout
        network = acting_network(self.model)
        self._hooks = [network.register_forward_pre_hook(self._before_forward),
                       network.register_forward_hook(self._after_forward, always_call=True)]

    def _on_rollout_start(self) -> None:
        self._end_training()
        rlscope.set_phase(DATA_COLLECTION)
        rlscope.step()  # one iteration per rollout, counted in the data-collection phase
        self._collecting = True

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        self._collecting = False
        rlscope.set_phase(TRAINING)
        rlscope.operation(BACKPROPAGATION).__enter__()
        self._training = True

    def _on_training_end(self) -> None:
        self._end_training()
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if self._wrapped is not None and self.model.env is self._wrapped:
            self.model.set_env(self._wrapped.venv, force_reset=False)
        self._wrapped = None

    def _end_training(self) -> None:
        if self._training:
            self._training = False
            rlscope.operation(BACKPROPAGATION).__exit__(None, None, None)

    def _before_forward(self, module: Any, args: Any) -> None:
        if self._collecting:
            self._in_inference += 1
            rlscope.operation(INFERENCE).__enter__()

    def _after_forward(self, module: Any, args: Any, output: Any) -> None:
        if self._in_inference:
            self._in_inference -= 1
            rlscope.operation(INFERENCE).__exit__(None, None, None)
