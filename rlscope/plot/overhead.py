"""Overhead-correction validation figure (RL-Scope paper, Fig. 11)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from rlscope.plot.render import note_skipped

__all__ = ["overhead_correction"]


def overhead_correction(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Per workload: (corrected - uninstrumented) / uninstrumented, and the same before correction,
    in percent, mean and standard deviation over repetitions; the ±5% target band shaded."""
    ok = results[results["status"] == "ok"]
    stats = ok.groupby("workload")[["corrected_error_pct", "raw_error_pct"]].agg(["mean", "std"]).fillna(0)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(stats) + 2), 4.4))
    x = np.arange(len(stats))
    for offset, (column, label, color) in zip((-0.2, 0.2), (
            ("raw_error_pct", "profiled, uncorrected", "#c44e52"),
            ("corrected_error_pct", "profiled, overhead corrected", "#4c72b0"))):
        ax.bar(x + offset, stats[(column, "mean")], 0.38, yerr=stats[(column, "std")], capsize=4, label=label,
               color=color)
    ax.axhspan(-5, 5, color="#55a868", alpha=0.15, label="±5% target")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x, stats.index, rotation=15)
    ax.set_ylabel("total time vs uninstrumented run (%)")
    ax.set_xlabel("workload")
    ax.set_title(f"Profiling overhead before and after correction ({meta.get('scale', '')} scale)\n"
                 "calibrated on runs half as long; mean ± sd over repetitions", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    note_skipped(fig, results, "workload")
    fig.tight_layout()
    return fig
