"""Overhead-correction validation figure (RL-Scope paper, Fig. 11)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from rlscope.plot.render import note_skipped

__all__ = ["overhead_correction"]


def overhead_correction(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Per workload: (corrected - uninstrumented) / uninstrumented in percent, measured on whole
    runs (per repetition the median over interleaved pairs; mean ± sd over repetitions, with the
    uncorrected error beside it), on whole runs from their first step (start-up left out) and on
    alternating windows of one run and on sessions started and stopped in segments of one run
    (each run's median over blocks, averaged; the mean of the runs' 95% intervals); beside them,
    how uncertain the correction of an iteration is from the calibration alone
    (``calibration_uncertainty_pct``, median over repetitions); the ±5% target shaded. Every
    single whole-run pair (``*_pairs_pct``) is a dot on its bar: a median two or three pairs
    deep hides whether they agree."""
    ok = results[results["status"] == "ok"]
    columns = [c for c in ("raw_error_pct", "corrected_error_pct", "steady_corrected_error_pct",
                           "window_corrected_error_pct", "session_corrected_error_pct") if c in ok.columns]
    stats = ok.groupby("workload")[columns].agg(["mean", "std"]).fillna(0)
    intervals = {c: ok.groupby("workload")[c.replace("_error_pct", "_ci95_pct")].mean().reindex(stats.index).fillna(0)
                 for c in ("window_corrected_error_pct", "session_corrected_error_pct") if c in columns}
    fig, ax = plt.subplots(figsize=(max(9.0, 2.4 * len(stats) + 3), 5.0))
    x = np.arange(len(stats))
    labels = {"raw_error_pct": ("uncorrected, whole run", "#c44e52"),
              "corrected_error_pct": ("corrected, whole run", "#4c72b0"),
              "steady_corrected_error_pct": ("corrected, whole run from first step", "#64b5cd"),
              "window_corrected_error_pct": ("corrected, alternating windows (median)", "#8172b2"),
              "session_corrected_error_pct": ("corrected, sessions in one run (median)", "#ccb974")}
    width = 0.8 / len(columns)
    pairs_drawn = False
    for i, column in enumerate(columns):
        label, color = labels[column]
        err = intervals[column] if column in intervals else stats[(column, "std")]
        at = x + (i - (len(columns) - 1) / 2) * width
        ax.bar(at, stats[(column, "mean")], width * 0.95, yerr=err, capsize=3, label=label, color=color)
        pairs_column = column.replace("_pct", "_pairs_pct")
        if pairs_column not in ok.columns:
            continue
        for where, workload in zip(at, stats.index):
            values = [v for cell in ok.loc[ok["workload"] == workload, pairs_column] for v in _pair_errors(cell)]
            if not values:
                continue
            offsets = np.linspace(-0.25, 0.25, len(values)) * width if len(values) > 1 else np.zeros(1)
            ax.scatter(where + offsets, values, s=10, color="black", zorder=3,
                       label=None if pairs_drawn else "single whole-run pairs")
            pairs_drawn = True
    if "calibration_uncertainty_pct" in ok.columns:  # the correction's own 95% uncertainty
        spread = ok.groupby("workload")["calibration_uncertainty_pct"].median().reindex(stats.index)
        if spread.notna().any():
            ax.errorbar(x + 0.45, np.zeros(len(x)), yerr=spread.fillna(0).to_numpy(), fmt="none", ecolor="black",
                        elinewidth=2, capsize=5, alpha=0.7, label="± the calibration's own uncertainty")
    ax.axhspan(-5, 5, color="#55a868", alpha=0.15, label="±5% target")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x, stats.index, rotation=15)
    ax.set_ylabel("time vs uninstrumented (%)")
    ax.set_xlabel("workload")
    ax.set_title(f"Profiling overhead before and after correction ({meta.get('scale', '')} scale)\n"
                 "calibrated on runs half as long; whole runs: median over interleaved pairs (dots: single pairs), "
                 "mean ± sd over repetitions;\n"
                 "alternating windows and sessions in one run: median over blocks, 95% interval",
                 fontsize=9)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3)
    ax.grid(axis="y", alpha=0.3)
    note_skipped(fig, results, "workload")
    fig.tight_layout()
    return fig


def _pair_errors(cell: Any) -> list[float]:
    """The single pairs' errors in one ``*_pairs_pct`` cell (a JSON list; NaN in results from
    before the pairs were kept)."""
    return [float(v) for v in json.loads(cell)] if isinstance(cell, str) else []
