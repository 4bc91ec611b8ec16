"""Figures of RL-Scope's case studies (paper Figs. 4, 5 and 7): for each workload of a survey
(an algorithm, a simulator, a framework running an algorithm), where its training time goes per
operation and layer, as a share or in time per iteration, and how many transitions between layers
each operation makes per iteration."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from rlscope.analyze.overlap import UNANNOTATED
from rlscope.plot.breakdown import INTERVAL_LABEL, STACK_ORDER, stack_intervals, stack_layers
from rlscope.plot.render import note_skipped, shared_legend

__all__ = ["casestudy_breakdown", "casestudy_time", "casestudy_transitions", "survey_columns", "WORKLOAD"]

OPERATIONS = ("inference", "simulation", "backpropagation", UNANNOTATED)
TRANSITIONS = ("Python->Backend", "Python->Simulator", "Backend->CUDA", "GPU kernels")
TRANSITION_COLORS = {"Python->Backend": "#55a868", "Python->Simulator": "#8172b2", "Backend->CUDA": "#c44e52",
                     "GPU kernels": "#dd8452"}
_LABELS = {"algorithm": "algorithm", "env": "simulator (environment)", "framework": "framework"}
WORKLOAD = "workload"  # the column that names a survey's workload in these figures


def survey_columns(results: pd.DataFrame, meta: Mapping[str, Any]) -> list[str]:
    """The grid parameters the survey varies (``algorithm``, ``env``, ``framework``...), in the
    manifest's order: those with more than one value, else the one grid parameter there is."""
    grid = {c: v for c, v in dict(meta.get("grid", {})).items() if c in results}
    if not grid:
        raise ValueError("the case-study figures need a grid (over algorithm, env or framework)")
    return [c for c, values in grid.items() if len(values) > 1] or list(grid)[:1]


def _labelled(results: pd.DataFrame, meta: Mapping[str, Any]) -> tuple[pd.DataFrame, list[str], str]:
    """``results`` with a ``WORKLOAD`` label per run (its survey values, e.g. "td3 / sbx"), the
    labels in the manifest's grid order (those with a finished run), and the axis label."""
    columns = survey_columns(results, meta)
    grid = dict(meta.get("grid", {}))
    labelled = results.copy()
    labelled[WORKLOAD] = labelled[columns].astype(str).agg(" / ".join, axis=1)
    present = set(labelled.loc[labelled["status"] == "ok", WORKLOAD])
    order = [" / ".join(map(str, combo)) for combo in itertools.product(*(grid[c] for c in columns))]
    return labelled, [w for w in order if w in present], " / ".join(_LABELS.get(c, c) for c in columns)


def _ok(results: pd.DataFrame, table: str) -> pd.DataFrame:
    ok = results[results["status"] == "ok"]
    return ok[ok["table"] == table].copy()


def _subtitle(meta: Mapping[str, Any], ok: pd.DataFrame) -> str:
    device = ", ".join(sorted({str(d) for d in ok.get("device", pd.Series(dtype=str)).dropna()}))
    steps = ", ".join(sorted({f"{int(t):,}" for t in ok.get("timesteps", pd.Series(dtype=float)).dropna()}))
    return (f"{meta.get('scale', '')} scale" + (f", {steps} environment steps" if steps else "")
            + (f", device: {device}" if device else ""))


def _finish(fig: Figure, results: pd.DataFrame, meta: Mapping[str, Any], title: str) -> Figure:
    """Title (with the survey, scale, steps and device), the skipped runs under the figure, layout."""
    fig.suptitle(f"{title}\n{meta.get('description', '')}; {_subtitle(meta, results[results['status'] == 'ok'])}",
                 fontsize=9)
    note_skipped(fig, results, WORKLOAD)
    fig.tight_layout(rect=(0, 0, 0.87, 1))
    return fig


def casestudy_breakdown(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Per operation (a panel each), per workload (a bar each): the share of the whole training
    time in each layer, stacked (mean over repetitions); corrected for profiling's overhead where
    the runs were calibrated, with whiskers for the correction's 95% interval where the runs give
    it (``corrected_{low,high}_share``). Panels add up to 100% per workload."""
    results, order, xlabel = _labelled(results, meta)
    ok = _ok(results, "breakdown")
    corrected = _corrected(ok)
    bounds = ("corrected_low_share", "corrected_high_share")
    fig, axes = _stacked_layers(ok, "corrected_share" if corrected else "share", 100.0, order, xlabel, "{:.0f}%",
                                bounds=bounds if corrected and _has(ok, bounds) else None)
    axes[0][0].set_ylabel("share of training time (%)")
    what = "corrected for profiling's overhead" if corrected else "as profiled, overhead included"
    return _finish(fig, results, meta, f"Where training time goes, per operation and layer (rlscope), {what}")


def casestudy_time(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """RL-Scope's Fig. 4 (top) for a survey of frameworks: per operation (a panel each), per
    workload, milliseconds per iteration in each layer, stacked (mean over repetitions;
    corrected for profiling's overhead where the runs were calibrated). Where the runs also
    trained without the profiler (``baseline: true``), a first panel sets ``model.learn``'s
    whole time without the profiler beside the profiled one."""
    results, order, xlabel = _labelled(results, meta)
    ok = _ok(results, "breakdown")
    corrected = _corrected(ok)
    ok["per_iteration"] = ok["corrected_seconds" if corrected else "seconds"] / ok["iterations"]
    bounds = None
    if corrected and _has(ok, ("corrected_low_seconds", "corrected_high_seconds")):
        ok["low_per_iteration"] = ok["corrected_low_seconds"] / ok["iterations"]
        ok["high_per_iteration"] = ok["corrected_high_seconds"] / ok["iterations"]
        bounds = ("low_per_iteration", "high_per_iteration")
    baseline = "uninstrumented_learn_s" in ok and ok["uninstrumented_learn_s"].notna().any()
    fig, axes = _stacked_layers(ok, "per_iteration", 1e3, order, xlabel, "{:.2f}", extra_panel=baseline,
                                bounds=bounds)
    axes[0][1 if baseline else 0].set_ylabel("time per iteration (ms)")
    if baseline:
        _learn_times(axes[0][0], ok, order, xlabel)
    what = "corrected for profiling's overhead" if corrected else "as profiled, overhead included"
    return _finish(fig, results, meta, f"Training time per iteration, per operation and layer (rlscope), {what}")


def _corrected(ok: pd.DataFrame) -> bool:
    return _has(ok, ("corrected_share",))


def _has(ok: pd.DataFrame, columns: tuple[str, ...]) -> bool:
    return not ok.empty and all(c in ok and bool(ok[c].notna().all()) for c in columns)


def _stacked_layers(ok: pd.DataFrame, value: str, scale: float, order: list[str], xlabel: str, fmt: str,
                    extra_panel: bool = False, bounds: tuple[str, str] | None = None) -> tuple[Figure, Any]:
    """A panel per operation, a bar per workload, ``value`` (times ``scale``) stacked by layer,
    the total written on top; ``extra_panel`` leaves the first panel free; ``bounds``: the
    columns of each layer's low and high value, drawn as whiskers (``stack_intervals``)."""
    operations = [o for o in OPERATIONS if o in set(ok["operation"])]
    panels = max(len(operations), 1) + int(extra_panel)
    fig, axes = plt.subplots(1, panels, figsize=(3.2 * panels + 1.8, 4.8), squeeze=False)
    shared = axes[0][int(extra_panel):]
    for ax, operation in zip(shared, operations):
        group = ok[ok["operation"] == operation]
        tables = [group.pivot_table(index=WORKLOAD, columns="layer", values=v, aggfunc="mean", fill_value=0)
                  .groupby(level=0).sum().reindex(order, fill_value=0) * scale for v in (value, *(bounds or ()))]
        table = tables[0]
        bottom = stack_layers(ax, table, np.arange(len(order)))
        if bounds:
            stack_intervals(ax, table, tables[1], tables[2], np.arange(len(order)))
        for x, height in enumerate(bottom):
            ax.text(x, height, fmt.format(height), ha="center", va="bottom", fontsize=7)
        ax.set_title(operation if operation != UNANNOTATED else "outside operations", fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_xticks(np.arange(len(order)), order, rotation=35, ha="right", fontsize=8)
    top = max((ax.get_ylim()[1] for ax in shared), default=1)
    for ax in shared:
        ax.set_ylim(0, top)
    shared_legend(fig, shared, "resources in use", STACK_ORDER + (INTERVAL_LABEL,))
    return fig, axes


def _learn_times(ax: Any, ok: pd.DataFrame, order: list[str], xlabel: str) -> None:
    """Whole ``model.learn`` time per workload: without the profiler and under it."""
    runs = ok.drop_duplicates([WORKLOAD, "uninstrumented_learn_s", "profiled_learn_s"])  # one row per repetition
    times = runs.groupby(WORKLOAD)[["uninstrumented_learn_s", "profiled_learn_s"]].mean().reindex(order)
    x = np.arange(len(order))
    for offset, (column, label, color) in zip((-0.2, 0.2), (("uninstrumented_learn_s", "without profiler", "#4c72b0"),
                                                           ("profiled_learn_s", "under rlscope", "#c7c7c7"))):
        ax.bar(x + offset, times[column], 0.4, label=label, color=color)
    for i, value in enumerate(times["uninstrumented_learn_s"]):
        ax.text(i - 0.2, value, f"{value:.1f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, order, rotation=35, ha="right", fontsize=8)
    ax.set_title("whole training (model.learn)", fontsize=9)
    ax.set_ylabel("seconds")
    ax.set_xlabel(xlabel)
    ax.legend(fontsize=7)


def casestudy_transitions(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Per operation (a panel each), per workload: transitions between layers per iteration (one
    iteration = one rollout and the training after it), grouped by type, on a log scale."""
    results, order, xlabel = _labelled(results, meta)
    ok = _ok(results, "transitions")
    ok = ok[ok["transition"].isin(TRANSITIONS)]
    operations = [o for o in OPERATIONS if o in set(ok["operation"])] or ["(none)"]
    fig, axes = plt.subplots(1, len(operations), figsize=(3.2 * len(operations) + 1.8, 4.6), squeeze=False,
                             sharey=True)
    kinds = [t for t in TRANSITIONS if t in set(ok["transition"])]
    width = 0.8 / max(len(kinds), 1)
    for ax, operation in zip(axes[0], operations):
        group = ok[ok["operation"] == operation]
        table = group.pivot_table(index=WORKLOAD, columns="transition", values="per_iteration", aggfunc="mean")
        table = table.reindex(order)
        for i, kind in enumerate(kinds):
            if kind in table:
                ax.bar(np.arange(len(order)) + (i - (len(kinds) - 1) / 2) * width, table[kind].fillna(0), width,
                       label=kind, color=TRANSITION_COLORS[kind])
        ax.set_xticks(np.arange(len(order)), order, rotation=35, ha="right", fontsize=8)
        ax.set_yscale("symlog", linthresh=1)
        ax.set_title(operation if operation != UNANNOTATED else "outside operations", fontsize=9)
        ax.set_xlabel(xlabel)
    axes[0][0].set_ylabel("transitions per iteration")
    shared_legend(fig, axes[0], "transition", TRANSITIONS)
    return _finish(fig, results, meta, "Transitions between layers per iteration (one rollout + its training step)")
