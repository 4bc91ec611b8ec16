"""Figures of the data-collection study beyond Fig. 4 (paper "Optimizing Data Collection"):
K-step amortisation under the profiler (Figs. 5, 6), kernel fusion (Fig. 8), simulator
complexity (Fig. 9) and simulator comparison (Fig. 2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from rlscope.analyze.caveats import CAVEAT, OVERCORRECTED
from rlscope.analyze.shares import share_intervals
from rlscope.plot.breakdown import INTERVAL_LABEL, STACK_ORDER, stack_intervals, stack_layers
from rlscope.plot.render import note_skipped
from rlscope.plot.sessions import draw_other_sessions, session_tag, split_sessions
from rlscope.plot.throughput import backend_label, backend_palette

__all__ = ["breakdown_vs_fused_steps", "transitions_vs_fused_steps", "fusion_throughput", "fusion_speedup_grid",
           "simulator_comparison"]


def _ok(results: pd.DataFrame) -> pd.DataFrame:
    return results[results["status"] == "ok"].copy()


def _subtitle(meta: Mapping[str, Any], ok: pd.DataFrame) -> str:
    device = ", ".join(sorted({str(d) for d in ok.get("device", pd.Series(dtype=str)).dropna()}))
    return f"{meta.get('scale', '')} scale" + (f", device: {device}" if device else "")


def breakdown_vs_fused_steps(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Fig. 5: share of each iteration's time per layer (stacked to 100%) against K; corrected for
    profiling's overhead where the runs were calibrated (``calibrate: true``), with whiskers over
    each layer's share where the runs give the correction's 95% interval
    (``corrected_{low,high}_seconds_per_iteration``), and a note where a calibration removed more
    of a layer than was measured (the rows' ``caveat``)."""
    ok = _ok(results)
    ok = ok[ok["table"] == "breakdown"]
    corrected = "corrected_seconds_per_iteration" in ok and ok["corrected_seconds_per_iteration"].notna().all()
    column = "corrected_seconds_per_iteration" if corrected else "seconds_per_iteration"
    bounds = ["corrected_low_seconds_per_iteration", "corrected_high_seconds_per_iteration"]
    intervals = corrected and all(c in ok and ok[c].notna().all() for c in bounds)
    panels = list(ok.groupby("backend", sort=True))
    fig, axes = plt.subplots(1, len(panels), figsize=(max(6.5, 5.5 * len(panels)), 4.6), squeeze=False)
    for ax, (backend, group) in zip(axes[0], panels):
        table = group.pivot_table(index="fused_steps", columns="layer", values=column,
                                  aggfunc="mean", fill_value=0).sort_index()
        shares = table.div(table.sum(axis=1), axis=0) * 100
        x = np.arange(len(shares))
        stack_layers(ax, shares, x)
        if intervals:
            low, high = (group.pivot_table(index="fused_steps", columns="layer", values=c, aggfunc="mean",
                                           fill_value=0).reindex_like(table) for c in bounds)
            _, low_share, high_share = share_intervals(table, low, high)
            stack_intervals(ax, shares, low_share * 100, high_share * 100, x)
        per_step = table.sum(axis=1) / table.index.to_numpy()
        for i, seconds in enumerate(per_step):
            ax.text(i, 101, f"{seconds * 1e6:.0f} µs/step", ha="center", va="bottom", fontsize=7, rotation=90)
        n = int(group["num_envs"].iloc[0])
        ax.set_title(f"{backend_label({'backend': backend})}, N = {n}", fontsize=9)
        ax.set_xticks(x, [str(k) for k in shares.index])
        ax.set_xlabel("steps per Python→backend call K")
        ax.set_ylabel("share of data-collection time (%)")
        ax.set_ylim(0, 135)
    handles: dict[str, Any] = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    labels = [label for label in STACK_ORDER + (INTERVAL_LABEL,) if label in handles]
    fig.legend([handles[label] for label in labels], labels, title="resources in use", loc="upper left",
               bbox_to_anchor=(0.86, 0.86), fontsize=8, title_fontsize=8)  # beside the panels, below the title
    what = "corrected for profiling's overhead" if corrected else "as profiled, overhead included"
    fig.suptitle(f"Data-collection time breakdown (rlscope) vs steps per call\n{what}; "
                 + _subtitle(meta, _ok(results)), fontsize=10)
    overcorrected = _overcorrected(ok) if corrected else ""
    if overcorrected:
        below = -0.08 if (results["status"] == "skipped").any() else -0.02  # under note_skipped's line
        fig.text(0.01, below, f"Calibration removes more than was measured, beyond its 95% interval (cost "
                 f"overestimated for this workload; drawn as 0): {overcorrected}", fontsize=7, va="top", wrap=True)
    note_skipped(fig, results, "backend")
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    return fig


def _overcorrected(ok: pd.DataFrame) -> str:
    """The layers (per backend and K) whose rows carry ``OVERCORRECTED``, as "jax K=1: CUDA API"."""
    if CAVEAT not in ok:
        return ""
    caveats = ok[CAVEAT].map(lambda value: value if isinstance(value, str) else "")  # read back as NaN where empty
    hit = ok[caveats.str.contains(OVERCORRECTED, regex=False)]
    return "; ".join(f"{backend} K={k}: {', '.join(sorted(set(g['layer'])))}"
                     for (backend, k), g in hit.groupby(["backend", "fused_steps"]))


def transitions_vs_fused_steps(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Fig. 6: Python→backend calls, CUDA API calls and kernels per iteration (K steps) vs K."""
    ok = _ok(results)
    ok = ok[(ok["table"] == "transitions") & (ok["transition"] != "Annotations")].copy()
    ok["implementation"] = [backend_label({"backend": b}) for b in ok["backend"]]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    sns.lineplot(data=ok, x="fused_steps", y="per_iteration", hue="transition", style="implementation",
                 markers=True, errorbar=None, ax=ax)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("steps per iteration K (one Python call where the backend allows)")
    ax.set_ylabel("transitions per iteration")
    ax.set_title("Transitions per data-collection iteration vs K\n" + _subtitle(meta, _ok(results)), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, title_fontsize=8)
    version = ", ".join(sorted({str(v) for v in _ok(results).get("python", pd.Series(dtype=str)).dropna()}))
    if version.startswith("3.11"):
        fig.text(0.01, -0.06, "Python 3.11: sys.setprofile does not see calls into C callables that are not "
                 "builtin functions (JAX's compiled functions), so JAX's Python→Backend calls read 0; "
                 "Python 3.12+ (sys.monitoring) counts them.", fontsize=7, wrap=True)
    note_skipped(fig, results, "backend")
    fig.tight_layout()
    return fig


def fusion_throughput(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Fig. 8: simulation steps/s vs N, one colour per implementation, one line style per K."""
    ok = _ok(results)
    ok["implementation"] = [backend_label({"backend": b}) for b in ok["backend"]]
    ok["K"] = [f"K = {k}" for k in ok["fused_steps"]]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    sns.lineplot(data=ok, x="num_envs", y="steps_per_s", hue="implementation", style="K", markers=True,
                 palette=backend_palette(ok), errorbar="sd", ax=ax)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("parallel environments N")
    ax.set_ylabel("simulation throughput (env-steps / s)")
    ax.set_title("Simulator kernel fusion: K steps per call, random actions, no policy\n"
                 + _subtitle(meta, ok) + ", mean ± sd", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7)
    note_skipped(fig, results, "backend")
    fig.tight_layout()
    return fig


def fusion_speedup_grid(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Fig. 9: fusion speedup (K steps per launch over K = 1) vs state factor S, one line per
    compute factor C; rows K, columns N."""
    ok = _ok(results)
    ok = ok[ok["fused_steps"] > 1]
    grid = sns.relplot(data=ok, x="state_factor", y="fusion_speedup", hue="compute_factor", row="fused_steps",
                       col="num_envs", kind="line", marker="o", errorbar=None, palette="viridis",
                       hue_norm=_lognorm(ok["compute_factor"]), height=2.3, aspect=1.25,
                       facet_kws={"margin_titles": True})
    for ax in grid.axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        ax.grid(True, which="major", alpha=0.3)
    grid.set_axis_labels("state factor S (x memory traffic)", "speedup over K = 1")
    grid.set_titles(row_template="K = {row_name}", col_template="N = {col_name}")
    grid.legend.set_title("compute factor C")
    backends = ", ".join(backend_label({"backend": b}) for b in sorted(set(ok["backend"])))
    grid.figure.suptitle(f"Simulator complexity: speedup of K steps per call over K = 1\n{backends}; "
                         + _subtitle(meta, ok), fontsize=10)
    grid.tight_layout()
    width, height = grid.figure.get_size_inches()
    grid.figure.set_size_inches(max(width, 7.0), max(height, 3.6))
    grid.figure.subplots_adjust(top=1 - 0.8 / grid.figure.get_figheight())
    note_skipped(grid.figure, results, "num_envs")
    return grid.figure


def _lognorm(values: pd.Series) -> Any:
    """Colour by log C, so 1, 8, 64, 1024 are evenly spaced."""
    from matplotlib.colors import LogNorm

    return LogNorm(vmin=max(1, float(values.min())), vmax=max(2, float(values.max())))


def _simulator_label(row: pd.Series) -> str:
    """An environment, and for brax's the physics pipeline it ran on (MJX or brax's own): one
    curve each, so pipelines are never averaged together."""
    pipeline = row.get("brax_backend")
    if row["environment"] == "cartpole" or not isinstance(pipeline, str):
        return str(row["environment"])
    return f"{row['environment']} ({pipeline})"


def simulator_comparison(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Fig. 2: XLA simulation throughput vs N of brax environments next to CartPole."""
    ok = _ok(results)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    if not ok.empty:
        ok["simulator"] = [_simulator_label(r) for _, r in ok.iterrows()]
        main, other = split_sessions(ok, "simulator", "num_envs")
        names = sorted(ok["simulator"].unique())
        colors = dict(zip(names, sns.color_palette("colorblind", len(names)).as_hex()))
        if "session" in main and main["session"].nunique() > 1:  # the curves' own sessions differ: say whose
            main = main.assign(label=main["simulator"] + " [" + main["session"].map(session_tag) + "]")
        else:
            main = main.assign(label=main["simulator"])
        palette = dict(zip(main["label"], main["simulator"].map(colors)))
        sns.lineplot(data=main, x="num_envs", y="steps_per_s", hue="label", style="label", markers=True,
                     dashes=False, errorbar="sd", palette=palette, ax=ax)
        ax.legend(title="environment (brax pipeline), on JAX / XLA", fontsize=8, title_fontsize=8)
        draw_other_sessions(ax, other, "simulator", "num_envs", "steps_per_s", colors)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("parallel environments N")
    ax.set_ylabel("simulation throughput (env-steps / s)")
    ax.set_title("Simulators on XLA: CartPole next to brax physics, random actions\n"
                 + _subtitle(meta, ok), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    note_skipped(fig, results, "environment")
    fig.tight_layout()
    return fig
