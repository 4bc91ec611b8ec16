"""The tables of docs/results/jax-scopes.md, from ``bench/jax_scopes.py``'s JSON records beside it."""

from __future__ import annotations

import csv
import json
import math
import statistics
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


def _difference(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"


def jax_scopes_shares() -> str:
    """Per scope, its share of the GPU kernel time of the timed iterations (autotuning left out),
    mean over the rounds: the precise mode's, the default mode's, and the default mode's with
    XLA's command buffers off as the precise mode runs, each against the precise mode; the
    precise trace of round 0 joined by name alone (the default mode's join on the same kernels);
    then round 0's kernel counts per scope and their mean duration in each mode's trace."""
    data = _record()
    over = data["shares_over_rounds"]
    a, one = data["attribution"], data["attribution"]["one_trace"]
    rows = []
    graphs_off = "scopes-graphs-off" in over["modes"]
    for scope, r in sorted(over["scopes"].items(), key=lambda kv: -kv[1]["precise"]):
        same = one["shares"].get(scope, {"default": 0.0, "precise": 0.0, "relative_difference": None})
        off = [f"{r['scopes-graphs-off']:.1%}", _difference(r["scopes-graphs-off_relative_difference"])] \
            if graphs_off else []
        rows.append([scope, f"{r['precise']:.1%}", f"{r['scopes']:.1%}", _difference(r["scopes_relative_difference"]),
                     f"{(r['scopes'] - r['precise']) * 100 + 0.0:+.1f}".replace("-0.0", "+0.0"), *off,
                     f"{same['precise']:.1%}", f"{same['default']:.1%}", _difference(same["relative_difference"]),
                     "yes" if r["goal_applies"] else "no"])
    goal = [r for r in over["scopes"].values() if r["goal_applies"]]
    relative = max(abs(r["scopes_relative_difference"]) for r in goal)
    points = max(abs(r["scopes"] - r["precise"]) for r in goal) * 100
    total = sum(a["matches_default"].values())
    matches = ", ".join(f"{k} {v / total:.1%}" for k, v in sorted(a["matches_default"].items(), key=lambda kv: -kv[1]))
    durations = a["kernel_durations"]
    kernel_rows = [[scope, d["kernels"], durations["precise"].get(scope, {}).get("kernels", 0), f"{d['mean_ns']:,.0f}",
                    f"{durations['precise'][scope]['mean_ns']:,.0f}" if scope in durations["precise"] else "n/a"]
                   for scope, d in sorted(durations["default"].items(), key=lambda kv: -kv[1]["kernels"])]
    return (_caption(data)
            + f"Shares: mean over {over['rounds']} rounds, one process per mode per round; the last three "
              f"columns are round 0's precise trace alone, joined by XLA's ranges and by name.\n\n"
            + markdown_table(["scope", "precise mode", "default mode", "vs precise", "vs precise (points)",
                              *(["default mode, CUDA graphs off", "vs precise"] if graphs_off else []),
                              "round 0's precise trace: by ranges", "by name", "vs ranges", "share >= 5%"], rows)
            + f"\n\nOver the scopes of at least 5% of the step (in either mode), the default mode is at most "
              f"{relative:.1%} from the "
              f"precise mode relative to each scope's share, and at most {points:.1f} points of the step.\n\n"
              f"Round 0: kernels attributed (a scope, no scope, library or fused across scopes): default mode "
              f"{a['attributed_default']:.1%}, precise mode {a['attributed_precise']:.1%}. How the default mode "
              f"matched them: {matches}. Kernel by kernel over the timed iterations, the two traces launch "
              f"{a['step_kernels'][0]:,} and {a['step_kernels'][1]:,} kernels, "
              f"{a['step_kernels_same_name']:,} with the same name at the same position and "
              f"{a['step_kernels_same_scope']:,} of those with the same scope; of the "
              f"{a['kernel_names_compared']:,} kernel names in both, {a['kernel_names_same_scope']:,} get the same "
              f"scope in both. "
              f"On the precise trace, the name join gives {one['kernels_same_scope']:.1%} of its {one['kernels']:,} "
              f"kernels ({one['time_same_scope']:.1%} of their time) the scope XLA's ranges give.\n\n"
            + markdown_table(["scope", "kernels (default mode)", "kernels (precise mode)", "mean ns (default mode)",
                              "mean ns (precise mode)"], kernel_rows) + "\n")


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
    scopes = data["scopes_over_prof"]["rounds"]
    below = sum(r < 1 for r in scopes)
    graphs = ""
    if "scopes-graphs-off" in medians:  # ratios taken round by round, as the others
        times = data["iteration_s"]
        off = [g / d for g, d in zip(times["scopes-graphs-off"], times["scopes"])]
        ranges = [p / g for p, g in zip(times["precise"], times["scopes-graphs-off"])]
        graphs = (f" With CUDA graphs off (and nothing else changed) the default mode takes "
                  f"{statistics.median(off):.1f}x [{min(off):.1f}, {max(off):.1f}] its time with them; the precise "
                  f"mode takes {statistics.median(ranges):.2f}x [{min(ranges):.2f}, {max(ranges):.2f}] the graphs-off "
                  f"default mode's, " + ("more in every round: its ranges cost time too." if min(ranges) > 1 else
                                         f"below 1 in {sum(r < 1 for r in ranges)} of {len(ranges)} rounds: what its "
                                         f"ranges add is not told apart from the rounds' spread.")
                  + (" Most of the precise mode's cost is the graphs it turns off." if min(off) > 1 else ""))
    return (_caption(data) + markdown_table(["mode", "ms per iteration (median)", "each round"], rows) + "\n\n"
            + markdown_table(["ratio", "median [min, max] over rounds", "rounds"], ratios)
            + f"\n\n`--jax-scopes` over `rlscope prof` was below 1 in {below} of {len(scopes)} rounds; the rounds "
              f"span {max(scopes) - min(scopes):.2f} of the ratio, against the goal's margin of 0.05.{graphs}\n")


STEP = "train_step"  # the jitted PPO's operation around its whole-step jax.jit
NOT_PLACED = ("ambiguous", "unmatched")  # kernels no scope, library or "fused across scopes" took


def jax_scopes_ant() -> str:
    """brax's ant under the whole-step jit (``jax_scopes/ant_h100.csv``, ``rlscope analyze``'s
    jax_scopes table of the default-mode trace; how the traces were made: ``ant_h100.json``): per
    scope of the step, its kernels and their time, compile-time autotuning left out; how many of
    the step's kernels the join placed, and how; then the two modes against each other."""
    meta = json.loads((JAX_SCOPES / "ant_h100.json").read_text())
    rows = list(csv.DictReader((JAX_SCOPES / "ant_h100.csv").read_text().splitlines()))
    step = [r for r in rows if r["operation"] == STEP and r["match"] != "autotuning"]
    by_scope: dict[str, list[int]] = {}  # scope: [kernels, ns]
    by_match: dict[str, int] = {}
    for r in step:
        kernels_ns = by_scope.setdefault(r["scope"], [0, 0])
        kernels_ns[0] += int(r["kernels"])
        kernels_ns[1] += int(r["duration_ns"])
        by_match[r["match"]] = by_match.get(r["match"], 0) + int(r["kernels"])
    kernels = sum(k for k, _ in by_scope.values())
    total_ns = sum(ns for _, ns in by_scope.values())
    table = markdown_table(["scope", "kernels", "ms", "share of the step's kernel time"],
                           [[scope, f"{k:,}", f"{ns / 1e6:.2f}", f"{ns / total_ns:.1%}"]
                            for scope, (k, ns) in sorted(by_scope.items(), key=lambda item: -item[1][1])])
    not_placed = {m: by_match.get(m, 0) for m in NOT_PLACED}
    placed = kernels - sum(not_placed.values())
    run = meta["default"]
    caption = (f"{run['device']}, JAX {run['jax']}, brax {run['brax']}, mujoco-mjx {run['mujoco-mjx']}, "
               f"{run['date']} (the tree sent: {run['tree']}); `{run['command']}`, analysed at "
               f"{meta['analysed']['commit']}. The `{STEP}` operation's kernels over the run's iterations, those "
               f"launched while XLA compiled (autotuning) left out.\n\n")
    names = [f"- {r['scope']}: {r['kernel_names']}" for r in step if r["kernel_names"]]
    summary = (f"\nOf the step's {kernels:,} kernels, {placed / kernels:.1%} are attributed as issue 54's goal "
               f"counts it: to a scope, to no scope, to a library or to \"fused across scopes\" (this last alone "
               f"{by_scope.get('fused across scopes', [0])[0] / kernels:.1%}); the rest: "
               + ", ".join(f"{m} {n / kernels:.1%}" for m, n in not_placed.items()) + ". How the join placed them: "
               + ", ".join(f"{m} {n / kernels:.1%}" for m, n in sorted(by_match.items(), key=lambda item: -item[1]))
               + ". The largest kernels of the rows without one scope:\n\n" + "\n".join(dict.fromkeys(names)) + "\n")
    return caption + table + summary + _ant_modes(meta)


def _ant_modes(meta: dict) -> str:
    """``jax_scopes/ant_modes_h100.json`` (``bench/jax_scopes.py --traces``): the precise-mode
    trace joined by name against its own ranges (same kernels, same durations: the join alone), and
    each scope's share in the two modes' runs (as users run them: the durations differ too)."""
    data = json.loads((JAX_SCOPES / "ant_modes_h100.json").read_text())
    one, both = data["attribution"]["one_trace"], data["attribution"]["shares"]
    absent = {"precise": 0.0, "default": 0.0, "relative_difference": None}  # a scope one join never gave
    rows = []
    for scope, r in sorted(both.items(), key=lambda item: -item[1]["precise"]):
        alone = one["shares"].get(scope, absent)
        rows.append([scope, f"{alone['precise']:.1%}", f"{alone['default']:.1%}",
                     _difference(alone["relative_difference"]), f"{r['default']:.1%}",
                     _difference(r["relative_difference"]), "yes" if r["goal_applies"] else "no"])
    run = meta["precise"]
    machines = {r["mode"]: r["machine"] for r in data["recorded"]}
    return (f"\nThe same workload in the precise mode, another process on another machine (`{run['command']}`; "
            f"{run['device']}, {run['date']}, the tree sent: {run['tree']}; machines {machines['default']} and "
            f"{machines['precise']}), both traces' kernels of the iterations after the first "
            f"{data['timed_from_step']} (`python bench/jax_scopes.py --traces DEFAULT PRECISE`). Of the precise run's "
            f"{one['kernels']:,} such kernels, the name join gives "
            f"{one['kernels_same_scope']:.2%} (and {one['time_same_scope']:.2%} of their time) the scope XLA's "
            f"ranges give.\n\n" + markdown_table(
                ["scope", "precise run: by XLA's ranges", "precise run: by name", "vs ranges",
                 "default-mode run", "vs precise run", "share >= 5%"], rows))


COST_RECORDS = ("cost_h200.json", "cost_autotune_cache_h200.json")  # bench/jax_scopes.py --cost-only


def jax_scopes_cost_rounds() -> str:
    """``--cost-only`` records: per record, ms per iteration per mode (median over rounds, and
    ``rlscope prof``'s range over its processes) and --jax-scopes over rlscope prof round by round,
    median with its distribution-free 95% interval; then every record's rounds together."""
    from rlscope.calibrate.stats import median_interval95

    rows, pooled = [], []
    records = [json.loads((JAX_SCOPES / name).read_text()) for name in COST_RECORDS]
    for data in records:
        w, r, prof = data["workload"], data["scopes_over_prof"], data["iteration_s"]["prof"]
        interval = r["interval95"]
        pooled += r["rounds"]
        rows.append([f"{data['gpu']}, {data['host']['date']}, tree {data.get('tree', data['host']['commit'])}",
                     f"`{data['xla_flags']}`" if data["xla_flags"] else "none",
                     f"{w['iterations']} ({w['envs']} x {w['steps']} steps)", data["rounds_done"],
                     f"{data['iteration_s_median']['prof'] * 1e3:.2f} [{min(prof) * 1e3:.2f}, {max(prof) * 1e3:.2f}]",
                     f"{data['iteration_s_median']['scopes'] * 1e3:.2f}",
                     f"{r['median']:.3f}x", f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "n/a",
                     f"[{r['min']:.3f}, {r['max']:.3f}]", sum(x <= 1.05 for x in r["rounds"])])
    interval = median_interval95(pooled)
    return (markdown_table(["run", "XLA flags of both modes", "iterations per process", "rounds",
                            "prof ms/iteration, median [range over processes]", "--jax-scopes ms/iteration",
                            "--jax-scopes over prof, median", "its 95% interval", "range", "rounds <= 1.05x"], rows)
            + f"\n\nEvery round of the {len(records)} records together (machines and XLA flags as in their rows): "
              f"median "
              f"{statistics.median(pooled):.3f}x, 95% interval [{interval[0]:.3f}, {interval[1]:.3f}], "
              f"{sum(x <= 1.05 for x in pooled)} of {len(pooled)} rounds at or below 1.05x.\n")


def jax_scopes_precise_graphs_on() -> str:
    """``jax_scopes/precise_graphs_on_h200.json``: one precise-mode trace made with XLA's command
    buffers left on (``bench/jax_precise_graphs_on.py``), joined by XLA's ranges and by name: per
    scope, the share of the step's kernel time each join gives it."""
    data = json.loads((JAX_SCOPES / "precise_graphs_on_h200.json").read_text())
    one = data["attribution"]["one_trace"]
    rows = [[scope, f"{r['precise']:.1%}", f"{r['default']:.1%}"]
            for scope, r in sorted(one["shares"].items(), key=lambda kv: -kv[1]["default"])]
    return (f"JAX {data['recorded'][1]['jax']}, {data['host']['date']}; {data['note']}.\n\n"
            + markdown_table(["scope", "by XLA's ranges", "by name"], rows)
            + f"\n\nOn this trace, XLA's ranges give {one['kernels_same_scope']:.1%} of its {one['kernels']:,} kernels "
              f"({one['time_same_scope']:.1%} of their time) the scope the name join gives them.\n")


def jax_scopes_executables() -> str:
    """``jax_scopes/executables_*.json`` (``bench/jax_scopes_executables.py``): per run, whether the
    step compiled with the default mode's dump options has the same optimised HLO as without, what
    the dump wrote, the monitoring events while the executables ran, and the dumped executable's
    time over the plain one's in alternating pairs of blocks, median [95% interval] and range."""
    rows = []
    for path in sorted(JAX_SCOPES.glob("executables_*.json")):
        data = json.loads(path.read_text())
        w, r = data["workload"], data["dumped_over_plain"]
        low, high = r["interval95"] or (math.nan, math.nan)
        machine = data["gpu"] if data["gpu"] != "none" else f"{data['host']['cores']}-core CPU"
        rows.append([f"{machine}, JAX {data['jax']} ({data['backend']}), {data['host']['date']}, "
                     f"tree {data.get('tree', data['host']['commit'])}",
                     f"{w['envs']} x {w['steps']} steps", f"{w['pairs']} x {w['block']}",
                     "yes" if data["optimised_hlo_identical"] else "no", data["dump_files"],
                     data["monitoring_events_while_timed"],
                     f"{statistics.median(data['iteration_ms']['plain']):.2f}",
                     f"{r['median']:.4f}x", f"[{low:.4f}, {high:.4f}]", f"[{r['min']:.3f}, {r['max']:.3f}]"])
    return markdown_table(["run", "workload", "pairs x iterations per block", "optimised HLO identical",
                           "files the dump wrote", "monitoring events while timed", "plain ms/iteration (median)",
                           "dumped over plain, median", "its 95% interval", "range"], rows) + "\n"


TABLES: dict[str, Callable[[], str]] = {"jax_scopes_executables": jax_scopes_executables,
                                        "jax_scopes_shares": jax_scopes_shares, "jax_scopes_cost": jax_scopes_cost,
                                        "jax_scopes_ant": jax_scopes_ant,
                                        "jax_scopes_cost_rounds": jax_scopes_cost_rounds,
                                        "jax_scopes_precise_graphs_on": jax_scopes_precise_graphs_on}
