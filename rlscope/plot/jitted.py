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

__all__ = ["jitted_training", "STEP_OPERATION", "FUSED_OPERATION"]

STEP_OPERATION = "train_step"  # the operation around an iteration (experiments/casestudies/jitted_ppo.py)
FUSED_OPERATION = "rollout"  # jax_fused's kernel launch inside it, which no XLA module holds
FUSED_LABEL = "rollout (fused CUDA kernel)"


def _run_label(framework: str, environment: str) -> str:
    return f"{framework}\n{environment}"


def jitted_training(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Left: seconds to train ``timesteps`` steps without the profiler, per framework and
    environment (mean over repetitions, each repetition a dot), with the environment steps per
    second on each bar. Right: per jitted run (framework and environment), the iteration's kernel
    time per scope (the kernels of ``STEP_OPERATION``, and of ``FUSED_OPERATION``, the fused
    rollout kernel, without compile-time autotuning), as shares of it (mean over repetitions),
    each scope one colour across bars."""
    ok = results[results["status"] == "ok"]
    if "environment" not in ok:
        ok = ok.assign(environment="cartpole")
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
        left.annotate(f"{mine['env_steps_per_s'].mean():,.0f} steps/s", (x, seconds.mean()), ha="center",
                      va="bottom", fontsize=7)
    left.set_xticks(range(len(order)), [_run_label(*key) for key in order], fontsize=8)
    left.set_xlabel("framework and environment")
    left.set_ylabel("training time without the profiler (s)")
    left.set_title("wall time to the same environment steps", fontsize=9)
    left.legend(fontsize=7, loc="upper left")
    scopes = ok[(ok["table"] == "jax_scopes")] if "table" in ok else ok.iloc[0:0]
    if not scopes.empty:  # the step's kernels: not the set-up's outside it, not compile-time autotuning
        scopes = scopes[scopes["operation"].isin([STEP_OPERATION, FUSED_OPERATION])
                        & (scopes.get("match") != "autotuning")]
        scopes = scopes.assign(scope=scopes["scope"].where(scopes["operation"] != FUSED_OPERATION, FUSED_LABEL))
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
        colours = dict(zip(shares.mean().sort_values(ascending=False).index, plt.get_cmap("tab10").colors))
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
    steps = ", ".join(sorted({f"{int(t):,}" for t in ok.get("timesteps", pd.Series(dtype=float)).dropna()}))
    devices = ", ".join(sorted({str(d) for d in ok.get("device", pd.Series(dtype=str)).dropna()}))
    fig.suptitle(f"PPO with CartPole's hyperparameters in each execution model (jax_jit's time includes "
                 f"compiling)\n"
                 f"{meta.get('scale', '')} scale, {steps} environment steps, device: {devices}", fontsize=9)
    note_skipped(fig, results, "framework")
    fig.tight_layout()
    return fig
