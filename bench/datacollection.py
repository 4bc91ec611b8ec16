"""CartPole simulation throughput side by side on one GPU, and the CUDA kernel against its roofline.

    python bench/datacollection.py compare [--num-envs 4194304] [--fused-steps 1000]
    python bench/datacollection.py ncu-target fused|unfused [--num-envs N] [--fused-steps K]
    python bench/datacollection.py roofline NCU_CSV COMPARE_JSON

``compare`` measures, in one process and interleaved over ``--rounds``, env-steps/s of
simulation only (random actions, reset steps counted): the fused CUDA kernel (K steps per
launch; precise and hardware-approximate math), the unfused kernel (K = 1), JAX ``lax.scan``,
PyTorch eager and PyTorch in a CUDA graph (all K steps per call), gymnasium's NumPy
``CartPoleVectorEnv`` and a single gymnasium env. It prints each one's median and its ratio to
the fused kernel, plus the device's measured copy bandwidth and SM clock, as JSON lines.

``ncu-target`` launches one kernel configuration a few times for Nsight Compute to count;
``roofline`` turns those counts into instructions per env-step and the fraction of the FP32
and issue rooflines (and, for K = 1, of memory bandwidth) the measured throughput reaches.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Bytes one unfused step moves per environment: state 16 + elapsed 4 + two RNG words 8 +
# episode counter 4, each read and written.
UNFUSED_BYTES_PER_STEP = 2 * (16 + 4 + 8 + 4)
FP32_LANES_PER_SM = 128  # Hopper: 128 FP32 lanes per SM (4 partitions x 32)
ISSUE_PER_SM = 4 * 32  # one warp instruction per partition per clock, 32 threads each


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def device_facts() -> dict[str, Any]:
    import cupy

    from rlscope.nvidia import nvml

    props = cupy.cuda.runtime.getDeviceProperties(0)
    with nvml() as pynvml:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        facts = {
            "name": props["name"].decode(),
            "sms": props["multiProcessorCount"],
            "max_sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        }
    # Copy bandwidth, counting bytes read plus written (the ceiling METHOD.md asks to measure).
    a = cupy.empty(1 << 30, dtype=cupy.uint8)
    b = cupy.empty_like(a)
    a.fill(1)
    cupy.cuda.runtime.deviceSynchronize()
    times = []
    for _ in range(10):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        b[...] = a
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    facts["copy_bandwidth_gbs"] = 2 * a.nbytes / statistics.median(times) / 1e9
    return facts


def sm_clock_mhz() -> int:
    import pynvml

    return pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_CLOCK_SM)


def gymnasium_vector(num_envs: int, steps: int) -> float:
    import numpy as np
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

    env = CartPoleVectorEnv(num_envs=num_envs)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, (steps, num_envs))
    start = time.perf_counter()
    for a in actions:
        env.step(a)
    return num_envs * steps / (time.perf_counter() - start)


def gymnasium_single(steps: int) -> float:
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    space = env.action_space
    space.seed(0)
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(space.sample())
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def compare(args: argparse.Namespace) -> None:
    from experiments.datacollection.backends import make_backend
    from experiments.datacollection.simulate import time_simulation

    n, k = args.num_envs, args.fused_steps
    emit({"device": device_facts(), "num_envs": n, "fused_steps": k})
    gpu = {
        "cuda fused (precise)": (lambda: make_backend("cuda", n, 0, precise=True), k),
        "cuda fused (fast math)": (lambda: make_backend("cuda", n, 0, precise=False), k),
        "cuda unfused K=1 (precise)": (lambda: make_backend("cuda", n, 0, precise=True), 1),
        "jax lax.scan": (lambda: make_backend("jax", n, 0, device="cuda"), k),
        "torch CUDA graph": (lambda: make_backend("torch_graph", n, 0, device="cuda"), k),
        "torch eager": (lambda: make_backend("torch", n, 0, device="cuda"), k),
    }
    envs = {}
    for name, (make, steps) in gpu.items():
        envs[name] = make()
        envs[name].reset()
        envs[name].simulate(steps)  # compile / capture outside the timed rounds
        envs[name].synchronize()
    samples: dict[str, list[float]] = {name: [] for name in [*gpu, "gymnasium CartPoleVectorEnv", "gymnasium single"]}
    clocks = []
    for _ in range(args.rounds):
        for name, (_, steps) in gpu.items():
            seconds, calls, _ = time_simulation(envs[name], steps, args.min_seconds)
            samples[name].append(n * steps * calls / seconds)
            clocks.append(sm_clock_mhz())
        samples["gymnasium CartPoleVectorEnv"].append(gymnasium_vector(args.cpu_num_envs, 200))
        samples["gymnasium single"].append(gymnasium_single(20000))
    fused = statistics.median(samples["cuda fused (precise)"])
    for name, values in samples.items():
        median = statistics.median(values)
        emit({"backend": name, "steps_per_s": median, "min": min(values), "max": max(values),
              "fused_over_this": fused / median, "rounds": len(values),
              "num_envs": {"gymnasium CartPoleVectorEnv": args.cpu_num_envs, "gymnasium single": 1}.get(name, n),
              "fused_steps": 1 if name.startswith(("gymnasium", "cuda unfused")) else k})
    emit({"sm_clock_mhz_during": {"min": min(clocks), "max": max(clocks)},
          "episodes_finished_fused": envs["cuda fused (precise)"].episodes_finished()})


def ncu_target(args: argparse.Namespace) -> None:
    from experiments.datacollection.backends import make_backend

    k = args.fused_steps if args.which == "fused" else 1
    env = make_backend("cuda", args.num_envs, 0, precise=not args.fast)
    env.reset()
    for _ in range(3):
        env.simulate(k)
    env.synchronize()


def roofline(args: argparse.Namespace) -> None:
    """Per-env-step counts from ncu's CSV (one kernel per target) joined with measured rates."""
    import csv

    lines = Path(args.compare_json).read_text().splitlines()
    compare_rows = [json.loads(line) for line in lines if line.startswith("{")]
    device = next(r["device"] for r in compare_rows if "device" in r)
    rates = {r["backend"]: r["steps_per_s"] for r in compare_rows if "backend" in r}
    clock = next((r["sm_clock_mhz_during"]["max"] for r in compare_rows if "sm_clock_mhz_during" in r),
                 device["max_sm_clock_mhz"]) * 1e6
    for path in args.ncu_csv:
        label, n, k = Path(path).stem.split("__")
        n, k = int(n), int(k)
        metrics: dict[str, float] = {}
        launch_ids = set()
        with open(path) as handle:
            lines = [line for line in handle if line.startswith('"')]
        for row in csv.DictReader(lines):
            value = row["Metric Value"].replace(",", "")
            metrics[row["Metric Name"]] = metrics.get(row["Metric Name"], 0.0) + float(value or 0)
            launch_ids.add(row["ID"])
        launches = max(1, len(launch_ids))
        steps = n * k * launches
        fp32 = sum(metrics.get(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum", 0)
                   for op in ("fadd", "fmul", "ffma"))
        thread_inst = metrics.get("smsp__thread_inst_executed.sum", 0)
        warp_inst = metrics.get("smsp__inst_executed.sum", 0)
        fp32_per_step, inst_per_step = fp32 / steps, thread_inst / steps
        fp32_roof = device["sms"] * FP32_LANES_PER_SM * clock / fp32_per_step
        issue_roof = device["sms"] * ISSUE_PER_SM * clock / (warp_inst * 32 / steps)
        measured = rates[{"fused": "cuda fused (precise)", "fused-fast": "cuda fused (fast math)",
                          "unfused": "cuda unfused K=1 (precise)"}[label]]
        record = {"kernel": label, "num_envs": n, "fused_steps": k, "launches_counted": launches,
                  "fp32_inst_per_step": fp32_per_step, "thread_inst_per_step": inst_per_step,
                  "warp_inst_per_step_x32": warp_inst * 32 / steps, "sm_clock_mhz": clock / 1e6,
                  "fp32_roofline_steps_per_s": fp32_roof, "issue_roofline_steps_per_s": issue_roof,
                  "measured_steps_per_s": measured, "fraction_of_fp32_roofline": measured / fp32_roof,
                  "fraction_of_issue_roofline": measured / issue_roof}
        dram = metrics.get("dram__bytes_read.sum", 0) + metrics.get("dram__bytes_write.sum", 0)
        if dram:
            record["dram_bytes_per_step"] = dram / steps
            record["counted_bytes_per_step"] = UNFUSED_BYTES_PER_STEP if k == 1 else None
            record["achieved_bandwidth_gbs"] = measured * dram / steps / 1e9
            record["fraction_of_copy_bandwidth"] = record["achieved_bandwidth_gbs"] / device["copy_bandwidth_gbs"]
        emit(record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compare")
    p.add_argument("--num-envs", type=int, default=1 << 22)
    p.add_argument("--fused-steps", type=int, default=1000)
    p.add_argument("--cpu-num-envs", type=int, default=1 << 16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--min-seconds", type=float, default=1.0)
    p = sub.add_parser("ncu-target")
    p.add_argument("which", choices=["fused", "unfused"])
    p.add_argument("--num-envs", type=int, default=1 << 22)
    p.add_argument("--fused-steps", type=int, default=1000)
    p.add_argument("--fast", action="store_true")
    p = sub.add_parser("roofline")
    p.add_argument("compare_json")
    p.add_argument("ncu_csv", nargs="+", help="LABEL__N__K.csv files from ncu --csv")
    args = parser.parse_args()
    {"compare": compare, "ncu-target": ncu_target, "roofline": roofline}[args.command](args)


if __name__ == "__main__":
    main()
