"""The RL-Scope figures of one profiled run: time breakdown and transition counts per operation."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from rlscope.analyze.overlap import UNANNOTATED

__all__ = ["time_breakdown", "transition_counts", "stack_label", "stack_layers", "stack_intervals", "STACK_ORDER",
           "LAYER_COLORS", "INTERVAL_LABEL"]

# Bottom to top, as in the RL-Scope paper: CPU-only time by layer, then CPU+GPU, then GPU only.
STACK_ORDER = ("Python", "Simulator", "Backend", "CUDA API", "Profiler", "CPU + GPU", "GPU")
LAYER_COLORS = {"Python": "#4c72b0", "Simulator": "#8172b2", "Backend": "#55a868", "CUDA API": "#c44e52",
                "Profiler": "#8c8c8c", "CPU + GPU": "#dd8452", "GPU": "#937860"}


def stack_layers(ax: Any, table: pd.DataFrame, x: Any) -> np.ndarray:
    """A bar per row of ``table`` at ``x``, its layer columns stacked in ``STACK_ORDER`` and coloured
    as ``LAYER_COLORS`` (each figure of layers looks the same); returns the bars' heights."""
    bottom = np.zeros(len(table))
    for layer in STACK_ORDER:
        if layer in table:
            ax.bar(x, table[layer], bottom=bottom, label=layer, color=LAYER_COLORS[layer])
            bottom += table[layer].to_numpy()
    return bottom


INTERVAL_LABEL = "95% interval of the correction"  # the legend entry of ``stack_intervals``' whiskers


def stack_intervals(ax: Any, table: pd.DataFrame, low: pd.DataFrame, high: pd.DataFrame, x: Any) -> None:
    """Whiskers on the bars ``stack_layers`` drew of ``table`` at ``x``: each layer's segment, from
    its bottom, as high as ``low`` and as ``high`` (same rows and layers as ``table``) make it.
    Each layer's whiskers stand a little beside the others', so that thin segments' whiskers do
    not hide one another; a segment whose bounds are one value gets none."""
    layers = [layer for layer in STACK_ORDER if layer in table]
    x = np.asarray(x, dtype=np.float64)
    bottom = np.zeros(len(table))
    label = INTERVAL_LABEL
    for i, layer in enumerate(layers):
        point = table[layer].to_numpy(dtype=np.float64)
        lo = low.reindex_like(table)[layer].fillna(0).to_numpy(dtype=np.float64)
        hi = high.reindex_like(table)[layer].fillna(0).to_numpy(dtype=np.float64)
        drawn = hi - lo > 0
        if drawn.any():
            offset = 0.3 * (i - (len(layers) - 1) / 2) / max(len(layers) - 1, 1)
            ax.errorbar(x[drawn] + offset, (bottom + point)[drawn],
                        yerr=[np.clip(point - lo, 0, None)[drawn], np.clip(hi - point, 0, None)[drawn]],
                        fmt="none", ecolor="black", elinewidth=0.8, capsize=2, label=label)
            label = "_nolegend_"
        bottom += point


def _ordered(operations: pd.Index) -> list[str]:
    """Operations in the given order, time outside any operation last."""
    return [o for o in operations if o != UNANNOTATED] + [o for o in operations if o == UNANNOTATED]


def stack_label(cpu: str, gpu: bool) -> str:
    """The layer a breakdown row is drawn in: its CPU layer, or CPU + GPU, or GPU alone."""
    if gpu:
        return "GPU" if cpu == "none" else "CPU + GPU"
    return cpu


def _panels(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    keys = ["process", "phase"]
    groups = list(frame.groupby(keys, sort=False))
    return [(f"{proc} · phase {phase}" if len(groups) > 1 else f"phase {phase}", g) for (proc, phase), g in groups]


def time_breakdown(breakdown: pd.DataFrame, title: str = "") -> Figure:
    """Stacked bars: seconds per operation, split by the resources active (main thread)."""
    frame = breakdown[breakdown["thread"] == "main"].copy()
    frame["stack"] = [stack_label(c, g) for c, g in zip(frame["cpu"], frame["gpu"])]
    panels = _panels(frame)
    fig, axes = plt.subplots(1, len(panels), figsize=(max(6.0, 4.2 * len(panels)), 4.6), squeeze=False)
    for ax, (label, group) in zip(axes[0], panels):
        table = group.pivot_table(index="operation", columns="stack", values="time_s", aggfunc="sum", fill_value=0)
        table = table.loc[_ordered(table.sum(axis=1).sort_values(ascending=False).index)]
        bottom = stack_layers(ax, table, table.index)
        total = bottom.sum()
        for x, height in enumerate(bottom):
            ax.text(x, height, f"{100 * height / total:.0f}%", ha="center", va="bottom", fontsize=8)
        ax.set_title(label, fontsize=9)
        ax.set_ylabel("time (s)")
        ax.set_xlabel("operation")
        ax.tick_params(axis="x", rotation=20)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, title="resources in use", loc="upper right", fontsize=8, title_fontsize=8,
               bbox_to_anchor=(1.0, 0.9))
    fig.suptitle(title or "Time breakdown per operation (CPU split by layer; % of profiled time)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.84, 0.95))
    return fig


def transition_counts(transitions: pd.DataFrame, title: str = "") -> Figure:
    """Grouped bars: transitions per iteration (or in total when no iterations were marked)."""
    frame = transitions[(transitions["thread"] == "main") & (transitions["transition"] != "Annotations")].copy()
    per_iteration = frame["iterations"].gt(0).all() and not frame.empty
    value = "per_iteration" if per_iteration else "count"
    panels = _panels(frame) if not frame.empty else [("no transitions recorded", frame)]
    fig, axes = plt.subplots(1, len(panels), figsize=(max(6.0, 4.2 * len(panels)), 4.2), squeeze=False)
    for ax, (label, group) in zip(axes[0], panels):
        if not group.empty:
            table = group.pivot_table(index="operation", columns="transition", values=value, aggfunc="sum",
                                      fill_value=0)
            table = table.loc[_ordered(table.index)]
            table.plot.bar(ax=ax, rot=20, width=0.8)
            ax.legend(title="transition", fontsize=8, title_fontsize=8)
        ax.set_title(label, fontsize=9)
        ax.set_ylabel("transitions per iteration" if per_iteration else "transitions (total)")
        ax.set_xlabel("operation")
    fig.suptitle(title or "Transitions between layers per operation", fontsize=10)
    fig.tight_layout()
    return fig
