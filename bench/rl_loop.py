"""A CPU RL data-collection loop (gymnasium CartPole + PyTorch MLP inference), in one of three
instrumentation modes; prints the loop's wall time as JSON. Used by profiling_overhead.py.

    python bench/rl_loop.py MODE STEPS TRACE_DIR     MODE: off | hook | annotations | transitions

``hook`` installs the transition collector with no targets: it records nothing, so its time is
the floor that the interpreter's event hook alone costs (sys.setprofile on 3.11,
sys.monitoring CALL events on 3.12).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time

import gymnasium as gym
import torch

import rlscope


def loop(steps: int, annotate: bool) -> None:
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                 torch.nn.Linear(64, 2))
    op = rlscope.operation if annotate else (lambda name: contextlib.nullcontext())
    with torch.inference_mode():
        for _ in range(steps):
            if annotate:
                rlscope.step()
            with op("inference"):
                action = int(policy(torch.as_tensor(obs)).argmax())
            with op("simulation"):
                obs, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    obs, _ = env.reset()


def main() -> None:
    mode, steps, trace_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(1)
    loop(200, annotate=False)  # warm-up: first-call costs are not what is measured
    if mode == "off":
        t0 = time.perf_counter()
        loop(steps, annotate=False)
        loop_s, stop_s = time.perf_counter() - t0, 0.0
    elif mode == "hook":
        from pathlib import Path

        from rlscope.collect.python import TransitionCollector
        from rlscope.trace.writer import TraceWriter

        writer = TraceWriter(Path(trace_dir) / "events.arrows")
        collector = TransitionCollector(writer, targets={})
        collector.start()
        t0 = time.perf_counter()
        loop(steps, annotate=False)
        loop_s = time.perf_counter() - t0
        collector.stop()
        writer.close()
        stop_s = 0.0
    else:
        with rlscope.profile(trace_dir, transitions=(mode == "transitions")):
            t0 = time.perf_counter()
            loop(steps, annotate=True)
            loop_s = time.perf_counter() - t0
        stop_s = time.perf_counter() - t0 - loop_s
    print(json.dumps({"mode": mode, "loop_s": loop_s, "stop_s": stop_s}))


if __name__ == "__main__":
    main()
