"""PPO compiled whole (PureJaxRL-style) on our JAX CartPole or a brax environment
(``experiments.casestudies.jitted_envs``): one ``jax.jit`` call per training iteration runs the
rollout (policy inference and environment steps, scanned), GAE and the minibatch updates. To rlscope
that call is one opaque Backend span; ``rlscope prof --jax-scopes`` splits its GPU time by the
``jax.named_scope`` of each part (rollout/inference, rollout/env, gae, update).

Hyperparameters are CleanRL's and PureJaxRL's for CartPole (``HYPERPARAMETERS``, also what
``experiments.casestudies.sb3_train --hyperparameters cartpole`` gives SB3 and SBX's PPO), with
SB3's networks (a policy and a value network, tanh 64x64 each) and Adam's eps. Still different from
SB3 and SBX: an episode cut off at 500 steps ends here, where they bootstrap its value; SBX clips
each network's gradient norm separately; none clips the value loss. On a brax environment the same
hyperparameters and networks are used, the policy a diagonal Gaussian (actions clipped to [-1, 1]
for the environment) and no observation normalisation: the case study times where a step goes, it
does not tune brax's learning.

Run: ``python -m experiments.casestudies.jitted_ppo --envs 8 --steps 128 --iterations 50 [--env
ant]`` (or ``--timesteps N``: as many iterations as N environment steps take). It prints one JSON
line (the seconds per iteration after the first two, which compile, and the environment steps per
second over those) and last ``learn_s=SECONDS``, the wall time of the training, compilation
included, imports and the model's set-up not, as ``sb3_train`` reports ``model.learn``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import rlscope
from experiments.casestudies.jitted_envs import CARTPOLE, JaxEnv, make_env
from rlscope.errors import SKIPPED_EXIT, SkipRun
from rlscope.integrations import TRAINING

__all__ = ["make_ppo", "main", "PPO", "HYPERPARAMETERS", "ROLLOUTS"]

ROLLOUTS = ("scan", "fused")
WARM_UP = 2  # iterations that compile (and autotune) before the timed ones
# CleanRL's ppo.py and PureJaxRL's CartPole defaults; the rollout length is --steps.
HYPERPARAMETERS = {"epochs": 4, "minibatches": 4, "hidden": 64, "gamma": 0.99, "lam": 0.95, "clip": 0.2,
                   "lr": 2.5e-4, "ent_coef": 0.01, "vf_coef": 0.5, "max_grad_norm": 0.5}


class PPO(NamedTuple):
    """The jitted PPO's functions; all but ``init`` are jitted whole.

    - ``init(seed)`` -> carry: (params, opt_state, env state, key);
    - ``train_step(carry)`` -> (carry, loss): one iteration, rollout, GAE and updates;
    - ``learn(params, opt_state, key, obs, action, reward, done, last_obs)`` -> (params,
      opt_state, key, loss): an iteration's learning on a rollout recorded elsewhere (steps x
      envs arrays and the observations after it), its log-probabilities and values in one batch
      (scope ``rollout_values``);
    - ``rollout(params, env state, key)`` -> (env state, key, (obs, action, logp, value, reward,
      done)): ``train_step``'s rollout alone.
    """

    init: Callable[[int], tuple[Any, ...]]
    train_step: Callable[[tuple[Any, ...]], tuple[tuple[Any, ...], Any]]
    learn: Callable[..., tuple[Any, Any, Any, Any]]
    rollout: Callable[[Any, Any, Any], tuple[Any, Any, tuple[Any, ...]]]


def _init(jax: Any, key: Any, hidden: int, env: JaxEnv) -> dict[str, Any]:
    """A policy and a value network, each tanh hidden x hidden, as SB3's and SBX's PPO default to;
    for continuous actions a state-independent log standard deviation, starting at 0 as SB3's."""
    params = {}
    for net, outputs in (("pi", env.action_size), ("vf", 1)):
        sizes = [(env.obs_size, hidden), (hidden, hidden), (hidden, outputs)]
        key, *keys = jax.random.split(key, len(sizes) + 1)
        for i, (k, s) in enumerate(zip(keys, sizes)):
            params[f"{net}_w{i}"] = jax.random.normal(k, s) / s[0] ** 0.5
            params[f"{net}_b{i}"] = jax.numpy.zeros(s[1])
    if not env.discrete:
        params["log_std"] = jax.numpy.zeros(env.action_size)
    return params


def _forward(jnp: Any, params: dict[str, Any], obs: Any) -> tuple[Any, Any]:
    """(the policy's output: action logits or the Gaussian's mean, value) of ``obs``."""
    out = {}
    for net in ("pi", "vf"):
        h = jnp.tanh(obs @ params[f"{net}_w0"] + params[f"{net}_b0"])
        h = jnp.tanh(h @ params[f"{net}_w1"] + params[f"{net}_b1"])
        out[net] = h @ params[f"{net}_w2"] + params[f"{net}_b2"]
    return out["pi"], out["vf"][..., 0]


def _policy(jax: Any, env: JaxEnv) -> tuple[Any, Any, Any]:
    """(sample(params, out, key), log_prob(params, out, action), entropy(params, out)) of the
    policy's distribution: categorical over logits for discrete actions, else a diagonal Gaussian."""
    jnp = jax.numpy
    if env.discrete:
        def log_prob(params: Any, out: Any, action: Any) -> Any:
            return jnp.take_along_axis(jax.nn.log_softmax(out), action[..., None], axis=-1)[..., 0]

        def entropy(params: Any, out: Any) -> Any:
            logp = jax.nn.log_softmax(out)
            return -(jnp.exp(logp) * logp).sum(-1)

        return (lambda params, out, key: jax.random.categorical(key, out)), log_prob, entropy

    def sample(params: Any, out: Any, key: Any) -> Any:
        return out + jnp.exp(params["log_std"]) * jax.random.normal(key, out.shape)

    def log_prob(params: Any, out: Any, action: Any) -> Any:
        z = (action - out) * jnp.exp(-params["log_std"])
        return (-0.5 * z ** 2 - params["log_std"] - 0.5 * jnp.log(2 * jnp.pi)).sum(-1)

    def entropy(params: Any, out: Any) -> Any:
        return jnp.broadcast_to((params["log_std"] + 0.5 * jnp.log(2 * jnp.pi * jnp.e)).sum(), out.shape[:-1])

    return sample, log_prob, entropy


def make_ppo(env: JaxEnv, steps: int, epochs: int = 4, minibatches: int = 4, hidden: int = 64,
                    gamma: float = 0.99, lam: float = 0.95, clip: float = 0.2, lr: float = 2.5e-4,
                    ent_coef: float = 0.01, vf_coef: float = 0.5, max_grad_norm: float = 0.5) -> PPO:
    """PPO on ``env`` with these hyperparameters (``PPO`` says what each function does)."""
    import jax
    import jax.numpy as jnp
    import optax

    optimizer = optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(lr, eps=1e-5))  # SB3's eps
    sample, log_prob, entropy_of = _policy(jax, env)
    batch = steps * env.envs

    def init(seed: int) -> tuple[Any, ...]:
        key = jax.random.key(seed)
        key, pkey, skey = jax.random.split(key, 3)
        params = _init(jax, pkey, hidden, env)
        return params, optimizer.init(params), jax.jit(env.reset)(skey), key

    def rollout_step(carry: tuple[Any, ...], _: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        params, state, key = carry
        key, act_key, env_key = jax.random.split(key, 3)
        obs = env.observe(state)
        with jax.named_scope("inference"):
            out, value = _forward(jnp, params, obs)
            action = sample(params, out, act_key)
            logp = log_prob(params, out, action)
        with jax.named_scope("env"):
            state, reward, done = env.step(state, action, env_key)
        return (params, state, key), (obs, action, logp, value, reward, done)

    def gae(values: Any, dones: Any, rewards: Any, last_value: Any) -> tuple[Any, Any]:
        def back(carry: tuple[Any, Any], x: tuple[Any, Any, Any]) -> tuple[tuple[Any, Any], Any]:
            advantage, next_value = carry
            value, done, reward = x
            delta = reward + gamma * next_value * (1 - done) - value
            advantage = delta + gamma * lam * (1 - done) * advantage
            return (advantage, value), advantage

        _, advantages = jax.lax.scan(back, (jnp.zeros_like(last_value), last_value),
                                     (values, dones.astype(values.dtype), rewards), reverse=True)
        return advantages, advantages + values

    def loss(params: Any, batch: tuple[Any, ...]) -> Any:
        obs, action, old_logp, advantage, target = batch
        out, value = _forward(jnp, params, obs)
        ratio = jnp.exp(log_prob(params, out, action) - old_logp)
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        policy = -jnp.minimum(ratio * advantage, jnp.clip(ratio, 1 - clip, 1 + clip) * advantage).mean()
        return policy + vf_coef * ((value - target) ** 2).mean() - ent_coef * entropy_of(params, out).mean()

    def gae_and_update(params: Any, opt_state: Any, key: Any, rollout: tuple[Any, ...],
                       last_obs: Any) -> tuple[Any, Any, Any, Any]:
        obs, action, logp, value, reward, done = rollout
        with jax.named_scope("gae"):
            last_value = _forward(jnp, params, last_obs)[1]
            advantage, target = gae(value, done, reward, last_value)
        with jax.named_scope("update"):
            flat = jax.tree.map(lambda x: x.reshape((batch,) + x.shape[2:]), (obs, action, logp, advantage, target))

            def epoch(carry: tuple[Any, Any, Any], _: Any) -> tuple[tuple[Any, Any, Any], Any]:
                params, opt_state, key = carry
                key, perm_key = jax.random.split(key)
                order = jax.random.permutation(perm_key, batch).reshape(minibatches, -1)

                def minibatch(carry: tuple[Any, Any], idx: Any) -> tuple[tuple[Any, Any], Any]:
                    params, opt_state = carry
                    value, grads = jax.value_and_grad(loss)(params, jax.tree.map(lambda x: x[idx], flat))
                    updates, opt_state = optimizer.update(grads, opt_state)
                    return (optax.apply_updates(params, updates), opt_state), value

                (params, opt_state), losses = jax.lax.scan(minibatch, (params, opt_state), order)
                return (params, opt_state, key), losses.mean()

            (params, opt_state, key), losses = jax.lax.scan(epoch, (params, opt_state, key), None, length=epochs)
        return params, opt_state, key, losses.mean()

    def rollout(params: Any, state: Any, key: Any) -> tuple[Any, Any, tuple[Any, ...]]:
        with jax.named_scope("rollout"):
            (_, state, key), recorded = jax.lax.scan(rollout_step, (params, state, key), None, length=steps)
        return state, key, recorded

    def train_step(carry: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any]:
        params, opt_state, state, key = carry
        state, key, recorded = rollout(params, state, key)
        params, opt_state, key, loss_value = gae_and_update(params, opt_state, key, recorded, env.observe(state))
        return (params, opt_state, state, key), loss_value

    def learn(params: Any, opt_state: Any, key: Any, obs: Any, action: Any, reward: Any, done: Any,
              last_obs: Any) -> tuple[Any, Any, Any, Any]:
        """PPO's learning on a rollout recorded outside JAX (steps x envs arrays): the policy's
        log-probabilities and values of it in one batch, then GAE and the updates."""
        with jax.named_scope("rollout_values"):  # not the rollout's inference: that ran where it was recorded
            out, value = _forward(jnp, params, obs)
            logp = log_prob(params, out, action)
        return gae_and_update(params, opt_state, key, (obs, action, logp, value, reward, done), last_obs)

    return PPO(init, jax.jit(train_step), jax.jit(learn), jax.jit(rollout))


def _iteration(env: JaxEnv, args: argparse.Namespace) -> Any:
    """A function that runs one training iteration and returns its loss (a JAX array)."""
    if args.rollout == "fused":  # before any JAX work: a run that cannot use the kernel skips at once
        from experiments.datacollection.backends.cuda import cupy_or_skip

        if args.device == "cpu":
            raise SkipRun("the fused rollout kernel runs on a GPU only")
        cupy_or_skip()
    ppo = make_ppo(env, args.steps, **HYPERPARAMETERS)
    carry = list(ppo.init(args.seed))  # params, opt_state, env state, key
    if args.rollout == "scan":
        def iterate() -> Any:
            new, loss = ppo.train_step(tuple(carry))
            carry[:] = new
            return loss
        return iterate
    from experiments.casestudies.fused_rollout import FusedRollout

    fused = FusedRollout(args.envs, args.seed)

    def iterate_fused() -> Any:
        params, opt_state, _, key = carry
        with rlscope.operation("rollout"):  # the kernel's launch: no XLA module holds it
            recorded = fused.rollout(params, args.steps)
        params, opt_state, key, loss = ppo.learn(params, opt_state, key, *recorded)
        carry[:] = params, opt_state, None, key
        return loss
    return iterate_fused


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=128, help="rollout length per iteration")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--timesteps", type=int, default=None,
                        help="train for this many environment steps (rounded up to whole iterations) instead")
    parser.add_argument("--env", default=CARTPOLE, help="cartpole (ours) or a brax environment's name, e.g. ant")
    parser.add_argument("--brax-backend", default="mjx", help="brax's pipeline: mjx, generalized, positional, spring")
    parser.add_argument("--rollout", choices=ROLLOUTS, default="scan",
                        help="scan: the rollout in the jitted step; fused: in the fused CUDA simulator+policy kernel "
                             "(CartPole, GPU only), the learning jitted")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="cpu keeps JAX off any GPU")
    args = parser.parse_args(argv)
    if args.device == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"  # read when JAX is imported (make_ppo)
    iterations = -(-args.timesteps // (args.envs * args.steps)) if args.timesteps else args.iterations
    if args.rollout == "fused" and args.env != CARTPOLE:
        parser.error("--rollout fused runs CartPole only (the kernel's simulator)")
    try:
        env = make_env(args.env, args.envs, args.brax_backend)
        iterate = _iteration(env, args)
    except SkipRun as skipped:  # the harness records the run as skipped, with this reason
        print(skipped, file=sys.stderr, flush=True)
        raise SystemExit(SKIPPED_EXIT) from None
    except ValueError as unknown:  # a name brax does not have
        parser.error(f"--env {args.env}: {unknown}; or {CARTPOLE} (ours)")
    # From here, as sb3_train times model.learn after the model is made: the first iterations
    # compile (and autotune), which is part of what training in one jax.jit costs.
    rlscope.set_phase(TRAINING)  # the phase SB3's integration gives its training: the results compare them
    begun = time.perf_counter()
    started = None
    for i in range(iterations):
        if i == min(WARM_UP, iterations - 1):
            started = time.perf_counter()
        with rlscope.operation("train_step"):
            loss = iterate()
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
