"""The tables of docs/results/jax-scopes.md, from ``bench/jax_scopes.py``'s JSON records beside it."""

from __future__ import annotations

import json
from collections.abc import Callable

from tables_common import RESULTS, markdown_table

JAX_SCOPES = RESULTS / "jax_scopes"


def _record() -> dict:
    return json.loads((JAX_SCOPES / "h100.json").read_text())


def _caption(data: dict) -> str:
    w = data["workload"]
    return (f"{data['gpu']}, JAX {data['versions']['jax']}, commit {data['host']['commit']}, {data['host']['date']}; "
            f"jitted PPO, {w['envs']} environments x {w['steps']} steps per iteration, {w['iterations']} iterations "
            f"(`{data['command']}`)" + (f". {data['note']}" if data.get("note") else "") + "\n\n")


def jax_scopes_shares() -> str:
    """Per scope, its share of the GPU kernel time of the timed iterations in each mode (autotuning
    left out), and the default mode's difference relative to the precise mode's."""
    data = _record()
    rows = []
    for scope, r in sorted(data["attribution"]["shares"].items(), key=lambda kv: -kv[1]["precise"]):
        diff = r["relative_difference"]
        rows.append([scope, f"{r['default']:.1%}", f"{r['precise']:.1%}",
                     "n/a" if diff is None else f"{diff:+.0%}", "yes" if r["goal_applies"] else "no"])
    a = data["attribution"]
    total = sum(a["matches_default"].values())
    matches = ", ".join(f"{k} {v / total:.1%}" for k, v in sorted(a["matches_default"].items(), key=lambda kv: -kv[1]))
    return (_caption(data) + markdown_table(["scope", "default mode", "precise mode", "default vs precise",
                                             "share >= 5%"], rows)
            + f"\n\nKernels attributed (a scope, no scope, library or fused across scopes): default mode "
              f"{a['attributed_default']:.1%}, precise mode {a['attributed_precise']:.1%}. How the default mode "
              f"matched them: {matches}. Kernel names whose first scope is the same in both modes: "
              f"{a['kernel_names_same_scope']} of {a['kernel_names_compared']}.\n")


def jax_scopes_cost() -> str:
    """Seconds per training iteration per mode (median over rounds, one process per mode per
    round, interleaved) and each --jax-scopes mode over rlscope prof, per round."""
    data = _record()
    medians = data["iteration_s_median"]
    rows = [[mode, f"{medians[mode] * 1e3:.2f}", " ".join(f"{v * 1e3:.2f}" for v in data["iteration_s"][mode])]
            for mode in medians]
    ratios = [[label, f"{r['median']:.2f}x [{r['min']:.2f}, {r['max']:.2f}]", len(r["rounds"])]
              for label, r in (("--jax-scopes over rlscope prof", data["scopes_over_prof"]),
                               ("--jax-scopes=precise over rlscope prof", data["precise_over_prof"]))]
    return (_caption(data) + markdown_table(["mode", "ms per iteration (median)", "each round"], rows) + "\n\n"
            + markdown_table(["ratio", "median [min, max] over rounds", "rounds"], ratios))


TABLES: dict[str, Callable[[], str]] = {"jax_scopes_shares": jax_scopes_shares, "jax_scopes_cost": jax_scopes_cost}
