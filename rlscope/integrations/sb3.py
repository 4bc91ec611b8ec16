"""Annotate any Stable-Baselines3 algorithm's training with RL-Scope's operations, without
forking SB3: one callback. It works for SBX (Stable-Baselines3 in JAX) too, whose algorithms are
SB3's with JAX networks.

    import rlscope.integrations.sb3
    model.learn(total_timesteps, callback=rlscope.integrations.sb3.Annotate())

- ``inference``: choosing actions while collecting experience. Off-policy algorithms (SB3's and
  SBX's) choose them with ``policy.predict``, wrapped for the length of training: observation to
  tensor, the actor's or Q-network's forward pass, and the copy of the actions back to NumPy
  (which waits for the device). On-policy SB3 calls the policy's forward itself, so there a torch
  forward hook is the mark. Both are live only during rollouts (the same networks run inside
  ``train()``);
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
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

import rlscope
from rlscope.integrations import DATA_COLLECTION, TRAINING

__all__ = ["Annotate", "AnnotatedVecEnv", "SimulationWrapper", "INFERENCE", "SIMULATION", "BACKPROPAGATION",
           "DATA_COLLECTION", "TRAINING"]

INFERENCE, SIMULATION, BACKPROPAGATION = "inference", "simulation", "backpropagation"


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
        policy = self.model.policy
        if not isinstance(self.model, OnPolicyAlgorithm):
            policy.predict = self._annotated(policy.predict)  # an instance attribute: SB3 calls policy.predict
        elif isinstance(policy, torch.nn.Module):
            self._hooks = [policy.register_forward_pre_hook(self._before_forward),
                           policy.register_forward_hook(self._after_forward, always_call=True)]
        else:
            raise TypeError(f"{type(self.model).__name__}: on-policy algorithms are annotated through a torch "
                            f"forward hook, and this policy ({type(policy).__name__}) is not a torch module")

    def _annotated(self, predict: Any) -> Any:
        def predict_as_inference(*args: Any, **kwargs: Any) -> Any:
            if not self._collecting:
                return predict(*args, **kwargs)
            with rlscope.operation(INFERENCE):
                return predict(*args, **kwargs)

        return predict_as_inference

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
        self.model.policy.__dict__.pop("predict", None)
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
