"""Figures of RL-Scope's scale-up case study: as M actor processes share one GPU with a learner,
how busy the GPU really is (the union of all processes' kernels and copies) against what
nvidia-smi and NVML GPM report, and where each kind of process spends its time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from rlscope.analyze.gpu import GPU_BOUND, NVML_MEASURES
from rlscope.analyze.overlap import UNANNOTATED
from rlscope.plot.breakdown import STACK_ORDER, stack_layers
from rlscope.plot.render import note_skipped, shared_legend

__all__ = ["scale_up_gpu", "scale_up_breakdown"]

MEASURE_COLORS = {NVML_MEASURES[0][0]: "#c44e52", NVML_MEASURES[1][0]: "#dd8452", GPU_BOUND: "#4c72b0"}
PANELS = (("learner", "backpropagation"), ("learner", UNANNOTATED), ("worker", "inference"),
          ("worker", "simulation"), ("worker", UNANNOTATED))


def _subtitle(results: pd.DataFrame, meta: Mapping[str, Any]) -> str:
    ok = results[results["status"] == "ok"]
    if "table" in ok:
        ok = ok[ok["table"] != "gpu"]  # the run's device, not the GPU index of its measures
    devices = ", ".join(sorted({str(d) for d in ok.get("device", pd.Series(dtype=str)).dropna()}))
    windows = ok.get("window_s", pd.Series(dtype=float)).dropna()
    window = f", {windows.mean():.0f} s together per run" if not windows.empty else ""
    return f"{meta.get('description', '')}; {meta.get('scale', '')} scale{window}, device: {devices}"


def scale_up_gpu(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Per number of actors M: nvidia-smi's utilisation, GPM's SM utilisation and the true
    GPU-bound share (left), and the throughput of actors and learner (right)."""
    ok = results[results["status"] == "ok"]
    fig, (gpu_ax, rate_ax) = plt.subplots(1, 2, figsize=(11, 4.4))
    gpu = ok[ok.get("table", pd.Series(dtype=str)) == "gpu"] if "table" in ok else ok.iloc[0:0]
    if gpu.empty:
        reasons = sorted(set(ok.get("gpu_skipped", pd.Series(dtype=str)).dropna())) or ["no GPU measures recorded"]
        gpu_ax.text(0.5, 0.5, "\n".join(reasons), ha="center", va="center", fontsize=9, transform=gpu_ax.transAxes)
    for measure, color in MEASURE_COLORS.items():
        line = gpu[gpu["measure"] == measure].groupby("workers")["percent"].mean() if not gpu.empty else None
        if line is not None and not line.empty:
            gpu_ax.plot(line.index, line.to_numpy(), marker="o", color=color, label=measure)
            for x, y in line.items():
                gpu_ax.annotate(f"{y:.0f}", (x, y), textcoords="offset points", xytext=(0, 5), ha="center",
                                fontsize=7)
    gpu_ax.set(xscale="log", ylim=(0, 105), xlabel="actor processes M", ylabel="GPU utilisation (%)",
               title="GPU use: reported vs true (all processes)")
    if gpu_ax.get_legend_handles_labels()[0]:
        gpu_ax.legend(fontsize=8, loc="center right")
    runs = ok.drop_duplicates("run_id").sort_values("workers") if "run_id" in ok else ok
    for column, label, color in (("worker_steps_per_s", "actors' environment steps/s (all)", "#8172b2"),
                                 ("learner_updates_per_s", "learner's updates/s", "#55a868")):
        if column in runs:
            rate_ax.plot(runs["workers"], runs[column], marker="o", label=label, color=color)
    rate_ax.set(xscale="log", yscale="log", xlabel="actor processes M", ylabel="per second",
                title="Throughput")
    rate_ax.legend(fontsize=8)
    for ax in (gpu_ax, rate_ax):
        ticks = sorted(ok["workers"].unique()) if "workers" in ok else []
        ax.set_xticks(ticks, [str(int(t)) for t in ticks])
        ax.minorticks_off()
    gpu_ax.set_xlim(rate_ax.get_xlim())
    fig.suptitle(f"Scale-up: nvidia-smi vs true GPU-bound time\n{_subtitle(results, meta)}", fontsize=9)
    note_skipped(fig, results, "workers")
    fig.tight_layout()
    return fig


def scale_up_breakdown(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Per kind of process (the learner; the actors, mean per process) and operation (a panel
    each), per M: the share of the run's window spent in each layer, stacked."""
    ok = results[(results["status"] == "ok")]
    ok = ok[ok["table"] == "breakdown"] if "table" in ok else ok.iloc[0:0]
    order = sorted(int(m) for m in ok["workers"].unique()) if not ok.empty else []
    fig, axes = plt.subplots(1, len(PANELS), figsize=(3.0 * len(PANELS) + 1.6, 4.4), sharey=True)
    for ax, (role, operation) in zip(axes, PANELS):
        group = ok[(ok["role"] == role) & (ok["operation"] == operation)]
        # Mean over the role's processes (all actors of a run), then over repetitions.
        per_process = group.groupby(["workers", "process", "layer"])["share"].mean().unstack("layer", fill_value=0)
        table = per_process.groupby("workers").mean().reindex(order, fill_value=0) * 100
        stack_layers(ax, table, np.arange(len(order)))
        ax.set_xticks(np.arange(len(order)), [str(m) for m in order])
        who = "learner" if role == "learner" else "actor (mean)"
        ax.set_title(f"{who}: {operation if operation != UNANNOTATED else 'outside operations'}", fontsize=9)
        ax.set_xlabel("actor processes M")
    axes[0].set_ylabel("share of the run's window (%)")
    shared_legend(fig, axes, "resources in use", STACK_ORDER)
    fig.suptitle(f"Scale-up: where each process's time goes (rlscope, as profiled)\n{_subtitle(results, meta)}",
                 fontsize=9)
    note_skipped(fig, results, "workers")
    fig.tight_layout(rect=(0, 0, 0.88, 1))
    return fig
