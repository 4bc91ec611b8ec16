"""CartPole data collection with the MLP policy in the loop: the fused kernel beside the best
unfused ways, side by side in one process (issue: fused simulation + policy inference).

    python bench/fused_inference.py [--log2-envs 10 12 14 16 18 20 22] [--rounds 3] \
        [--out fused_inference.csv] [--figure fused_inference.png]
    ncu --kernel-name regex:cartpole_policy --launch-count 1 --launch-skip 2 --metrics \
        sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,\
        sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,\
        sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,\
        sm__instruction_throughput.avg.pct_of_peak_sustained_active,\
        sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum \
        python bench/fused_inference.py --ncu-target "fused fp16" --log2-envs 20

Per N, every configuration is built once (compiled, captured, warmed up) and then timed in
interleaved rounds, the order rotated each round, each for at least ``--min-seconds`` of whole
``rollout`` calls with the device drained before the clock stops. Samples/s = N x K x calls /
seconds (reset steps counted). Configurations:

- ``fused fp32`` / ``fused fp16``: ``cuda_fused_policy``, argmax actions, episode statistics only,
  K = 1000 steps per launch;
- ``fused fp16 + trajectory``: the same, recording (obs, action, reward, done) of T = 128 steps
  per launch (K = 128), as a PPO rollout buffer;
- ``jax scan``: JAX ``lax.scan`` over K = 1000 steps of policy + simulation;
- ``torch graph``: PyTorch, K = 1000 steps captured in one CUDA graph;
- ``cuda sim + torch policy``: our CUDA simulator stepped from Python with the PyTorch policy
  (K = 1000 steps per timed call).

A configuration that fails to build (out of memory, a graph too large) is reported with its
error and left out of that N. ``--figure`` draws the rounds as the manifest's throughput figure
(one line per configuration, mean and sd over rounds). The end prints, per N, each fused configuration's ratio to the
best unfused one, and for the trajectory mode the bytes it stores per second against the
device's copy bandwidth (bytes written per second of a 1 GiB device-to-device copy).

``--ncu-target NAME`` builds one configuration at ``--log2-envs``' first N and launches it three
times more, for Nsight Compute to count (tensor-core, issue and special-function utilisation).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TRAJECTORY_BYTES = 16 + 1 + 4 + 1  # obs, action, reward, done written per env-step
UNFUSED = ("jax scan", "torch graph", "cuda sim + torch policy")


def configurations() -> dict[str, tuple[str, dict[str, Any], int]]:
    """name -> (backend, options, K)."""
    return {
        "fused fp32": ("cuda_fused_policy", {"precision": "fp32"}, 1000),
        "fused fp16": ("cuda_fused_policy", {"precision": "fp16"}, 1000),
        "fused fp16 + trajectory": ("cuda_fused_policy", {"precision": "fp16", "record": True}, 128),
        "jax scan": ("jax", {}, 1000),
        "torch graph": ("torch_graph", {}, 1000),
        "cuda sim + torch policy": ("cuda", {}, 1000),
    }


def copy_bandwidth_written() -> float:
    """Bytes written per second by a 1 GiB device-to-device copy (median of 10)."""
    import cupy

    a = cupy.ones(1 << 30, dtype=cupy.uint8)
    b = cupy.empty_like(a)
    times = []
    for _ in range(10):
        cupy.cuda.runtime.deviceSynchronize()
        started = time.perf_counter()
        b[...] = a
        cupy.cuda.runtime.deviceSynchronize()
        times.append(time.perf_counter() - started)
    del a, b
    return (1 << 30) / statistics.median(times)


def build(backend: str, options: dict[str, Any], n: int, k: int, policy: Any) -> tuple[Any, Any]:
    import torch

    from experiments.datacollection.backends import make_backend

    env = make_backend(backend, n, 0, device="cuda", **options)
    obs = env.reset()
    with torch.inference_mode():
        obs = env.rollout(policy, obs, k)  # compile / capture
        obs = env.rollout(policy, obs, k)
    env.synchronize()
    return env, obs


def timed(env: Any, obs: Any, policy: Any, k: int, min_seconds: float) -> tuple[float, Any]:
    """Samples/s over whole calls lasting at least ``min_seconds``; the last observation."""
    import torch

    calls = 0
    with torch.inference_mode():
        env.synchronize()
        started = time.perf_counter()
        while True:
            obs = env.rollout(policy, obs, k)
            calls += 1
            if calls & (calls - 1) == 0:  # drain only at 1, 2, 4, ... calls
                env.synchronize()
                seconds = time.perf_counter() - started
                if seconds >= min_seconds:
                    return env.num_envs * k * calls / seconds, obs


def main() -> None:
    import pandas as pd
    import torch

    from experiments.datacollection.policy import make_policy

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log2-envs", type=int, nargs="+", default=[10, 12, 14, 16, 18, 20, 22])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=0.3)
    parser.add_argument("--only", nargs="+", default=None, choices=list(configurations()),
                        help="configuration names to run (default: all)")
    parser.add_argument("--out", type=Path, default=None, help="CSV of every round's measurement")
    parser.add_argument("--figure", type=Path, default=None, help="samples/s vs N of every configuration (PNG/PDF)")
    parser.add_argument("--ncu-target", default=None, choices=list(configurations()),
                        help="only launch this configuration a few times, for Nsight Compute")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    policy = make_policy(64, "cuda", 0)
    if args.ncu_target is not None:
        backend, options, k = configurations()[args.ncu_target]
        env, obs = build(backend, options, 1 << args.log2_envs[0], k, policy)
        with torch.inference_mode():
            for _ in range(3):
                obs = env.rollout(policy, obs, k)
        env.synchronize()
        return
    configs = {name: c for name, c in configurations().items() if args.only is None or name in args.only}
    bandwidth = copy_bandwidth_written()
    print(f"device {torch.cuda.get_device_name()}; copy bandwidth {bandwidth / 1e9:.0f} GB/s written", flush=True)
    rows = []
    for log2 in args.log2_envs:
        n = 1 << log2
        built: dict[str, tuple[Any, Any]] = {}
        for name, (backend, options, k) in configs.items():
            try:
                built[name] = build(backend, options, n, k, policy)
            except Exception as err:  # a configuration this N cannot hold: reported, the others go on
                print(f"N=2^{log2} {name}: not measured ({type(err).__name__}: {str(err)[:160]})", flush=True)
                torch.cuda.empty_cache()
        names = list(built)
        for round_ in range(args.rounds):
            shift = round_ % max(1, len(names))
            for name in names[shift:] + names[:shift]:
                env, obs = built[name]
                rate, obs = timed(env, obs, policy, configs[name][2], args.min_seconds)
                built[name] = (env, obs)
                backend, options, k = configs[name]
                rows.append({"num_envs": n, "config": name, "round": round_, "samples_per_s": rate,
                             "backend": backend, "precision": options.get("precision", ""),
                             "record": options.get("record", False), "fused_steps": k, "device": "cuda",
                             "status": "ok"})
        del built
        torch.cuda.empty_cache()
        frame = pd.DataFrame([r for r in rows if r["num_envs"] == n])
        if frame.empty:
            continue
        medians = frame.groupby("config")["samples_per_s"].agg(["median", "min", "max"])
        best_unfused = medians.loc[medians.index.intersection(UNFUSED), "median"].max()
        for name, stats in medians.iterrows():
            ratio = stats["median"] / best_unfused if best_unfused == best_unfused else float("nan")
            extra = (f"; stores {stats['median'] * TRAJECTORY_BYTES / 1e9:.0f} GB/s = "
                     f"{stats['median'] * TRAJECTORY_BYTES / bandwidth:.0%} of copy bandwidth"
                     if "trajectory" in name else "")
            print(f"N=2^{log2} {name:26s} {stats['median']:.3e} samples/s [{stats['min']:.3e}, {stats['max']:.3e}]"
                  f"  x{ratio:.2f} best unfused{extra}", flush=True)
    if args.out is not None:
        pd.DataFrame(rows).to_csv(args.out, index=False)
    if args.figure is not None and rows:
        from rlscope.plot.throughput import throughput_vs_envs

        subtitle = f"{torch.cuda.get_device_name()}, bench/fused_inference.py, mean ± sd over {args.rounds} rounds"
        throughput_vs_envs(pd.DataFrame(rows), {"subtitle": subtitle}).savefig(args.figure, dpi=150)


if __name__ == "__main__":
    main()
