"""GPU collector checks and measurements; each subcommand prints one JSON line.

    python bench/gpu_collector.py torch-compare STEPS OUT_DIR   kernels vs torch.profiler, same loop
    python bench/gpu_collector.py jax-compare STEPS OUT_DIR     kernels vs jax.profiler, same loop
    python bench/gpu_collector.py conflict OUT_DIR              rlscope inside torch.profiler: the error
    python bench/gpu_collector.py drift SECONDS OUT_DIR         clock agreement over a long run
    python bench/gpu_collector.py utilisation SECONDS OUT_DIR   tiny kernels with CPU gaps: nvidia-smi vs busy
    python bench/gpu_collector.py fixtures OUT_DIR              raw CUPTI buffers + decoded rows for tests

Run by bench/gpu_collector_suite.sh on a GPU machine; results go to docs/results/gpu-collector.md.
``rl_loop`` is the tiny-kernel loop whose profiling overhead bench/gpu_overhead.py measures.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import rlscope
from rlscope.analyze.attribution import read_attributed
from rlscope.trace.schema import Kind


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def gpu_rows(trace_dir: Path) -> Any:
    """The kernel rows of the (single) process traced into ``trace_dir``."""
    (proc,) = read_attributed(trace_dir)
    ev = proc.events
    return ev[ev["kind"] == int(Kind.GPU_KERNEL)], proc


# --- PyTorch MLP training loop, under rlscope and under torch.profiler ------------------------
def torch_train(steps: int, annotate: bool = True) -> None:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 4)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(512, 64, device="cuda"), torch.randn(512, 4, device="cuda")
    op = rlscope.operation if annotate else (lambda name: contextlib.nullcontext())
    for _ in range(steps):
        rlscope.step()
        with op("forward"):
            loss = ((model(x) - y) ** 2).mean()
        with op("backward"):
            opt.zero_grad()
            loss.backward()
        with op("optimizer"):
            opt.step()
    torch.cuda.synchronize()


def torch_profiler_kernels(run: Any, out: Path) -> tuple[int, float]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
    path = out / "torch_trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    return len(kernels), sum(float(e["dur"]) for e in kernels) * 1e3


def torch_compare(steps: int, out: Path) -> None:
    """rlscope first, then torch.profiler on the same loop: once torch.profiler has run it keeps
    CUPTI for the rest of the process, so each process compares one round."""
    torch_train(20, annotate=False)  # warm-up: cuBLAS handles, allocator, lazy module loading
    trace = out / f"torch_rlscope_{time.time_ns()}"
    with rlscope.profile(trace, process="torch_mlp"):
        torch_train(steps)
    kernels, proc = gpu_rows(trace)
    dur = (kernels["end_ns"] - kernels["start_ns"]).sum()
    tp_count, tp_ns = torch_profiler_kernels(lambda: torch_train(steps, annotate=False), out)
    names = list(proc.events["name"].cat.categories)
    per_op = kernels["operation"].map(lambda o: names[o] if o >= 0 else "(none)").value_counts().to_dict()
    emit(check="torch-compare", steps=steps, rlscope_kernels=len(kernels), rlscope_kernel_ns=int(dur),
         torch_kernels=tp_count, torch_kernel_ns=tp_ns, count_equal=len(kernels) == tp_count,
         time_diff_pct=100.0 * (dur - tp_ns) / tp_ns, kernels_per_operation=per_op,
         dropped=proc.meta["gpu"]["dropped"])


# --- JAX jitted training loop, under rlscope and under jax.profiler ----------------------------
def jax_setup() -> tuple[Any, Any]:
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    params = [jax.random.normal(k1, (64, 256)) * 0.1, jax.random.normal(k2, (256, 256)) * 0.1,
              jax.random.normal(k3, (256, 4)) * 0.1]
    x, y = jax.random.normal(k4, (512, 64)), jnp.ones((512, 4))

    def loss(ps: Any) -> Any:
        h = x
        for w in ps[:-1]:
            h = jax.nn.relu(h @ w)
        return ((h @ ps[-1] - y) ** 2).mean()

    @jax.jit
    def step(ps: Any) -> Any:
        grads = jax.grad(loss)(ps)
        return [p - 1e-3 * g for p, g in zip(ps, grads)]

    return step, params


def jax_train(step: Any, params: Any, steps: int) -> Any:
    import jax

    for _ in range(steps):
        rlscope.step()
        with rlscope.operation("train_step"):
            params = step(params)
    jax.block_until_ready(params)
    return params


def jax_profiler_kernels(trace_dir: Path) -> tuple[int, float, dict[str, int]]:
    """Kernels on the GPU streams of a jax.profiler trace (perfetto JSON), and the lines seen."""
    (path,) = sorted(trace_dir.rglob("perfetto_trace.json.gz"))
    data = json.loads(gzip.decompress(path.read_bytes()))
    events = data["traceEvents"] if isinstance(data, dict) else data
    pids = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    tids = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M"
            and e.get("name") == "thread_name"}
    lines: dict[str, int] = {}
    count, total = 0, 0.0
    for e in events:
        if e.get("ph") != "X":
            continue
        process = pids.get(e["pid"], "")
        line = tids.get((e["pid"], e["tid"]), "")
        if "/device:GPU" not in process:
            continue
        lines[line] = lines.get(line, 0) + 1
        if line.startswith("Stream") and "memcpy" not in e["name"].lower() and "memset" not in e["name"].lower():
            count += 1
            total += float(e["dur"]) * 1e3
    return count, total, lines


def jax_compare(steps: int, out: Path) -> None:
    import jax

    step, params = jax_setup()
    params = jax_train(step, params, 20)  # compile and warm up
    results = []
    for order in range(2):
        trace = out / f"jax_rlscope{order}"
        with rlscope.profile(trace, process="jax_mlp"):
            params = jax_train(step, params, steps)
        kernels, proc = gpu_rows(trace)
        dur = (kernels["end_ns"] - kernels["start_ns"]).sum()
        jtrace = out / f"jax_profiler{order}"
        with jax.profiler.trace(str(jtrace), create_perfetto_trace=True):
            params = jax_train(step, params, steps)
        jp_count, jp_ns, lines = jax_profiler_kernels(jtrace)
        results.append(dict(rlscope_kernels=len(kernels), rlscope_kernel_ns=int(dur), jax_kernels=jp_count,
                            jax_kernel_ns=jp_ns, count_equal=len(kernels) == jp_count,
                            time_diff_pct=100.0 * (dur - jp_ns) / jp_ns if jp_ns else None,
                            attributed_fraction=float((kernels["operation"] >= 0).mean()),
                            launch_threads=int(kernels["tid"].nunique()), jax_lines=lines,
                            gpu_meta=proc.meta.get("gpu")))
    emit(check="jax-compare", steps=steps, jax=jax.__version__, rounds=results)


def conflict(out: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    from rlscope.collect.cupti import GpuCollectorError

    torch_train(5, annotate=False)
    message = None
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        torch_train(2, annotate=False)
        try:
            with rlscope.profile(out / "conflict", process="conflict"):
                torch_train(2)
        except GpuCollectorError as err:
            message = str(err)
    emit(check="conflict", raised=message is not None, message=message)


# --- the RL-like loop of tiny kernels ----------------------------------------------------------
def rl_loop(steps: int, segments: Any = None) -> None:
    """NumPy CartPole step, batch-1 MLP inference on the GPU, backprop every 32 steps; annotated
    with rlscope's calls (no-ops when nothing profiles). ``segments``: an
    ``experiments.overhead.sessions.SessionSegments`` ticked every ``segments.every`` steps."""
    import torch

    from experiments.datacollection.backends.dynamics import cartpole_dynamics, terminated_mask

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                 torch.nn.Linear(64, 2)).cuda()
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    state = rng.uniform(-0.05, 0.05, size=(1, 4))
    batch: list[np.ndarray] = []
    for i in range(steps):
        if segments is not None and i % segments.every == 0:
            segments.tick()
        rlscope.step()
        with rlscope.operation("inference"):
            with torch.no_grad():
                obs = torch.as_tensor(state, dtype=torch.float32, device="cuda")
                action = int(policy(obs).argmax())
        with rlscope.operation("simulation"):
            state = cartpole_dynamics(state, np.array([action == 1]))
            if terminated_mask(state)[0]:
                state = rng.uniform(-0.05, 0.05, size=(1, 4))
            batch.append(state[0].astype(np.float32))
        if (i + 1) % 32 == 0:
            with rlscope.operation("backpropagation"):
                obs = torch.as_tensor(np.stack(batch), device="cuda")
                loss = policy(obs).logsumexp(1).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            batch.clear()
    torch.cuda.synchronize()


# --- one clock: CPU brackets around tiny kernels, over a long run --------------------------------
def drift(seconds: float, out: Path) -> None:
    import torch

    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    probes = []
    trace = out / "drift"
    with rlscope.profile(trace, process="drift"):
        t_end = time.perf_counter() + seconds
        next_probe = 0.0
        while True:
            now = time.perf_counter()
            if now >= next_probe:
                torch.cuda.synchronize()
                with rlscope.operation("probe"):
                    before = time.perf_counter_ns()
                    x.add_(1)  # one tiny kernel, bracketed by CPU clock reads
                    torch.cuda.synchronize()
                    after = time.perf_counter_ns()
                probes.append((before, after))
                next_probe = now + 5.0
            if now >= t_end:
                break
            with rlscope.operation("work"):
                for _ in range(50):
                    x.mul_(1.0)
                torch.cuda.synchronize()
    (proc,) = read_attributed(trace)
    ev = proc.events
    probe_code = list(ev["name"].cat.categories).index("probe")
    kernels = ev[(ev["kind"] == int(Kind.GPU_KERNEL)) & (ev["operation"] == probe_code)].sort_values("start_ns")
    rows = []
    for (before, after), (_, k) in zip(probes, kernels.iterrows()):
        rows.append(dict(t_s=(before - probes[0][0]) / 1e9, kernel_after_launch_us=(k["start_ns"] - before) / 1e3,
                         kernel_before_sync_us=(after - k["end_ns"]) / 1e3,
                         inside=bool(before <= k["start_ns"] and k["end_ns"] <= after)))
    # The first probe pays lazy module loading; from the second on, the kernel's end before the
    # CPU saw the synchronize return should not trend if both clocks agree.
    t = np.array([r["t_s"] for r in rows[1:]])
    gap = np.array([r["kernel_before_sync_us"] for r in rows[1:]])
    slope = float(np.polyfit(t, gap, 1)[0]) if len(t) > 1 else float("nan")
    emit(check="drift", seconds=seconds, probes=rows, all_inside=all(r["inside"] for r in rows),
         end_to_sync_us_min_max=[float(gap.min()), float(gap.max())], trend_us_per_minute=slope * 60,
         gpu_meta=proc.meta.get("gpu"))


# --- nvidia-smi vs true GPU-bound time -------------------------------------------------------------
def utilisation(seconds: float, out: Path) -> None:
    """A few-microsecond kernel, then a CPU gap; gaps from 1 ms down to none, ``seconds`` each."""
    import torch

    from rlscope.analyze import analyze_trace, write_tables
    from rlscope.plot.render import save_figure
    from rlscope.plot.utilisation import utilisation_over_time

    x = torch.zeros(1024, device="cuda")
    gaps_us = (1000, 200, 50, 10, 0)
    trace = out / "utilisation"
    with rlscope.profile(trace, process="tiny_kernels", transitions=False):
        for gap in gaps_us:
            t_end = time.perf_counter() + seconds
            while time.perf_counter() < t_end:
                with rlscope.operation("inference"):
                    x.mul_(1.0001)
                with rlscope.operation("simulation"):
                    spin = time.perf_counter() + gap * 1e-6
                    while time.perf_counter() < spin:
                        pass
            torch.cuda.synchronize()
    tables = analyze_trace(trace)
    write_tables(tables, trace / "analysis")
    util = tables["utilisation"]
    save_figure(utilisation_over_time(util, f"Tiny kernels with CPU gaps of {', '.join(map(str, gaps_us))} us "
                                            f"({seconds:g} s each)"), out, "gpu_utilisation")
    util = util.assign(gap_us=[gaps_us[min(int(t // seconds), len(gaps_us) - 1)] for t in util["time_s"]])
    steady = util[(util["time_s"] % seconds) >= 1.0]  # skip each segment's first second
    table = steady.groupby(["gap_us", "measure"])["percent"].mean().round(2).unstack()
    emit(check="utilisation", seconds_per_gap=seconds,
         mean_percent={int(g): row.to_dict() for g, row in table.iterrows()})


def fixtures(out: Path) -> None:
    """A tiny profiled run whose raw CUPTI buffers are kept, with what rlscope decoded from them."""
    dump = out / "buffers"
    os.environ["RLSCOPE_CUPTI_DUMP_DIR"] = str(dump)
    trace = out / "fixture_trace"
    import torch

    x = torch.ones(256, device="cuda")
    torch.cuda.synchronize()
    with rlscope.profile(trace, process="fixture", transitions=False):
        with rlscope.operation("compute"):
            y = (x * 2).sum()
            z = torch.empty(256, device="cuda")
            z.zero_()
        with rlscope.operation("copy"):
            y.item()
            x.cpu()
    emit(check="fixtures", buffers=sorted(p.name for p in dump.iterdir()))


def main() -> None:
    command, *args = sys.argv[1:]
    out = Path(args[-1])
    out.mkdir(parents=True, exist_ok=True)
    if command == "torch-compare":
        torch_compare(int(args[0]), out)
    elif command == "jax-compare":
        jax_compare(int(args[0]), out)
    elif command == "conflict":
        conflict(out)
    elif command == "drift":
        drift(float(args[0]), out)
    elif command == "utilisation":
        utilisation(float(args[0]), out)
    elif command == "fixtures":
        fixtures(out)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
