"""The tables and findings of the case study "end-to-end jitted training" in
docs/results/case-studies.md, from ``h100/jitted_training/results.csv`` (``rlscope run
configs/jitted_training.yaml --scale full`` on a lent H100)."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
from tables_common import in_order, markdown_table, ok_results

from experiments.casestudies.jitted_training import ENVS, ROLLOUT_STEPS
from rlscope.analyze.hlo_join import UNMATCHED
from rlscope.analyze.hlo_scopes import FUSED_ACROSS
from rlscope.plot.jitted import FUSED_LABEL, SCOPE_DEPTH, iteration_kernels

_NAME = "jitted_training"


def _runs() -> pd.DataFrame:
    """One row per run (framework, environment, repetition), in the order they ran."""
    ok = ok_results(_NAME)
    return ok.drop_duplicates(["framework", "environment", "repetition"])


def _scopes(depth: int | None = SCOPE_DEPTH) -> pd.DataFrame:
    """Per jitted run and scope (cut to ``depth`` names, as the figure's), its share of the
    iteration's kernel time (the step's kernels and the fused rollout kernel's; no compile-time
    autotuning), mean over repetitions."""
    rows = iteration_kernels(ok_results(_NAME), depth)
    seconds = rows.groupby(["framework", "environment", "repetition", "scope"])["seconds"].sum()
    shares = seconds / seconds.groupby(level=["framework", "environment", "repetition"]).transform("sum")
    return shares.groupby(["framework", "environment", "scope"]).mean().rename("share").reset_index()


def jitted_training_runs() -> str:
    """Each run's wall time to its environment steps without the profiler (compilation included),
    its steps per second, and its wall time under ``rlscope prof``."""
    runs = _runs()
    rows = [[r.framework, r.environment, int(r.repetition), f"{int(r.timesteps):,}", f"{r.uninstrumented_learn_s:.2f}",
             f"{r.env_steps_per_s:,.0f}", f"{r.profiled_learn_s:.2f}",
             f"{r.profiled_learn_s / r.uninstrumented_learn_s:.2f}x"] for r in runs.itertuples()]
    devices = ", ".join(sorted(set(runs["device"].astype(str))))
    return (f"Runs on `{devices}`, one row each (`h100/{_NAME}/results.csv`).\n\n"
            + markdown_table(["framework", "environment", "repetition", "environment steps",
                              "training without the profiler (s)", "steps/s", "under rlscope prof (s)",
                              "profiled / not"], rows) + "\n")


def jitted_training_scopes() -> str:
    """Per jitted run, the iteration's GPU kernel time per scope."""
    scopes = _scopes()
    runs = in_order(zip(scopes["framework"], scopes["environment"]))
    order = scopes.groupby("scope")["share"].max().sort_values(ascending=False).index
    table = scopes.set_index(["framework", "environment", "scope"])["share"]
    rows = [[scope, *(f"{table[(f, e, scope)]:.1%}" if (f, e, scope) in table.index else "" for f, e in runs)]
            for scope in order]
    return markdown_table(["scope", *(f"{f} on {e}" for f, e in runs)], rows) + "\n"


def jitted_training_findings() -> str:
    """What the runs show, in numbers from them."""
    runs = _runs()
    cartpole = runs[runs["environment"] == "cartpole"].groupby("framework")["uninstrumented_learn_s"].mean()
    lines = []
    if "jax_jit" in cartpole.index and len(cartpole) > 1:
        fastest = cartpole.idxmin()
        others = ", ".join(f"{f} {cartpole[f] / cartpole['jax_jit']:.1f}x" for f in cartpole.index if f != "jax_jit")
        lines.append(f"- **On CartPole, {fastest} trains fastest**: the whole-step `jax.jit` takes "
                     f"{cartpole['jax_jit']:.1f} s to the steps, compilation included; the others take, relative to "
                     f"it: {others}.")
    scopes = _scopes().set_index(["framework", "environment", "scope"])["share"]
    if ("jax_jit", "cartpole", "rollout/env") in scopes.index:
        env_share = scopes[("jax_jit", "cartpole", "rollout/env")]
        inference = scopes.get(("jax_jit", "cartpole", "rollout/inference"), 0.0)
        lines.append(f"- **Inside the whole-step jit on CartPole**: the simulator (`rollout/env`) is "
                     f"{env_share:.1%} of the step's kernel time, the policy's inference in the rollout "
                     f"{inference:.1%}.")
    if ("jax_jit", "ant", "rollout/env") in scopes.index:
        lines.append(_ant_finding(scopes[("jax_jit", "ant", "rollout/env")]))
    if {"jax_fused", "jax_jit"} <= set(cartpole.index):
        lines.append(_fused_finding(cartpole))
    return "\n".join(lines) + "\n"


def _kernels_per_rollout_step(environment: str) -> float:
    """The jitted iterations' kernels (the update's included, no autotuning) per step of the
    rollout (all environments at once), mean over repetitions."""
    rows = iteration_kernels(ok_results(_NAME))
    rows = rows[(rows["framework"] == "jax_jit") & (rows["environment"] == environment)]
    runs = _runs().set_index(["framework", "environment", "repetition"]).sort_index().loc[("jax_jit", environment)]
    kernels = rows.groupby("repetition")["kernels"].sum()
    return float((kernels / (runs["iterations"] * ROLLOUT_STEPS).reindex(kernels.index)).mean())


def _ant_finding(env_share: float) -> str:
    """The simulator's share on ant, the largest of MJX's own scopes inside it, and how many
    kernels the step launches per environment step against CartPole's."""
    deep = _scopes(depth=None)
    deep = deep[(deep["framework"] == "jax_jit") & (deep["environment"] == "ant")
                & deep["scope"].str.startswith("rollout/env/")].nlargest(3, "share")
    parts = ", ".join(f"`{r.scope.removeprefix('rollout/env/')}` {r.share:.1%}" for r in deep.itertuples())
    shares = _scopes().set_index(["framework", "environment", "scope"])["share"]
    unplaced = {label: shares.get(("jax_jit", "ant", label), 0.0) for label in (FUSED_ACROSS, UNMATCHED)}
    return (f"- **Inside the whole-step jit on brax's ant**: the simulator (`rollout/env`, with MJX's own "
            f"`jax.named_scope`s under it) is {env_share:.1%} of the step's kernel time at least: "
            f"{unplaced[FUSED_ACROSS]:.1%} is in fusions across scopes and {unplaced[UNMATCHED]:.1%} in kernels the "
            f"join did not place (`{UNMATCHED}`)"
            + (f"; its largest scopes: {parts}" if parts else "")
            + f". Per step of its rollout (all {ENVS} environments at once; the update's kernels counted in), "
            f"the iteration launches {_kernels_per_rollout_step('ant'):,.0f} kernels on ant, "
            f"{_kernels_per_rollout_step('cartpole'):,.0f} on CartPole.")


def _rollout_kernels(framework: str) -> tuple[float, float]:
    """(kernels, kernel milliseconds) of the rollout per iteration on CartPole, mean over
    repetitions: the fused kernel's launches for jax_fused, the ``rollout`` scopes' kernels for
    jax_jit."""
    rows = iteration_kernels(ok_results(_NAME))
    rows = rows[(rows["framework"] == framework) & (rows["environment"] == "cartpole")]
    scope = rows["scope"]
    rows = rows[scope == FUSED_LABEL] if framework == "jax_fused" else \
        rows[(scope == "rollout") | scope.str.startswith("rollout/")]
    iterations = _runs().set_index(["framework", "environment", "repetition"])["iterations"].sort_index()
    per_run = rows.groupby("repetition")[["kernels", "seconds"]].sum()
    per_run = per_run.div(iterations.loc[framework, "cartpole"].reindex(per_run.index), axis=0)
    return float(per_run["kernels"].mean()), float(per_run["seconds"].mean() * 1e3)


def _fused_finding(cartpole: pd.Series) -> str:
    fused_kernels, fused_ms = _rollout_kernels("jax_fused")
    scan_kernels, scan_ms = _rollout_kernels("jax_jit")
    faster = cartpole["jax_fused"] < cartpole["jax_jit"]
    compiled = _runs()
    compiled = compiled[compiled["environment"] == "cartpole"].assign(
        iteration_ms=compiled["uninstrumented_iteration_s"] * 1e3,
        # the training time the compiled iterations do not account for: compiling, first launches
        outside_s=compiled["uninstrumented_learn_s"] - compiled["iterations"] * compiled["uninstrumented_iteration_s"])
    pace = compiled.groupby("framework")["iteration_ms"].agg(["min", "max"])
    outside = compiled.groupby("framework")["outside_s"].mean()
    span = {f: f"{pace.loc[f, 'min']:.2f}-{pace.loc[f, 'max']:.2f}" for f in ("jax_fused", "jax_jit")}
    steady = (f"Once compiled, an iteration takes {span['jax_fused']} ms with the fused kernel and "
              f"{span['jax_jit']} ms in the whole-step jit (the repetitions' range); the rest of the training "
              f"time, what the compiled iterations do not account for (compiling, the first launches), is "
              f"{outside['jax_fused']:.1f} s against {outside['jax_jit']:.1f} s.")
    return (f"- **The fused rollout kernel: {'the rollout' if fused_ms < scan_ms else 'not the rollout'}'s GPU time "
            f"{'and' if faster else 'but not'} the training shortened**: per iteration the rollout is "
            f"{fused_kernels:.0f} launch of {fused_ms:.2f} ms in the fused kernel against {scan_kernels:,.0f} kernels "
            f"of {scan_ms:.2f} ms in all in the whole-step jit's scan; training takes {cartpole['jax_fused']:.1f} s "
            f"against {cartpole['jax_jit']:.1f} s. {steady}")


TABLES: dict[str, Callable[[], str]] = {"jitted_training_runs": jitted_training_runs,
                                        "jitted_training_scopes": jitted_training_scopes,
                                        "jitted_training_findings": jitted_training_findings}
