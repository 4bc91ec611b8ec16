"""A short plain-text summary of an analysis, printed by `rlscope analyze` and `rlscope prof`."""

from __future__ import annotations

import pandas as pd

from rlscope.analyze.caveats import CAVEAT, marked_groups, markers

__all__ = ["format_summary", "format_correction", "format_jax_scopes"]


def format_summary(breakdown: pd.DataFrame, transitions: pd.DataFrame, gpu: pd.DataFrame | None = None) -> str:
    """Per process and operation of the main thread: total seconds and % in each resource set;
    rows with a caveat (``rlscope.analyze.caveats``) are marked, and the caveats follow the tables."""
    main = breakdown[breakdown["thread"] == "main"]
    if main.empty:
        return "no events recorded"
    table = main.pivot_table(index=["process", "operation"], columns="resources", values="time_s", aggfunc="sum",
                             fill_value=0.0)
    total = table.sum(axis=1)
    shares = table.div(total, axis=0).mul(100).round(1)
    shares.insert(0, "total_s", total.round(4))
    tmain = transitions[transitions["thread"] == "main"]
    marks = markers(main, tmain)
    _mark(shares, main, marks)
    lines = ["time per operation (s) and % by resources in use:", shares.to_string()]
    if not tmain.empty:
        value = "per_iteration" if tmain["iterations"].gt(0).all() else "count"
        counts = tmain.pivot_table(index=["process", "operation"], columns="transition", values=value,
                                   aggfunc="sum", fill_value=0).round(2)
        _mark(counts, tmain, marks)
        lines += [f"transitions ({'per iteration' if value == 'per_iteration' else 'total'}):", counts.to_string()]
    if gpu is not None and not gpu.empty:
        table = gpu.pivot_table(index=["process", "operation"], columns="activity", values=["count", "time_ns"],
                                aggfunc="sum", fill_value=0)
        table["time_ns"] = table["time_ns"] / 1e6
        table = table.rename(columns={"time_ns": "ms"}, level=0)
        lines += ["GPU work per operation (count, ms):", table.round(3).to_string()]
    return "\n".join(lines + [f"{mark} {text}" for text, mark in marks.items()])


def format_jax_scopes(jax_scopes: pd.DataFrame) -> str:
    """Per process and operation that called jitted JAX code (``--jax-scopes``): its kernel time per
    ``jax.named_scope`` (ms, % of the operation's kernel time, kernels, how they were matched); ""
    for an analysis without such kernels."""
    if jax_scopes.empty:
        return ""
    rows = jax_scopes.groupby(["process", "operation", "scope"], sort=False).agg(
        ms=("duration_ns", "sum"), share=("share", "sum"), kernels=("kernels", "sum"),
        match=("match", lambda m: ",".join(sorted(set(m)))))
    rows["ms"] = (rows["ms"] / 1e6).round(3)
    rows["share"] = (rows["share"] * 100).round(1)
    rows = rows.rename(columns={"share": "%"})
    lines = ["GPU kernel time inside jax.jit per jax.named_scope (ms, % of the operation's):", rows.to_string()]
    named = jax_scopes[jax_scopes["kernel_names"].astype(bool)]
    if not named.empty:
        lines.append("Their largest kernels where no single scope was found (unmatched, ambiguous, library, "
                     "across scopes):")
        lines += [f"  {r.process} / {r.operation} / {r.scope}: {r.kernel_names}" for r in named.itertuples()]
    return "\n".join(lines)


def _mark(table: pd.DataFrame, rows: pd.DataFrame, marks: dict[str, str]) -> None:
    """Add a ``caveat`` column of markers to ``table`` (indexed by process and operation) where
    ``rows`` carry a caveat."""
    groups = marked_groups(rows, ["process", "operation"], marks)
    if groups:
        table[CAVEAT] = [groups.get(key, "") for key in table.index]


def format_correction(breakdown: pd.DataFrame) -> str:
    """Per process and operation of the main thread: raw and overhead-corrected seconds, with the
    corrected time's 95% interval where the breakdown has one (``corrected_low_ns``,
    ``corrected_high_ns``: ``rlscope.calibrate.correct_breakdown``); rows with a caveat marked,
    as in ``format_summary`` (among them those the calibration removes more from than was
    measured)."""
    main = breakdown[breakdown["thread"] == "main"]
    interval = {"corrected_low_ns", "corrected_high_ns"} <= set(main)
    columns = ["time_ns", "corrected_ns"] + (["corrected_low_ns", "corrected_high_ns"] if interval else [])
    table = main.groupby(["process", "operation"])[columns + ["overhead_ns"]].sum() / 1e9
    table.columns = ["raw_s", "corrected_s"] + (["corrected_low_s", "corrected_high_s"] if interval else []) + [
        "overhead_s"]
    table["overhead_%"] = (100 * table["overhead_s"] / table["raw_s"]).round(1)
    total = table.sum()
    line = f"total: raw {total['raw_s']:.4f} s, corrected {total['corrected_s']:.4f} s"
    if interval:  # the sums of the rows' bounds: each cost's error is the same in every operation
        line += (f", {total['corrected_low_s']:.4f} to {total['corrected_high_s']:.4f} s by the costs' 95% "
                 f"intervals")
    elif "uncertainty_ns" in main:
        line += f" ± {main['uncertainty_ns'].sum() / 1e9:.4f} s (from the costs' 95% intervals)"
    if "excess_ns" in main and main["excess_ns"].sum() > 0:
        line += (f"; the costs exceed the measured time by {main['excess_ns'].sum() / 1e9:.4f} s where rows "
                 f"were corrected to 0")
    table = table.round(4)
    marks = markers(main)
    _mark(table, main, marks)
    return "\n".join(["time corrected for profiling overhead (s):", table.to_string(), line]
                     + [f"{mark} {text}" for text, mark in marks.items()])
