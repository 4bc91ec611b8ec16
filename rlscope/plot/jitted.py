"""The figure of the case study "end-to-end jitted training" (configs/jitted_training.yaml): PPO
on CartPole in each execution model, its wall time to the same number of environment steps, and
where the fully jitted step's GPU kernel time goes per ``jax.named_scope``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from rlscope.plot.render import note_skipped

__all__ = ["jitted_training", "STEP_OPERATION"]

STEP_OPERATION = "train_step"  # the operation around the jitted call (experiments/casestudies/jitted_ppo.py)


def jitted_training(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Left: seconds to train ``timesteps`` steps without the profiler, per framework (mean over
    repetitions, each repetition a dot), with the environment steps per second on each bar.
    Right: the jitted step's kernel time per scope (the kernels of ``STEP_OPERATION``, without
    compile-time autotuning), as shares of it (mean over repetitions)."""
    ok = results[results["status"] == "ok"]
    order = [f for f in dict(meta.get("grid", {})).get("framework", []) if f in set(ok["framework"])]
    runs = ok.drop_duplicates(["framework", "repetition"]) if "repetition" in ok else ok.drop_duplicates("framework")
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    means = runs.groupby("framework")["uninstrumented_learn_s"].mean().reindex(order)
    left.bar(range(len(order)), means.to_numpy(), color="#4c72b0", label="mean over repetitions")
    for x, framework in enumerate(order):
        seconds = runs.loc[runs["framework"] == framework, "uninstrumented_learn_s"]
        left.scatter([x] * len(seconds), seconds, color="black", s=8, zorder=3,
                     label="one repetition" if x == 0 else None)
        rate = runs.loc[runs["framework"] == framework, "env_steps_per_s"].mean()
        left.annotate(f"{rate:,.0f} steps/s", (x, means[framework]), ha="center", va="bottom", fontsize=7)
    left.set_xticks(range(len(order)), order)
    left.set_xlabel("framework")
    left.set_ylabel("training time without the profiler (s)")
    left.set_title("wall time to the same environment steps", fontsize=9)
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)
    scopes = ok[(ok["table"] == "jax_scopes")] if "table" in ok else ok.iloc[0:0]
    if not scopes.empty:  # the step's kernels: not the set-up's outside it, not compile-time autotuning
        scopes = scopes[(scopes["operation"] == STEP_OPERATION) & (scopes.get("match") != "autotuning")]
    if scopes.empty:
        right.text(0.5, 0.5, "no jitted run with kernels\n(the scopes need a GPU)", ha="center", va="center",
                   transform=right.transAxes, fontsize=8)
        right.set_axis_off()
    else:
        by = ["repetition"] if "repetition" in scopes else []
        seconds = scopes.groupby([*by, "scope"])["seconds"].sum()
        per_run = seconds / (seconds.groupby(level=by).transform("sum") if by else seconds.sum())
        shares = (per_run.groupby("scope").mean() * 100).sort_values(ascending=False)
        bottom = 0.0
        for scope, share in shares.items():
            right.bar([0], [share], bottom=bottom, label=f"{scope} ({share:.1f}%)")
            bottom += share
        right.set_xticks([0], ["jax_jit"])
        right.set_ylabel("share of the step's GPU kernel time (%)")
        right.set_title("inside the jitted step, per jax.named_scope", fontsize=9)
        right.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    steps = ", ".join(sorted({f"{int(t):,}" for t in ok.get("timesteps", pd.Series(dtype=float)).dropna()}))
    devices = ", ".join(sorted({str(d) for d in ok.get("device", pd.Series(dtype=str)).dropna()}))
    fig.suptitle(f"PPO on CartPole with matched hyperparameters in each execution model (jax_jit's time includes "
                 f"compiling)\n"
                 f"{meta.get('scale', '')} scale, {steps} environment steps, device: {devices}", fontsize=9)
    note_skipped(fig, results, "framework")
    fig.tight_layout()
    return fig
