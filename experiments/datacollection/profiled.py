"""Data collection under the profiler: where time goes as K steps are handed to the backend per
Python call (paper Fig. 5) and how many transitions each call makes (Fig. 6).

    python -m experiments.datacollection.profiled BACKEND N K ITERATIONS DEVICE

runs ITERATIONS calls of ``rollout(policy, K)`` (each one ``rlscope.step()`` and one
``data_collection`` operation) after an unannotated warm-up call that compiles. The workload
function runs that command under ``rlscope prof``, analyses the trace and returns one row per
layer of the time breakdown and one per transition type, per iteration.
"""

from __future__ import annotations

import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import rlscope
from rlscope.errors import SkipRun

__all__ = ["profiled_collection", "collect_loop", "OPERATION"]

OPERATION = "data_collection"
SKIPPED_EXIT = 3  # the loop's exit code when its backend cannot run here (reason on stderr's last line)


def collect_loop(backend: str, num_envs: int, fused_steps: int, iterations: int, device: str) -> None:
    """The annotated loop: one operation and one iteration per call of K steps."""
    import torch

    from experiments.datacollection.backends import make_backend
    from experiments.datacollection.collect import backend_options, resolve_device
    from experiments.datacollection.policy import make_policy

    device = resolve_device(device)
    env = make_backend(backend, num_envs, 0, **backend_options(backend, device))
    policy = make_policy(64, device, 0)
    with torch.inference_mode():
        obs = env.rollout(policy, env.reset(), fused_steps)
        env.synchronize()
        for _ in range(iterations):
            rlscope.step()
            with rlscope.operation(OPERATION):
                obs = env.rollout(policy, obs, fused_steps)
                env.synchronize()


def profiled_collection(backend: str, num_envs: int, fused_steps: int, iterations: int = 20,
                        device: str = "auto", timeout_s: float = 600) -> dict[str, Any]:
    """Profile :func:`collect_loop`; rows of the breakdown (seconds and share per layer, per
    iteration) and of the transitions (count per iteration)."""
    from experiments.datacollection.collect import resolve_device
    from rlscope.analyze import analyze_trace
    from rlscope.collect.launch import run_profiled
    from rlscope.plot.breakdown import stack_label

    device = resolve_device(device)
    command = [sys.executable, "-m", "experiments.datacollection.profiled", backend, str(num_envs),
               str(fused_steps), str(iterations), device]
    with tempfile.TemporaryDirectory(prefix="rlscope-collect-") as tmp:
        log_path = Path(tmp) / "log.txt"
        with log_path.open("w") as log:
            trace, code = run_profiled(command, Path(tmp) / "trace", gpu=device.startswith("cuda"), stdout=log,
                                       timeout_s=timeout_s)
        if code != 0:
            text = log_path.read_text()
            if code == SKIPPED_EXIT:
                raise SkipRun(text.strip().splitlines()[-1])
            raise RuntimeError(f"profiled loop failed (exit {code}):\n{text[-3000:]}")
        tables = analyze_trace(trace)
    frame = tables["breakdown"]
    ours = frame[(frame["thread"] == "main") & (frame["operation"] == OPERATION)].copy()
    ours["layer"] = [stack_label(c, g) for c, g in zip(ours["cpu"], ours["gpu"])]
    per_layer = ours.groupby("layer")["time_s"].sum()
    total = float(per_layer.sum())
    rows: list[dict[str, Any]] = [
        {"table": "breakdown", "layer": layer, "seconds_per_iteration": seconds / iterations,
         "share": seconds / total if total else float("nan")}
        for layer, seconds in per_layer.items()
    ]
    counts = tables["transitions"]
    counts = counts[(counts["thread"] == "main") & (counts["operation"] == OPERATION)]
    for transition, group in counts.groupby("transition"):
        rows.append({"table": "transitions", "transition": transition,
                     "per_iteration": float(group["count"].sum()) / iterations})
    return {"rows": rows, "device": device, "python": platform.python_version(), "iteration_s": total / iterations,
            "steps_per_s": num_envs * fused_steps * iterations / total if total else float("nan")}


def main(argv: list[str]) -> int:
    backend, num_envs, fused_steps, iterations, device = argv
    try:
        collect_loop(backend, int(num_envs), int(fused_steps), int(iterations), device)
    except SkipRun as skip:
        print(skip, file=sys.stderr)
        return SKIPPED_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
