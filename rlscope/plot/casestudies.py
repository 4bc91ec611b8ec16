"""Figures of RL-Scope's case studies (paper Figs. 5 and 7): for each workload of a survey
(an algorithm, a simulator), where its training time goes per operation and layer, and how many
transitions between layers each operation makes per iteration."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from rlscope.analyze.overlap import UNANNOTATED
from rlscope.plot.breakdown import LAYER_COLORS, STACK_ORDER
from rlscope.plot.render import note_skipped

__all__ = ["casestudy_breakdown", "casestudy_transitions", "survey_column"]

OPERATIONS = ("inference", "simulation", "backpropagation", UNANNOTATED)
TRANSITIONS = ("Python->Backend", "Python->Simulator", "Backend->CUDA", "GPU kernels")
TRANSITION_COLORS = {"Python->Backend": "#55a868", "Python->Simulator": "#8172b2", "Backend->CUDA": "#c44e52",
                     "GPU kernels": "#dd8452"}
_LABELS = {"algorithm": "algorithm", "env": "simulator (environment)"}


def survey_column(results: pd.DataFrame, meta: Mapping[str, Any]) -> str:
    """The grid parameter the survey varies (``algorithm`` or ``env``): the one with most values."""
    grid = dict(meta.get("grid", {}))
    candidates = [c for c in grid if c in results]
    if not candidates:
        raise ValueError("the case-study figures need a grid over algorithm or env")
    return max(candidates, key=lambda c: len(grid[c]))


def _ok(results: pd.DataFrame, table: str) -> pd.DataFrame:
    ok = results[results["status"] == "ok"]
    return ok[ok["table"] == table].copy()


def _order(results: pd.DataFrame, meta: Mapping[str, Any], column: str) -> list[str]:
    present = set(results.loc[results["status"] == "ok", column].astype(str))
    return [str(v) for v in meta.get("grid", {}).get(column, []) if str(v) in present]


def _subtitle(meta: Mapping[str, Any], ok: pd.DataFrame) -> str:
    device = ", ".join(sorted({str(d) for d in ok.get("device", pd.Series(dtype=str)).dropna()}))
    steps = ", ".join(sorted({f"{int(t):,}" for t in ok.get("timesteps", pd.Series(dtype=float)).dropna()}))
    return (f"{meta.get('scale', '')} scale" + (f", {steps} environment steps" if steps else "")
            + (f", device: {device}" if device else ""))


def _legend(fig: Figure, axes: Any, title: str, order: tuple[str, ...]) -> None:
    """One legend for all panels: every label any panel drew, in ``order``."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    labels = [label for label in order if label in handles]
    fig.legend([handles[label] for label in labels], labels, title=title, loc="upper right", fontsize=8,
               title_fontsize=8)


def _finish(fig: Figure, results: pd.DataFrame, meta: Mapping[str, Any], column: str, title: str) -> Figure:
    """Title (with the survey, scale, steps and device), the skipped runs under the figure, layout."""
    fig.suptitle(f"{title}\n{meta.get('description', '')}; {_subtitle(meta, results[results['status'] == 'ok'])}",
                 fontsize=9)
    note_skipped(fig, results, column)
    fig.tight_layout(rect=(0, 0, 0.87, 1))
    return fig


def casestudy_breakdown(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Per operation (a panel each), per workload (a bar each): the share of the whole training
    time in each layer, stacked (mean over repetitions); corrected for profiling's overhead where
    the runs were calibrated. Panels add up to 100% per workload."""
    column = survey_column(results, meta)
    ok = _ok(results, "breakdown")
    corrected = "corrected_share" in ok and ok["corrected_share"].notna().all() and not ok.empty
    value = "corrected_share" if corrected else "share"
    order = _order(results, meta, column)
    ok[column] = ok[column].astype(str)
    operations = [o for o in OPERATIONS if o in set(ok["operation"])]
    fig, axes = plt.subplots(1, max(len(operations), 1), figsize=(3.2 * max(len(operations), 1) + 1.8, 4.8),
                             squeeze=False, sharey=True)
    for ax, operation in zip(axes[0], operations):
        group = ok[ok["operation"] == operation]
        table = group.pivot_table(index=column, columns="layer", values=value, aggfunc="mean", fill_value=0)
        table = table.reindex(order, fill_value=0) * 100
        bottom = np.zeros(len(table))
        for layer in STACK_ORDER:
            if layer in table:
                ax.bar(order, table[layer], bottom=bottom, label=layer, color=LAYER_COLORS[layer])
                bottom += table[layer].to_numpy()
        for x, height in enumerate(bottom):
            ax.text(x, height, f"{height:.0f}%", ha="center", va="bottom", fontsize=7)
        ax.set_title(operation if operation != UNANNOTATED else "outside operations", fontsize=9)
        ax.set_xlabel(_LABELS.get(column, column))
        ax.tick_params(axis="x", rotation=35, labelsize=8)
    axes[0][0].set_ylabel("share of training time (%)")
    _legend(fig, axes[0], "resources in use", STACK_ORDER)
    what = "corrected for profiling's overhead" if corrected else "as profiled, overhead included"
    return _finish(fig, results, meta, column, f"Where training time goes, per operation and layer (rlscope), {what}")


def casestudy_transitions(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Per operation (a panel each), per workload: transitions between layers per iteration (one
    iteration = one rollout and the training after it), grouped by type, on a log scale."""
    column = survey_column(results, meta)
    ok = _ok(results, "transitions")
    ok = ok[ok["transition"].isin(TRANSITIONS)]
    order = _order(results, meta, column)
    ok[column] = ok[column].astype(str)
    operations = [o for o in OPERATIONS if o in set(ok["operation"])] or ["(none)"]
    fig, axes = plt.subplots(1, len(operations), figsize=(3.2 * len(operations) + 1.8, 4.6), squeeze=False,
                             sharey=True)
    kinds = [t for t in TRANSITIONS if t in set(ok["transition"])]
    width = 0.8 / max(len(kinds), 1)
    for ax, operation in zip(axes[0], operations):
        group = ok[ok["operation"] == operation]
        table = group.pivot_table(index=column, columns="transition", values="per_iteration", aggfunc="mean")
        table = table.reindex(order)
        for i, kind in enumerate(kinds):
            if kind in table:
                ax.bar(np.arange(len(order)) + (i - (len(kinds) - 1) / 2) * width, table[kind].fillna(0), width,
                       label=kind, color=TRANSITION_COLORS[kind])
        ax.set_xticks(np.arange(len(order)), order, rotation=35, fontsize=8)
        ax.set_yscale("symlog", linthresh=1)
        ax.set_title(operation if operation != UNANNOTATED else "outside operations", fontsize=9)
        ax.set_xlabel(_LABELS.get(column, column))
    axes[0][0].set_ylabel("transitions per iteration")
    _legend(fig, axes[0], "transition", TRANSITIONS)
    return _finish(fig, results, meta, column,
                   "Transitions between layers per iteration (one rollout + its training step)")
