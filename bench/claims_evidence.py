"""Measurements that explain where our GPU numbers differ from the paper's (issue 52), as tidy rows.

    python bench/claims_evidence.py dispatch --out evidence.csv
    python bench/claims_evidence.py cpp-split --out evidence.csv [--num-envs 4096]
    python bench/claims_evidence.py rates --out evidence.csv
    python bench/claims_evidence.py ncu-target xla|fused|complexity [--num-envs N] [--fused-steps K]
    python bench/claims_evidence.py from-ncu xla|fused|complexity NCU_CSV --out evidence.csv [--num-envs N]

Every command appends rows ``measurement, backend, variant, num_envs, state_factor, fused_steps,
value, unit`` to ``--out``. What each answers:

- ``dispatch``: what one call costs the host on this GPU (a 2080 Ti-era stack in the paper): a
  jitted ``lax.scan`` with a trivial body (K = 1 and 1000), one eager PyTorch op, one CuPy kernel
  launch, and our JAX CartPole at N = 1; back to back (``async``) and waiting for each (``sync``).
- ``cpp-split``: where the C++ (and gym) data-collection loop spends a step, policy inference
  (with its host-device copies) against simulation, with the policy on the GPU and on the CPU.
- ``rates``: simulation-only env-steps/s of XLA and the CUDA kernel at K = 1 and 1000, N = 2^16
  and 2^22, in one process, the denominators of the ncu counts below.
- ``ncu-target`` runs one configuration for Nsight Compute; ``from-ncu`` turns its CSV
  (``ncu --csv --print-units base``, its standard output) into rows: kernels and DRAM bytes per env-step
  of the XLA scan and the fused kernel (``xla``, ``fused``), and the fused and unfused kernels'
  occupancy, registers, local-memory traffic, L2 hit rate and DRAM bytes at several N and S
  (``complexity``). ``bench/datacollection_suite.sh`` stage ``evidence`` runs them all.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COLUMNS = ["measurement", "backend", "variant", "num_envs", "state_factor", "fused_steps", "value", "unit"]
# The complexity target's default configurations, (N, S).
COMPLEXITY_CONFIGS = "4096:256,4096:2048,1048576:256,1048576:2048"


class Rows:
    """Rows appended to a CSV (header written once); each also printed, so a log shows them."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def add(self, measurement: str, backend: str, value: float, unit: str, variant: str = "",
            num_envs: int | str = "", state_factor: int | str = "", fused_steps: int | str = "") -> None:
        row = dict(zip(COLUMNS, (measurement, backend, variant, num_envs, state_factor, fused_steps,
                                 f"{value:.6g}" if isinstance(value, float) else value, unit)))
        new = not self.path.exists()
        with self.path.open("a", newline="") as handle:
            writer = csv.DictWriter(handle, COLUMNS)
            if new:
                writer.writeheader()
            writer.writerow(row)
        print(",".join(str(row[c]) for c in COLUMNS), flush=True)


def _per_call(call: Any, wait: Any, calls: int, sync_each: bool, rounds: int = 3) -> float:
    """Median over ``rounds`` of seconds per call of ``call()``: back to back, waiting once at the
    end, or waiting after each call."""
    times = []
    for _ in range(rounds):
        wait()
        started = time.perf_counter()
        for _ in range(calls):
            call()
            if sync_each:
                wait()
        wait()
        times.append((time.perf_counter() - started) / calls)
    return statistics.median(times)


def dispatch(args: argparse.Namespace) -> None:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp
    import torch

    from experiments.datacollection.backends import make_backend

    rows = Rows(args.out)
    name = torch.cuda.get_device_name(0)
    rows.add("device", name, float(torch.cuda.get_device_properties(0).multi_processor_count), "SMs",
             variant=f"torch {torch.__version__}, jax {jax.__version__}, CUDA {torch.version.cuda}")
    gpu = jax.devices("gpu")[0]
    for k in (1, 1000):
        scan = jax.jit(lambda c, k=k: jax.lax.scan(lambda c, _: (c * 0.999 + 1.0, None), c, None, length=k)[0])
        state = {"x": jax.device_put(jnp.zeros(4, jnp.float32), gpu)}
        state["x"] = scan(state["x"]).block_until_ready()  # compiles

        def call(state: dict[str, Any] = state, scan: Any = scan) -> None:
            state["x"] = scan(state["x"])

        def wait(state: dict[str, Any] = state) -> None:
            state["x"].block_until_ready()

        for mode in ("async", "sync"):
            seconds = _per_call(call, wait, 2000 if k == 1 else 200, mode == "sync")
            rows.add("dispatch_per_call", "jax lax.scan, trivial body (4 floats)", seconds * 1e6, "us/call",
                     variant=mode, num_envs=1, fused_steps=k)
            rows.add("dispatch_per_step", "jax lax.scan, trivial body (4 floats)", seconds * 1e6 / k, "us/step",
                     variant=mode, num_envs=1, fused_steps=k)
    tensor = torch.zeros(4, device="cuda")
    tensor.add_(1.0)
    for mode in ("async", "sync"):
        seconds = _per_call(lambda: tensor.add_(1.0), torch.cuda.synchronize, 20000, mode == "sync")
        rows.add("dispatch_per_call", "torch eager op (add_, 4 floats)", seconds * 1e6, "us/call", variant=mode,
                 num_envs=1, fused_steps=1)
    cuda = make_backend("cuda", 1, 0)
    cuda.reset()
    cuda.simulate(1)
    for mode in ("async", "sync"):
        seconds = _per_call(lambda: cuda.simulate(1), cuda.synchronize, 20000, mode == "sync")
        rows.add("dispatch_per_call", "cupy kernel launch (CartPole K=1)", seconds * 1e6, "us/call", variant=mode,
                 num_envs=1, fused_steps=1)
    env = make_backend("jax", 1, 0, device="cuda")
    for k in (1, 1000):
        env.simulate(k)
        env.synchronize()
        for mode in ("async", "sync"):
            seconds = _per_call(lambda k=k: env.simulate(k), env.synchronize, 2000 if k == 1 else 50, mode == "sync")
            rows.add("dispatch_per_call", "jax CartPole simulate", seconds * 1e6, "us/call", variant=mode,
                     num_envs=1, fused_steps=k)
            rows.add("dispatch_per_step", "jax CartPole simulate", seconds * 1e6 / k, "us/step", variant=mode,
                     num_envs=1, fused_steps=k)


def cpp_split(args: argparse.Namespace) -> None:
    """Seconds per step in inference (observation to the policy's device, forward, actions back:
    ``to_policy``, the MLP, ``from_policy``) and in simulation (``step``)."""
    import torch

    from experiments.datacollection.backends import make_backend
    from experiments.datacollection.collect import backend_options
    from experiments.datacollection.policy import make_policy

    rows = Rows(args.out)
    n = args.num_envs
    devices = ["cuda", "cpu"] if torch.cuda.is_available() else ["cpu"]
    for backend, steps in (("cpp", 200), ("gymnasium", 10)):
        for device in devices:
            try:
                env = make_backend(backend, n, 0, **backend_options(backend, device))
            except Exception as err:  # gymnasium may be missing on the GPU machine: say so and go on
                print(f"{backend}: {type(err).__name__}: {err}", file=sys.stderr)
                continue
            policy = make_policy(64, device, 0)
            obs = env.reset()
            inference = simulation = 0.0
            with torch.inference_mode():
                for i in range(steps + 5):
                    a = time.perf_counter()
                    actions = env.from_policy(policy(env.to_policy(obs)).argmax(dim=1))  # .cpu() waits
                    b = time.perf_counter()
                    obs = env.step(actions).obs
                    c = time.perf_counter()
                    if i >= 5:  # warm-up: allocator, cuBLAS handles
                        inference += b - a
                        simulation += c - b
            variant = (f"policy on {device}, {getattr(env, 'threads', 1)} simulator threads, "
                       f"{torch.get_num_threads()} torch threads")
            for part, seconds in (("inference", inference), ("simulation", simulation),
                                  ("total", inference + simulation)):
                rows.add(f"loop_seconds_per_step_{part}", backend, seconds / steps * 1e6, "us/step",
                         variant=variant, num_envs=n, fused_steps=1)
            rows.add("samples_per_s", backend, n * steps / (inference + simulation), "samples/s",
                     variant=variant, num_envs=n, fused_steps=1)


def rates(args: argparse.Namespace) -> None:
    from experiments.datacollection.backends import make_backend
    from experiments.datacollection.simulate import time_simulation

    rows = Rows(args.out)
    for n in (1 << 16, 1 << 22):
        for backend, k in (("jax", 1), ("jax", 1000), ("cuda", 1), ("cuda", 1000)):
            env = make_backend(backend, n, 0, device="cuda")
            env.reset()
            seconds, calls, _ = time_simulation(env, k, args.min_seconds)
            rows.add("simulation_steps_per_s", {"jax": "xla lax.scan", "cuda": "cuda kernel"}[backend],
                     n * k * calls / seconds, "env-steps/s", num_envs=n, fused_steps=k)
            del env


def ncu_target(args: argparse.Namespace) -> None:
    from experiments.datacollection.backends import make_backend

    if args.which == "xla":
        env = make_backend("jax", args.num_envs, 0, device="cuda")
        for _ in range(args.calls):
            env.simulate(args.fused_steps)
        env.synchronize()
    elif args.which == "fused":
        env = make_backend("cuda", args.num_envs, 0)
        env.reset()
        for _ in range(2):
            env.simulate(args.fused_steps)
        env.synchronize()
    else:
        import cupy

        for config in args.configs.split(","):  # one launch of K = 1 and one of K, each configuration
            n, s = (int(v) for v in config.split(":"))
            env = make_backend("cuda", n, 0, state_factor=s)
            env.reset()
            env.simulate(1)
            env.simulate(args.fused_steps)
            env.synchronize()
            del env
            cupy.get_default_memory_pool().free_all_blocks()


def _ncu_launches(path: str) -> list[dict[str, Any]]:
    """One dict per profiled launch: kernel name, and each metric's value (base units)."""
    with open(path) as handle:
        lines = [line for line in handle if line.startswith('"')]
    launches: dict[str, dict[str, Any]] = {}
    for row in csv.DictReader(lines):
        launch = launches.setdefault(row["ID"], {"kernel": row["Kernel Name"], "metrics": {}})
        value = row["Metric Value"].replace(",", "")
        try:
            launch["metrics"][row["Metric Name"]] = float(value)
        except ValueError:
            launch["metrics"][row["Metric Name"]] = value
    return list(launches.values())


def from_ncu(args: argparse.Namespace) -> None:
    rows = Rows(args.out)
    launches = _ncu_launches(args.ncu_csv)
    if not launches:
        raise SystemExit(f"{args.ncu_csv}: no profiled launches (see ncu's log)")
    if args.which == "xla":
        # A window of the loop's kernels: each kernel of the scan's body runs once (or a fixed
        # number of times) per step. A kernel far rarer than the commonest ran outside the loop
        # (the window crossed a call's end) and is left out; the rarest of the rest gives the
        # steps the window covers (within one at its edges).
        counts = Counter(launch["kernel"] for launch in launches)
        counts = Counter({name: c for name, c in counts.items() if c >= max(counts.values()) / 4})
        launches = [launch for launch in launches if launch["kernel"] in counts]
    total = defaultdict(float)
    for launch in launches:
        for name, value in launch["metrics"].items():
            if isinstance(value, float):
                total[name] += value
    dram = lambda m: m.get("dram__bytes_read.sum", 0.0) + m.get("dram__bytes_write.sum", 0.0)  # noqa: E731
    n, k = args.num_envs, args.fused_steps
    if args.which == "xla":
        steps = min(counts.values())
        backend = "xla lax.scan"
        rows.add("kernels_per_step", backend, len(launches) / steps, "kernels/step", variant=f"{steps} steps counted",
                 num_envs=n, fused_steps=k)
        for kernel, count in sorted(counts.items()):
            rows.add("kernel_launches_per_step", backend, count / steps, "launches/step", variant=kernel[:120],
                     num_envs=n, fused_steps=k)
    else:
        steps = len(launches) * k
        backend = "cuda fused kernel"
        rows.add("kernels_per_step", backend, 1.0 / k, "kernels/step", variant=f"{len(launches)} launches counted",
                 num_envs=n, fused_steps=k)
    env_steps = steps * n
    rows.add("dram_bytes_per_env_step", backend, dram(total) / env_steps, "bytes", num_envs=n, fused_steps=k)
    rows.add("l2_bytes_per_env_step", backend, total["lts__t_bytes.sum"] / env_steps, "bytes", num_envs=n,
             fused_steps=k)
    rows.add("kernel_time_per_step", backend, total["gpu__time_duration.sum"] / steps / 1e3, "us/step",
             variant="sum of kernel durations under ncu", num_envs=n, fused_steps=k)


_TEMPLATE = re.compile(r"cartpole_simulate<(\d+),\s*(\d+),\s*(\d+)")


def from_ncu_complexity(args: argparse.Namespace) -> None:
    rows = Rows(args.out)
    launches = [launch for launch in _ncu_launches(args.ncu_csv) if _TEMPLATE.search(launch["kernel"])]
    if not launches:
        raise SystemExit(f"{args.ncu_csv}: no cartpole_simulate launches (see ncu's log)")
    for launch in launches:
        k, s, _ = (int(v) for v in _TEMPLATE.search(launch["kernel"]).groups())
        m = launch["metrics"]
        n = int(m.get("launch__grid_size", 0)) * 256  # blocks of 256, N a multiple of 256 here
        env_steps = n * k
        where = {"num_envs": n, "state_factor": s, "fused_steps": k}
        kernel = "cuda fused kernel" if k > 1 else "cuda unfused kernel"
        local = m.get("l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum", 0.0) + m.get(
            "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum", 0.0)
        dram = m.get("dram__bytes_read.sum", 0.0) + m.get("dram__bytes_write.sum", 0.0)
        for measurement, value, unit in (
                ("achieved_occupancy", m.get("sm__warps_active.avg.pct_of_peak_sustained_active"), "%"),
                ("theoretical_occupancy", m.get("sm__maximum_warps_per_active_cycle_pct"), "%"),
                ("registers_per_thread", m.get("launch__registers_per_thread"), "registers"),
                ("occupancy_limit_registers", m.get("launch__occupancy_limit_registers"), "blocks/SM"),
                ("local_memory_bytes_per_env_step", local / env_steps, "bytes"),
                ("l2_hit_rate", m.get("lts__t_sector_hit_rate.pct"), "%"),
                ("dram_bytes_per_env_step", dram / env_steps, "bytes"),
                ("dram_throughput", m.get("dram__throughput.avg.pct_of_peak_sustained_elapsed"), "% of peak"),
                ("dram_bandwidth", dram / m["gpu__time_duration.sum"] if m.get("gpu__time_duration.sum") else None,
                 "GB/s"),
                ("kernel_time_per_env_step", m.get("gpu__time_duration.sum", 0.0) / env_steps * 1e3, "ps"),
        ):
            if isinstance(value, float):
                rows.add(measurement, kernel, value, unit, **where)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("dispatch", "cpp-split", "rates"):
        p = sub.add_parser(name)
        p.add_argument("--out", required=True)
        p.add_argument("--num-envs", type=int, default=4096)
        p.add_argument("--min-seconds", type=float, default=0.3)
    p = sub.add_parser("ncu-target")
    p.add_argument("which", choices=["xla", "fused", "complexity"])
    p.add_argument("--num-envs", type=int, default=1 << 16)
    p.add_argument("--fused-steps", type=int, default=1000)
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--configs", default=COMPLEXITY_CONFIGS, help="N:S pairs for the complexity target")
    p = sub.add_parser("from-ncu")
    p.add_argument("which", choices=["xla", "fused", "complexity"])
    p.add_argument("ncu_csv")
    p.add_argument("--out", required=True)
    p.add_argument("--num-envs", type=int, default=1 << 16)
    p.add_argument("--fused-steps", type=int, default=1000)
    args = parser.parse_args()
    if args.command == "from-ncu":
        (from_ncu_complexity if args.which == "complexity" else from_ncu)(args)
    else:
        {"dispatch": dispatch, "cpp-split": cpp_split, "rates": rates, "ncu-target": ncu_target}[args.command](args)


if __name__ == "__main__":
    main()
