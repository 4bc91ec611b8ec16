"""The figure of the case study "end-to-end jitted training" (configs/jitted_training.yaml): PPO
in each execution model and environment, its wall time to the same number of environment steps,
and where the fully jitted step's GPU kernel time goes per ``jax.named_scope``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from rlscope.plot.render import note_skipped

__all__ = ["jitted_training", "iteration_kernels", "STEP_OPERATION", "FUSED_OPERATION", "FUSED_LABEL", "SCOPE_DEPTH"]

STEP_OPERATION = "train_step"  # the operation around an iteration (experiments/casestudies/jitted_ppo.py)
FUSED_OPERATION = "rollout"  # jax_fused's kernel launch inside it, which no XLA module holds
FUSED_LABEL = "rollout (fused CUDA kernel)"
SCOPE_DEPTH = 2  # the figure's scopes: rollout/env, not brax's rollout/env/step/forward/...
OTHER_SCOPES = "other scopes"
COLOURS = plt.get_cmap("tab10").colors


def iteration_kernels(results: pd.DataFrame, depth: int | None = None) -> pd.DataFrame:
    """The ``jax_scopes`` rows of the training iterations' kernels: those of ``STEP_OPERATION``
    and of ``FUSED_OPERATION`` inside it, without compile-time autotuning and without the set-up's
    kernels outside them. The fused kernel (``FUSED_OPERATION``'s kernel in no XLA module:
    ``unmatched``) is labelled ``FUSED_LABEL``; JAX's copies around its launch keep their scopes.
    ``depth``: scopes cut to their first ``depth`` names, so that a simulator's own scopes (brax's
    MJX names dozens under ``rollout/env``: ``rollout/env/step/forward/...``) count as its own."""
    if not {"table", "operation", "scope", "match"} <= set(results.columns):  # no run had kernels (a CPU)
        return results.iloc[0:0]
    rows = results[(results["table"] == "jax_scopes") & results["operation"].isin([STEP_OPERATION, FUSED_OPERATION])
                   & (results["match"] != "autotuning")]
    fused = (rows["operation"] == FUSED_OPERATION) & (rows["scope"] == "unmatched")
    scope = rows["scope"].where(~fused, FUSED_LABEL)
    if depth is not None:
        scope = scope.map(lambda name: "/".join(name.split("/")[:depth]))
    return rows.assign(scope=scope)


def _run_label(framework: str, environment: str) -> str:
    return f"{framework}\n{environment}"


def jitted_training(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Left: seconds to train each run's ``timesteps`` steps without the profiler, per framework
    and environment (mean over repetitions, each repetition a dot), with the steps and the steps
    per second on each bar. Right: per jitted run (framework and environment), the iteration's
    kernel time per scope (``iteration_kernels`` cut to ``SCOPE_DEPTH``), as shares of it (mean
    over repetitions), each scope one colour across bars; past ten scopes, the smallest together."""
    ok = results[results["status"] == "ok"]
    grid = dict(meta.get("grid", {}))
    present = set(zip(ok["framework"], ok["environment"]))
    order = [(f, e) for e in grid.get("environment", ["cartpole"]) for f in grid.get("framework", [])
             if (f, e) in present]
    keys = ["framework", "environment", "repetition"] if "repetition" in ok else ["framework", "environment"]
    runs = ok.drop_duplicates(keys)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for x, (framework, environment) in enumerate(order):
        mine = runs[(runs["framework"] == framework) & (runs["environment"] == environment)]
        seconds = mine["uninstrumented_learn_s"]
        left.bar([x], [seconds.mean()], color="#4c72b0", label="mean over repetitions" if x == 0 else None)
        left.scatter([x] * len(seconds), seconds, color="black", s=8, zorder=3,
                     label="one repetition" if x == 0 else None)
        left.annotate(f"{int(mine['timesteps'].iloc[0]):,} steps\n{mine['env_steps_per_s'].mean():,.0f} steps/s",
                      (x, seconds.mean()), ha="center", va="bottom", fontsize=7)
    if order:  # room above the tallest bar for its label
        left.set_ylim(0, runs["uninstrumented_learn_s"].max() * 1.3)
    left.set_xticks(range(len(order)), [_run_label(*key) for key in order], fontsize=8)
    left.set_xlabel("framework and environment")
    left.set_ylabel("training time without the profiler (s)")
    left.set_title("wall time to each run's environment steps", fontsize=9)
    left.legend(fontsize=7, loc="upper left")
    scopes = iteration_kernels(ok, depth=SCOPE_DEPTH)
    if scopes.empty:
        right.text(0.5, 0.5, "no jitted run with kernels\n(the scopes need a GPU)", ha="center", va="center",
                   transform=right.transAxes, fontsize=8)
        right.set_axis_off()
    else:
        scopes = scopes.assign(run=[_run_label(f, e) for f, e in zip(scopes["framework"], scopes["environment"])])
        by = ["run", "repetition"] if "repetition" in scopes else ["run"]
        seconds = scopes.groupby([*by, "scope"])["seconds"].sum()
        per_run = seconds / seconds.groupby(level=by).transform("sum")
        shares = per_run.groupby(["run", "scope"]).mean().mul(100).unstack(fill_value=0.0)
        shares = shares.reindex([label for label in (_run_label(*key) for key in order) if label in shares.index])
        ranked = list(shares.mean().sort_values(ascending=False).index)
        if len(ranked) > len(COLOURS):  # the smallest in one bar of their own, so that every bar sums to 100%
            kept = ranked[:len(COLOURS) - 1]
            shares = shares[kept].assign(**{OTHER_SCOPES: shares[ranked[len(kept):]].sum(axis=1)})
            ranked = [*kept, OTHER_SCOPES]
        colours = dict(zip(ranked, COLOURS))
        bottom = pd.Series(0.0, index=shares.index)
        for scope, colour in colours.items():
            right.bar(range(len(shares)), shares[scope], bottom=bottom, color=colour, label=scope)
            for x, share in enumerate(shares[scope]):
                if share >= 4:
                    right.text(x, bottom.iloc[x] + share / 2, f"{share:.1f}%", ha="center", va="center", fontsize=7)
            bottom += shares[scope]
        right.set_xticks(range(len(shares)), list(shares.index), fontsize=8)
        right.set_ylabel("share of the iteration's GPU kernel time (%)")
        right.set_title("inside an iteration, per jax.named_scope", fontsize=9)
        right.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), title="scope", title_fontsize=7)
    devices = ", ".join(sorted({str(d) for d in ok.get("device", pd.Series(dtype=str)).dropna()}))
    fig.suptitle(f"PPO with CartPole's hyperparameters in each execution model (times include compiling)\n"
                 f"{meta.get('scale', '')} scale, device: {devices}", fontsize=9)
    note_skipped(fig, results, "framework")
    fig.tight_layout()
    return fig
