"""A multi-process RL workload on one GPU (RL-Scope's scale-up case study): M actors and a learner.

    python -m experiments.casestudies.scale_up WORKERS DURATION_S DEVICE LOG_DIR [--crash-worker I]

A compact actor/learner loop of our own, laid out as minigo's self-play: each of the M worker
processes plays CartPole (gymnasium) and chooses every action with a DQN's Q-network on the
shared GPU, one observation at a time (``inference``; ``simulation`` for the environment's step);
it sends its transitions to the learner in blocks. The learner process keeps a replay buffer and
runs DQN updates of a batch of 256 (``backpropagation``), sending new weights to the workers every
``PUBLISH_EVERY`` updates. The launcher starts them all (multiprocessing, spawn), waits until
every process is ready (CUDA initialised, networks built), lets them run ``DURATION_S`` seconds
and stops them. Every process names itself (``rlscope.profile(process=...)``) and marks the
window it ran in with the phase ``running``, so ``rlscope prof`` gives one trace per process and
the analysis one breakdown per process over the same window.

Each process writes its output to ``LOG_DIR/<name>.log``. A process that fails makes the launcher
stop the others and exit 1 naming it and its log. ``--crash-worker I`` makes worker I raise after
its first steps: how that handling is tested.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main", "LAUNCHER", "LEARNER", "RUNNING", "worker_name"]

LEARNER, LAUNCHER, RUNNING, STOPPING = "learner", "launcher", "running", "stopping"
HIDDEN = 64  # the Q-network: 4 -> 64 -> 64 -> 2, ReLU
BLOCK = 64  # transitions per message to the learner
BATCH, BUFFER, PUBLISH_EVERY, GAMMA = 256, 50_000, 50, 0.99
START_TIMEOUT_S = 600  # processes that are not ready by then (16 CUDA contexts take a while) fail the run


def worker_name(index: int) -> str:
    return f"worker{index}"


def _q_network(device: str) -> Any:
    import torch

    return torch.nn.Sequential(torch.nn.Linear(4, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN),
                               torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 2)).to(device)


def _logged(name: str, log_dir: str) -> None:
    """Send this process's output (Python's and native code's) to ``log_dir/name.log``."""
    log = os.open(Path(log_dir) / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for stream in (1, 2):
        os.dup2(log, stream)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)


def _worker(index: int, device: str, log_dir: str, transitions: Any, weights: Any, ready: Any, go: Any, stop: Any,
            crash: bool) -> None:
    _logged(worker_name(index), log_dir)
    transitions.cancel_join_thread()  # at stop, exit without waiting for the learner to read what is queued
    import gymnasium as gym
    import numpy as np
    import torch

    import rlscope

    with rlscope.profile(process=worker_name(index)):
        net = _q_network(device)
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=index)
        rng = np.random.default_rng(index)
        block: list[tuple[Any, ...]] = []
        with torch.no_grad():
            net(torch.zeros(1, 4, device=device))  # first-use work (cuBLAS handle) before the window
        ready.release()
        go.wait()
        rlscope.set_phase(RUNNING)
        steps = 0
        while not stop.is_set():
            rlscope.step()
            with rlscope.operation("inference"), torch.no_grad():
                q = net(torch.as_tensor(obs, device=device).unsqueeze(0))
                action = int(q.argmax()) if rng.random() > 0.1 else int(rng.integers(2))
            with rlscope.operation("simulation"):
                next_obs, reward, terminated, truncated, _ = env.step(action)
            block.append((obs, action, reward, next_obs, terminated))
            obs = next_obs
            if terminated or truncated:
                obs, _ = env.reset()
            steps += 1
            if crash and steps == 20:
                raise RuntimeError(f"{worker_name(index)}: crashing on purpose (--crash-worker)")
            if len(block) == BLOCK:
                _send(transitions, [np.array(column) for column in zip(*block)], stop)
                block = []
                _load_newest(net, weights)
        rlscope.set_phase(STOPPING)
    print(f"{worker_name(index)}: {steps} steps", flush=True)


def _send(transitions: Any, block: list[Any], stop: Any) -> None:
    """Put ``block`` on the learner's queue, waiting while it is full, unless told to stop."""
    while not stop.is_set():
        try:
            transitions.put(block, timeout=0.1)
            return
        except queue.Full:
            continue


def _load_newest(net: Any, weights: Any) -> None:
    import torch

    newest = None
    while True:
        try:
            newest = weights.get_nowait()
        except queue.Empty:
            break
    if newest is not None:
        net.load_state_dict({k: torch.as_tensor(v) for k, v in newest.items()})


def _learner(device: str, log_dir: str, transitions: Any, weights: list[Any], ready: Any, go: Any,
             stop: Any) -> None:
    _logged(LEARNER, log_dir)
    for box in weights:
        box.cancel_join_thread()
    import numpy as np
    import torch

    import rlscope

    with rlscope.profile(process=LEARNER):
        net, target = _q_network(device), _q_network(device)
        target.load_state_dict(net.state_dict())
        optimiser = torch.optim.Adam(net.parameters(), lr=1e-3)
        columns = [np.zeros((BUFFER, 4), np.float32), np.zeros(BUFFER, np.int64), np.zeros(BUFFER, np.float32),
                   np.zeros((BUFFER, 4), np.float32), np.zeros(BUFFER, np.float32)]
        size = position = updates = 0
        rng = np.random.default_rng(0)
        zeros = [torch.as_tensor(c[:BATCH], device=device) for c in columns]
        _update(net, target, optimiser, zeros)  # first-use work (cuBLAS, Adam's state) before the window
        target.load_state_dict(net.state_dict())
        ready.release()
        go.wait()
        rlscope.set_phase(RUNNING)
        while not stop.is_set():
            try:
                block = transitions.get(timeout=0.01) if size < BATCH else transitions.get_nowait()
            except queue.Empty:
                block = None
            if block is not None:
                rows = (position + np.arange(len(block[0]))) % BUFFER
                for column, values in zip(columns, block):
                    column[rows] = values
                position, size = int(rows[-1] + 1) % BUFFER, min(BUFFER, size + len(block[0]))
            if size < BATCH:
                continue
            rlscope.step()
            with rlscope.operation("backpropagation"):
                pick = rng.integers(size, size=BATCH)
                batch = [torch.as_tensor(c[pick], device=device) for c in columns]
                _update(net, target, optimiser, batch)
            updates += 1
            if updates % PUBLISH_EVERY == 0:
                target.load_state_dict(net.state_dict())
                state = {k: v.cpu().numpy() for k, v in net.state_dict().items()}
                for box in weights:
                    if box.empty():
                        box.put(state)
        rlscope.set_phase(STOPPING)
    print(f"{LEARNER}: {updates} updates", flush=True)


def _update(net: Any, target: Any, optimiser: Any, batch: list[Any]) -> None:
    """One DQN step: regress Q(s, a) on r + γ max Q_target(s') for non-terminal s'."""
    import torch

    obs, action, reward, next_obs, done = batch
    with torch.no_grad():
        goal = reward + GAMMA * (1 - done) * target(next_obs).max(dim=1).values
    loss = torch.nn.functional.smooth_l1_loss(net(obs).gather(1, action.unsqueeze(1)).squeeze(1), goal)
    optimiser.zero_grad()
    loss.backward()
    optimiser.step()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workers", type=int)
    parser.add_argument("duration_s", type=float)
    parser.add_argument("device")
    parser.add_argument("log_dir")
    parser.add_argument("--crash-worker", type=int, default=None)
    args = parser.parse_args(argv)
    if args.workers < 1 or args.duration_s <= 0:
        parser.error("WORKERS must be at least 1 and DURATION_S positive")
    import rlscope

    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    context = mp.get_context("spawn")  # CUDA cannot be used in forked children
    transitions = context.Queue(maxsize=16 * args.workers)
    weights = [context.Queue(maxsize=1) for _ in range(args.workers)]
    ready, go, stop = context.Semaphore(0), context.Event(), context.Event()
    processes = {LEARNER: context.Process(target=_learner, name=LEARNER,
                                          args=(args.device, args.log_dir, transitions, weights, ready, go, stop))}
    for i in range(args.workers):
        processes[worker_name(i)] = context.Process(
            target=_worker, name=worker_name(i),
            args=(i, args.device, args.log_dir, transitions, weights[i], ready, go, stop, i == args.crash_worker))
    with rlscope.profile(process=LAUNCHER):
        for process in processes.values():
            process.start()
        failed = _wait_ready(processes, ready)
        if not failed:
            rlscope.set_phase(RUNNING)  # the window the analysis reads
            go.set()
            failed = _run_for(processes, args.duration_s)
            rlscope.set_phase(STOPPING)
        stop.set()
        go.set()
        for name, process in processes.items():
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
                failed.append(name)
            elif process.exitcode != 0 and name not in failed:
                failed.append(name)
    if failed:
        logs = ", ".join(f"{name} (exit {processes[name].exitcode}): {Path(args.log_dir) / name}.log"
                         for name in failed)
        print(f"failed: {logs}", file=sys.stderr)
        return 1
    return 0


def _wait_ready(processes: dict[str, Any], ready: Any) -> list[str]:
    """Wait until every process is ready; the names of those that died first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    for _ in processes:
        while not ready.acquire(timeout=0.5):
            dead = [name for name, p in processes.items() if p.exitcode not in (None, 0)]
            if dead:
                return dead
            if time.monotonic() > deadline:
                return [name for name, p in processes.items() if p.is_alive()]
    return []


def _run_for(processes: dict[str, Any], duration_s: float) -> list[str]:
    """Let everything run ``duration_s``; the names of processes that died meanwhile."""
    end = time.monotonic() + duration_s
    while time.monotonic() < end:
        dead = [name for name, p in processes.items() if p.exitcode is not None]
        if dead:
            return dead
        time.sleep(min(0.2, max(0.0, end - time.monotonic())))
    return []


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
