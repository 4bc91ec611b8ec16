"""The tables of docs/results/gpu-collector.md, from the GPU collector's data beside it.

- ``gpu_collector_h100.jsonl``: ``bench/gpu_collector_suite.sh`` (kernel counts and times against
  the frameworks' profilers, nvidia-smi against true GPU-bound time, one clock);
- ``gpu_overhead_*.csv``: ``bench/gpu_overhead.py compare --out`` (one row per group of four
  segments), summarised by that script's own ``summarize``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gpu_overhead
from tables_common import RESULTS, markdown_table, read_jsonl

COLLECTOR = RESULTS / "gpu_collector_h100.jsonl"
OVERHEAD = RESULTS / "gpu_overhead_h100.csv"  # tiny and JAX loops: rlscope and the frameworks' profilers
OVERHEAD_SB3 = RESULTS / "gpu_overhead_sb3_h100.csv"  # SB3: rlscope alone, many rounds
OVERHEAD_LAYERS = RESULTS / "gpu_overhead_layers_h100.csv"
OVERHEAD_FLOOR = RESULTS / "gpu_overhead_floor_h100.csv"  # rlscope beside CUPTI's floor, one run
_LOOPS = {"tiny": "tiny", "jax_loop": "JAX loop", "sb3_ppo_cuda": "SB3 PPO on CUDA"}


def _summaries(*paths: Path) -> dict[str, dict[str, Any]]:
    """``gpu_overhead.summarize`` of the CSVs together, each file's rounds apart, by loop."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for path in paths:
        offset = 1 + max((row["round"] for row in rows), default=-1)
        rows += [row | {"round": row["round"] + offset} for row in pd.read_csv(path).to_dict("records")]
    return {entry["loop"]: entry for entry in gpu_overhead.summarize(rows)}


def _ratio(entry: dict[str, Any], mode: str, bold: bool = False) -> str:
    """median [range] (rounds), and the median's 95% interval where there are 6 rounds or more."""
    if mode not in entry:
        return "—"
    low, high = entry[f"{mode}_range"]
    median = f"**{entry[mode]:.2f}x**" if bold else f"{entry[mode]:.2f}x"
    text = f"{median} [{low:.2f}, {high:.2f}] ({entry[f'{mode}_rounds']})"
    if f"{mode}_interval" in entry:
        text += "; median's 95% interval [{:.2f}, {:.2f}]".format(*entry[f"{mode}_interval"])
    return text


def overhead_vs_profilers() -> str:
    """Per loop: the uninstrumented time per iteration, rlscope's and the framework profiler's
    ratio (median [range] (rounds)), the profiler's added time over rlscope's while profiling and
    with each session's stop, and what a session takes to start and stop."""
    entries = _summaries(OVERHEAD) | _summaries(OVERHEAD_SB3)
    out = []
    for loop, label in _LOOPS.items():
        e = entries.get(loop)
        if e is None:
            continue
        unit = "rollout" if loop == "sb3_ppo_cuda" else "iteration"
        off = f"{e['off_us'] / 1e3:.0f} ms/{unit}" if e["off_us"] > 1e4 else f"{e['off_us']:.0f} µs/{unit}"
        added = e.get("profiler_added_over_rlscope")
        with_stop = e.get("profiler_added_over_rlscope_with_stop")
        sessions = f"{e['rlscope_start_ms']:.0f} ms / {e['rlscope_stop_ms']:.0f} ms"
        if "profiler_stop_ms" in e:
            sessions += f"; profiler {e['profiler_start_ms']:.0f} ms / {e['profiler_stop_ms']:.0f} ms"
        out.append([label, off, _ratio(e, "rlscope", bold=True), _ratio(e, "profiler"),
                    f"{added:.1f}" if added is not None else "—", f"{with_stop:.1f}" if with_stop is not None else "—",
                    sessions])
    return markdown_table(["loop", "uninstrumented", "rlscope (rounds)", "framework profiler (rounds)",
                           "profiler's added time over rlscope's, while profiling", "with each stop",
                           "session start / stop"], out)


def overhead_layers() -> str:
    """Each rlscope layer on its own against the uninstrumented loop (median [range] (rounds))."""
    entries = _summaries(OVERHEAD_LAYERS)
    modes = {"transitions": "annotations + transitions", "api": "annotations + CUDA API callbacks",
             "kernels": "annotations + GPU activity", "rlscope": "everything"}
    out = [[_LOOPS[loop], *(_ratio(e, m) for m in modes)] for loop, e in entries.items()]
    return markdown_table(["loop", *modes.values()], out)


def overhead_floor() -> str:
    """rlscope beside CUPTI's floor in one run: each mode's ratio to the uninstrumented loop, and
    rlscope's over the floor with the same kinds, paired per round (median [range] (rounds))."""
    entries = _summaries(OVERHEAD_FLOOR)
    out = []
    for loop, label in _LOOPS.items():
        e = entries.get(loop)
        if e is None:
            continue
        over = []
        for mode, floor in (("kernels", "floor"), ("rlscope", "floor-api")):
            key = f"{mode}_over_{floor}"
            if key in e:
                low, high = e[f"{key}_range"]
                over.append(f"**{e[key]:.3f}x** [{low:.3f}, {high:.3f}] ({e[f'{key}_rounds']})")
            else:
                over.append("—")
        floor_part = (e["floor-api"] - 1) / (e["rlscope"] - 1) if e.get("rlscope", 1) > 1 and "floor-api" in e else None
        out.append([label, *(_ratio(e, m) for m in ("floor", "kernels", "floor-api", "rlscope")), *over,
                    f"{floor_part:.0%}" if floor_part is not None else "—"])
    return markdown_table(["loop", "CUPTI floor: GPU activity", "rlscope: annotations + GPU activity",
                           "CUPTI floor: GPU activity + empty API callbacks", "rlscope: everything",
                           "GPU activity: rlscope over the floor", "everything: rlscope over the floor",
                           "the floor's part of everything's overhead (medians)"], out)


def _collector_checks(check: str) -> list[dict[str, Any]]:
    return [r for r in read_jsonl(COLLECTOR) if r.get("check") == check]


def kernel_counts() -> str:
    """Kernel counts and kernel time, rlscope against torch.profiler / jax.profiler, per round."""
    out = []
    for i, r in enumerate(_collector_checks("torch-compare"), 1):
        out.append([f"PyTorch MLP training, round {i} ({r['steps']} iterations)", f"{r['rlscope_kernels']:,}",
                    f"{r['torch_kernels']:,} (torch.profiler)", f"{r['rlscope_kernel_ns'] / 1e6:.3f} ms",
                    f"{r['torch_kernel_ns'] / 1e6:.3f} ms", f"{r['time_diff_pct']:+.2f}%", r["dropped"]])
    for r in _collector_checks("jax-compare"):
        for i, round_ in enumerate(r["rounds"], 1):
            out.append([f"JAX jitted MLP train step, round {i} ({r['steps']} iterations; jax {r['jax']})",
                        f"{round_['rlscope_kernels']:,}", f"{round_['jax_kernels']:,} (jax.profiler)",
                        f"{round_['rlscope_kernel_ns'] / 1e6:.3f} ms", f"{round_['jax_kernel_ns'] / 1e6:.3f} ms",
                        f"{round_['time_diff_pct']:+.2f}%", (round_.get("gpu_meta") or {}).get("dropped", "—")])
    return markdown_table(["workload", "rlscope kernels", "profiler kernels", "rlscope kernel time",
                           "profiler kernel time", "difference", "records dropped"], out)


def kernels_per_operation() -> str:
    """Where rlscope charged the PyTorch rounds' kernels, per operation."""
    out = []
    for i, r in enumerate(_collector_checks("torch-compare"), 1):
        per_op = r["kernels_per_operation"]
        out.append([f"round {i}", *(f"{per_op.get(op, 0):,}" for op in ("forward", "backward", "optimizer")),
                    f"{per_op.get('(none)', 0):,}"])
    return markdown_table(["PyTorch", "forward", "backward", "optimizer", "no operation"], out)


def nvidia_smi() -> str:
    """Per CPU gap: the true GPU-bound share from the trace against nvidia-smi and GPM (means
    over each segment after its first second), and nvidia-smi over the true share."""
    (r,) = _collector_checks("utilisation")[-1:]
    out = []
    for gap, measures in sorted(r["mean_percent"].items(), key=lambda kv: -int(kv[0])):
        bound, smi, gpm = (measures[m] for m in _UTILISATION)
        out.append([f"{int(gap)} µs" if int(gap) else "none (launch-bound)", f"{bound:.2f}%", f"{smi:.2f}%",
                    f"{gpm:.2f}%", f"{smi / bound:.1f}x" if bound else "—"])
    return markdown_table(["CPU gap per kernel", "GPU-bound (kernels + copies)", "nvidia-smi utilization.gpu",
                           "SM utilisation (GPM)", "nvidia-smi over GPU-bound"], out)


_UTILISATION = ("GPU-bound (kernels+copies)", "nvidia-smi utilization.gpu", "SM utilisation (GPM)")


def clock() -> str:
    """The one-clock check: probe kernels inside their CPU brackets, the gap from a kernel's end to
    the CPU seeing its synchronise return, and that gap's trend."""
    (r,) = _collector_checks("drift")[-1:]
    inside = sum(p["inside"] for p in r["probes"])
    low, high = r["end_to_sync_us_min_max"]
    return markdown_table(["seconds", "probe kernels inside their CPU brackets", "kernel end to sync return",
                           "trend of that gap"],
                          [[f"{r['seconds']:g}", f"{inside} of {len(r['probes'])}", f"{low:.1f}–{high:.1f} µs",
                            f"{r['trend_us_per_minute']:+.1f} µs per minute"]])


TABLES: dict[str, Callable[[], str]] = {
    "gpu_overhead_vs_profilers": overhead_vs_profilers, "gpu_overhead_layers": overhead_layers,
    "gpu_overhead_floor": overhead_floor, "gpu_kernel_counts": kernel_counts,
    "gpu_kernels_per_operation": kernels_per_operation, "gpu_nvidia_smi": nvidia_smi, "gpu_clock": clock,
}
