"""PPO compiled whole (PureJaxRL-style) on the JAX CartPole: one ``jax.jit`` call per training
iteration runs the rollout (policy inference and environment steps, scanned), GAE and the
minibatch updates. To rlscope that call is one opaque Backend span; ``rlscope prof
--jax-scopes`` splits its GPU time by the ``jax.named_scope`` of each part (rollout/inference,
rollout/env, gae, update).

Hyperparameters are CleanRL's and PureJaxRL's for CartPole (``HYPERPARAMETERS``, also what
``experiments.casestudies.sb3_train --hyperparameters cartpole`` gives SB3 and SBX's PPO), with
SB3's networks (a policy and a value network, tanh 64x64 each) and Adam's eps. Still different
from SB3 and SBX: an episode cut off at 500 steps ends here, where they bootstrap its value; SBX
clips each network's gradient norm separately; none clips the value loss.

Run: ``python -m experiments.casestudies.jitted_ppo --envs 8 --steps 128 --iterations 50`` (or
``--timesteps N``: as many iterations as N environment steps take). It prints one JSON line (the
seconds per iteration after the first two, which compile, and the environment steps per second
over those) and last ``learn_s=SECONDS``, the wall time of the training, compilation included,
imports and the model's set-up not, as ``sb3_train`` reports ``model.learn``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import rlscope
from experiments.datacollection.backends.base import CARTPOLE as P
from experiments.datacollection.backends.dynamics import cartpole_dynamics, terminated_mask
from rlscope.integrations import TRAINING

__all__ = ["make_train_step", "main", "HYPERPARAMETERS"]

WARM_UP = 2  # iterations that compile (and autotune) before the timed ones
# CleanRL's ppo.py and PureJaxRL's CartPole defaults; the rollout length is --steps.
HYPERPARAMETERS = {"epochs": 4, "minibatches": 4, "hidden": 64, "gamma": 0.99, "lam": 0.95, "clip": 0.2,
                   "lr": 2.5e-4, "ent_coef": 0.01, "vf_coef": 0.5, "max_grad_norm": 0.5}


def _init(jax: Any, key: Any, hidden: int) -> dict[str, Any]:
    """A policy and a value network, each tanh hidden x hidden, as SB3's and SBX's PPO default to."""
    params = {}
    for net, outputs in (("pi", 2), ("vf", 1)):
        sizes = [(4, hidden), (hidden, hidden), (hidden, outputs)]
        key, *keys = jax.random.split(key, len(sizes) + 1)
        for i, (k, s) in enumerate(zip(keys, sizes)):
            params[f"{net}_w{i}"] = jax.random.normal(k, s) / s[0] ** 0.5
            params[f"{net}_b{i}"] = jax.numpy.zeros(s[1])
    return params


def _forward(jnp: Any, params: dict[str, Any], obs: Any) -> tuple[Any, Any]:
    """(action logits, value) of ``obs``."""
    out = {}
    for net in ("pi", "vf"):
        h = jnp.tanh(obs @ params[f"{net}_w0"] + params[f"{net}_b0"])
        h = jnp.tanh(h @ params[f"{net}_w1"] + params[f"{net}_b1"])
        out[net] = h @ params[f"{net}_w2"] + params[f"{net}_b2"]
    return out["pi"], out["vf"][..., 0]


def make_train_step(envs: int, steps: int, epochs: int = 4, minibatches: int = 4, hidden: int = 64,
                    gamma: float = 0.99, lam: float = 0.95, clip: float = 0.2, lr: float = 2.5e-4,
                    ent_coef: float = 0.01, vf_coef: float = 0.5, max_grad_norm: float = 0.5) -> tuple[Any, Any]:
    """(init(seed) -> carry, train_step(carry) -> (carry, metrics)), train_step jitted whole."""
    import jax
    import jax.numpy as jnp
    import optax

    optimizer = optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(lr, eps=1e-5))  # SB3's eps

    def init(seed: int) -> tuple[Any, ...]:
        key = jax.random.key(seed)
        key, pkey, skey = jax.random.split(key, 3)
        params = _init(jax, pkey, hidden)
        state = jax.random.uniform(skey, (envs, 4), minval=-P.reset_bound, maxval=P.reset_bound)
        return params, optimizer.init(params), state, jnp.zeros(envs, jnp.int32), key

    def env_step(state: Any, elapsed: Any, action: Any, key: Any) -> tuple[Any, ...]:
        moved = cartpole_dynamics(state, action == 1, jnp)
        elapsed = elapsed + 1
        done = terminated_mask(moved) | (elapsed >= P.max_episode_steps)
        fresh = jax.random.uniform(key, moved.shape, minval=-P.reset_bound, maxval=P.reset_bound)
        return jnp.where(done[:, None], fresh, moved), jnp.where(done, 0, elapsed), done

    def rollout_step(carry: tuple[Any, ...], _: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        params, state, elapsed, key = carry
        key, act_key, env_key = jax.random.split(key, 3)
        with jax.named_scope("inference"):
            logits, value = _forward(jnp, params, state)
            action = jax.random.categorical(act_key, logits)
            logp = jax.nn.log_softmax(logits)[jnp.arange(envs), action]
        with jax.named_scope("env"):
            next_state, elapsed, done = env_step(state, elapsed, action, env_key)
        return (params, next_state, elapsed, key), (state, action, logp, value, done)

    def gae(values: Any, dones: Any, last_value: Any) -> tuple[Any, Any]:
        def back(carry: tuple[Any, Any], x: tuple[Any, Any, Any]) -> tuple[tuple[Any, Any], Any]:
            advantage, next_value = carry
            value, done, reward = x
            delta = reward + gamma * next_value * (1 - done) - value
            advantage = delta + gamma * lam * (1 - done) * advantage
            return (advantage, value), advantage

        rewards = jnp.ones_like(values)  # CartPole: +1 per step survived
        _, advantages = jax.lax.scan(back, (jnp.zeros_like(last_value), last_value),
                                     (values, dones.astype(values.dtype), rewards), reverse=True)
        return advantages, advantages + values

    def loss(params: Any, batch: tuple[Any, ...]) -> Any:
        obs, action, old_logp, advantage, target = batch
        logits, value = _forward(jnp, params, obs)
        log_probs = jax.nn.log_softmax(logits)
        logp = log_probs[jnp.arange(obs.shape[0]), action]
        ratio = jnp.exp(logp - old_logp)
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        policy = -jnp.minimum(ratio * advantage, jnp.clip(ratio, 1 - clip, 1 + clip) * advantage).mean()
        entropy = -(jnp.exp(log_probs) * log_probs).sum(-1).mean()
        return policy + vf_coef * ((value - target) ** 2).mean() - ent_coef * entropy

    def train_step(carry: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any]:
        params, opt_state, state, elapsed, key = carry
        with jax.named_scope("rollout"):
            (_, state, elapsed, key), (obs, action, logp, value, done) = jax.lax.scan(
                rollout_step, (params, state, elapsed, key), None, length=steps)
        with jax.named_scope("gae"):
            last_value = _forward(jnp, params, state)[1]
            advantage, target = gae(value, done, last_value)
        with jax.named_scope("update"):
            flat = jax.tree.map(lambda x: x.reshape((steps * envs,) + x.shape[2:]), (obs, action, logp, advantage,
                                                                                      target))

            def epoch(carry: tuple[Any, Any, Any], _: Any) -> tuple[tuple[Any, Any, Any], Any]:
                params, opt_state, key = carry
                key, perm_key = jax.random.split(key)
                order = jax.random.permutation(perm_key, steps * envs).reshape(minibatches, -1)

                def minibatch(carry: tuple[Any, Any], idx: Any) -> tuple[tuple[Any, Any], Any]:
                    params, opt_state = carry
                    value, grads = jax.value_and_grad(loss)(params, jax.tree.map(lambda x: x[idx], flat))
                    updates, opt_state = optimizer.update(grads, opt_state)
                    return (optax.apply_updates(params, updates), opt_state), value

                (params, opt_state), losses = jax.lax.scan(minibatch, (params, opt_state), order)
                return (params, opt_state, key), losses.mean()

            (params, opt_state, key), losses = jax.lax.scan(epoch, (params, opt_state, key), None, length=epochs)
        return (params, opt_state, state, elapsed, key), losses.mean()

    return init, jax.jit(train_step)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=128, help="rollout length per iteration")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--timesteps", type=int, default=None,
                        help="train for this many environment steps (rounded up to whole iterations) instead")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="cpu keeps JAX off any GPU")
    args = parser.parse_args(argv)
    if args.device == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"  # read when JAX is imported (make_train_step)
    iterations = -(-args.timesteps // (args.envs * args.steps)) if args.timesteps else args.iterations
    init, train_step = make_train_step(args.envs, args.steps, **HYPERPARAMETERS)
    carry = init(args.seed)
    # From here, as sb3_train times model.learn after the model is made: the first iterations
    # compile (and autotune), which is part of what training in one jax.jit costs.
    rlscope.set_phase(TRAINING)  # the phase SB3's integration gives its training: the results compare them
    begun = time.perf_counter()
    started = None
    for i in range(iterations):
        if i == min(WARM_UP, iterations - 1):
            started = time.perf_counter()
        with rlscope.operation("train_step"):
            carry, loss = train_step(carry)
            loss.block_until_ready()
        rlscope.step()
    ended = time.perf_counter()
    timed = iterations - min(WARM_UP, iterations - 1)
    seconds = (ended - started) / timed
    print(json.dumps({"iteration_s": seconds, "env_steps_per_s": args.envs * args.steps / seconds,
                      "iterations": timed, "loss": float(loss)}))
    print(f"learn_s={ended - begun:.6f}", flush=True)


if __name__ == "__main__":
    main()
