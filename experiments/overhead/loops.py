"""Workloads whose profiling overhead is corrected and validated (RL-Scope paper, Fig. 11).

    python -m experiments.overhead.loops WORKLOAD STEPS [--sessions DIR [--segment-ms MS]]

Each is an ordinary annotated training or collection loop of STEPS / STEP_DIVISOR[WORKLOAD]
environment steps (one STEPS value then gives runs of similar length across workloads):

- ``gym_numpy``: gymnasium CartPole with a NumPy linear policy (CPU, many tiny native calls);
- ``sb3_ppo`` / ``sb3_a2c``: stable-baselines3 on CartPole-v1, CPU;
- ``sb3_ppo_cuda``: stable-baselines3 PPO with its networks on the GPU;
- ``jax_loop``: a jitted JAX MLP policy stepping a NumPy CartPole (GPU when present).

With ``--sessions DIR`` the loop profiles itself in alternating segments, each in its own
``rlscope.profile()`` session under DIR (``experiments.overhead.sessions``); run it outside
``rlscope prof``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

import rlscope

STEP_DIVISOR = {"gym_numpy": 1, "sb3_ppo": 25, "sb3_a2c": 25, "sb3_ppo_cuda": 25, "jax_loop": 10}
WORKLOADS = tuple(STEP_DIVISOR)
GPU_WORKLOADS = ("sb3_ppo_cuda", "jax_loop")
# --sessions: iterations per SessionSegments.tick() (~0.3-0.6 ms apart; SB3 ticks once per rollout)
TICK_EVERY = {"gym_numpy": 32, "jax_loop": 8}


if TYPE_CHECKING:
    from experiments.overhead.sessions import SessionSegments


def gym_numpy(steps: int, segments: SessionSegments | None = None) -> None:
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    weights = np.random.default_rng(0).normal(size=(4, 2))
    for i in range(steps):
        if segments is not None and i % segments.every == 0:
            segments.tick()
        rlscope.step()
        with rlscope.operation("inference"):
            action = int(np.argmax(obs @ weights))
        with rlscope.operation("simulation"):
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                obs, _ = env.reset()


def sb3(steps: int, algorithm: str, device: str, segments: SessionSegments | None = None) -> None:
    """One rlscope.step() per rollout (with the update after it). PPO collects 64 steps per
    rollout instead of 2048, so that short runs still have many iterations."""
    import stable_baselines3
    import torch
    from stable_baselines3.common.callbacks import BaseCallback

    class StepPerRollout(BaseCallback):
        def _on_rollout_start(self) -> None:
            if segments is not None:
                segments.tick()
            rlscope.step()

        def _on_step(self) -> bool:
            return True

    torch.set_num_threads(1)
    cls = getattr(stable_baselines3, algorithm)
    options = {"n_steps": 64, "batch_size": 64} if algorithm == "PPO" else {}
    model = cls("MlpPolicy", "CartPole-v1", device=device, seed=0, verbose=0, **options)
    with rlscope.operation("learn"):
        model.learn(total_timesteps=steps, callback=StepPerRollout())
        if segments is not None:  # its last session ends inside "learn", as it began
            segments.close()


def jax_loop(steps: int, segments: SessionSegments | None = None) -> None:
    import jax
    import jax.numpy as jnp

    from experiments.datacollection.backends.dynamics import cartpole_dynamics, terminated_mask

    key = jax.random.PRNGKey(0)
    w1, w2 = jax.random.normal(key, (4, 64)) * 0.1, jax.random.normal(key, (64, 2)) * 0.1

    @jax.jit
    def policy(obs: jnp.ndarray) -> jnp.ndarray:
        return jnp.argmax(jnp.tanh(obs @ w1) @ w2, axis=1)

    rng = np.random.default_rng(0)
    state = rng.uniform(-0.05, 0.05, size=(1, 4))
    for i in range(steps):
        if segments is not None and i % segments.every == 0:
            segments.tick()
        rlscope.step()
        with rlscope.operation("inference"):
            action = np.asarray(policy(jnp.asarray(state, dtype=jnp.float32)))
        with rlscope.operation("simulation"):
            state = cartpole_dynamics(state, action == 1)
            if terminated_mask(state)[0]:
                state = rng.uniform(-0.05, 0.05, size=(1, 4))


def run(workload: str, steps: int, segments: SessionSegments | None = None) -> None:
    if workload not in STEP_DIVISOR:
        raise SystemExit(f"unknown workload {workload!r}; one of {', '.join(WORKLOADS)}")
    steps = max(1, steps // STEP_DIVISOR[workload])
    if workload == "gym_numpy":
        gym_numpy(steps, segments)
    elif workload in ("sb3_ppo", "sb3_a2c"):
        sb3(steps, workload[4:].upper(), "cpu", segments)
    elif workload == "sb3_ppo_cuda":
        sb3(steps, "PPO", "cuda", segments)
    else:
        jax_loop(steps, segments)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m experiments.overhead.loops", description=__doc__.split("\n")[0])
    parser.add_argument("workload", choices=WORKLOADS)
    parser.add_argument("steps", type=int, help="environment steps (divided per workload, see STEP_DIVISOR)")
    parser.add_argument("--sessions", type=Path, metavar="DIR", help="profile alternating segments into DIR")
    parser.add_argument("--segment-ms", type=float, default=100.0, help="length of a segment (default 100)")
    args = parser.parse_args(argv)
    if args.sessions is None:
        run(args.workload, args.steps)
        return
    from experiments.overhead.sessions import SessionSegments

    if rlscope.enabled():
        parser.error("--sessions starts its own sessions; run it without `rlscope prof`")
    if args.segment_ms <= 0:
        parser.error(f"--segment-ms {args.segment_ms:g}: must be positive, e.g. 100")
    every = TICK_EVERY.get(args.workload, 1)
    with SessionSegments(args.sessions, args.segment_ms, every=every) as segments:  # GPU as $RLSCOPE_GPU says
        run(args.workload, args.steps, segments)


if __name__ == "__main__":
    main()
