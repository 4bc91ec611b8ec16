"""The tables of docs/results/*.md, generated from the results beside them.

A page marks each generated block with ``<!-- table: NAME -->`` and ``<!-- /table -->``: a table, or
findings prose that quotes measured numbers (``findings_*.py``). NAME is a function of ``TABLES``
that reads the data and returns the block's Markdown (caption lines included).
``python bench/results_tables.py`` rewrites every marked block; ``--check`` exits 1 if a page is
not what its data gives (tests/test_results_pages.py runs it). So a number in a generated block
is never typed, and a new run of an experiment updates its page by running this.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

import findings_casestudies
import findings_datacollection
import tables_gpu
import tables_jax_scopes
import tables_jitted
import tables_overhead
import tables_profiler
import tables_sampled
from fused_inference import UNFUSED
from tables_common import (DATACOLLECTION, FRAMEWORK_LABELS, H100, LAYER_GROUPS, OPERATION_GROUPS, RESULTS,
                           env_steps_per_iteration, group_shares, in_order, markdown_table, max_spread, ok_results,
                           read_jsonl, short_sci)

_BLOCK = re.compile(r"(<!-- table: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


# -- RL-Scope case studies ------------------------------------------------------------------

def _survey(name: str, key: str, label: Callable[[str], str]) -> str:
    """Per algorithm or simulator: training time, speed and the shares (%) of training per
    operation and layer, mean over repetitions; "max spread" is the largest difference between
    repetitions of any of those shares (points).

    Where a run was corrected for profiling's overhead (its rows have ``corrected_seconds``), a
    second row beneath it gives the corrected time and shares, each share with the bounds of the
    correction's 95% interval (``share_intervals``: the group at its low end against the rest at
    their high ends, and the other way round), mean over repetitions; the raw row stays as it is.
    A note under the table says which runs are not corrected and repeats the analysis's caveat on
    corrected rows (OVERCORRECTED: the calibration's costs exceed what was measured)."""
    from rlscope.analyze.caveats import OVERCORRECTED

    data = ok_results(name)
    rows = data[data["table"] == "breakdown"]
    corrected_any = False
    rows_out, notes = [], []
    for value in in_order(rows[key]):
        mine = rows[rows[key] == value]
        first = mine.groupby("repetition").first()
        raw = pd.DataFrame([group_shares(rep, "seconds") for _, rep in mine.groupby("repetition")])
        cells = [f"{raw[c].mean():.1f}" for c in raw.columns]
        rows_out.append([label(value), "as profiled", f"{first['training_s'].mean():.1f}",
                         f"{first['steps_per_s'].mean():.0f}", *cells, f"{max_spread(raw):.1f}"])
        if not _is_corrected(mine):
            continue
        corrected_any = True
        per_rep = [group_shares(rep, c) for _, rep in mine.groupby("repetition")
                   for c in ("corrected_seconds", "corrected_low_seconds", "corrected_high_seconds")]
        point, low, high = (pd.DataFrame(per_rep[i::3]) for i in range(3))
        seconds = first["corrected_training_s"]
        rows_out.append([label(value), "corrected [low–high]", f"{seconds.mean():.1f}",
                         f"{(first['timesteps'] / seconds).mean():.0f}",
                         *(f"{point[c].mean():.1f} [{low[c].mean():.1f}–{high[c].mean():.1f}]" for c in point.columns),
                         f"{max_spread(point):.1f}"])
        caveats = mine.get("caveat", pd.Series(dtype=object)).dropna().astype(str)
        where = mine.loc[caveats.index[caveats.str.contains(OVERCORRECTED, regex=False)]]
        if not where.empty:
            places = ", ".join(in_order(f"{OPERATION_GROUPS.get(o, o)} {lay}" for o, lay in zip(where["operation"],
                                                                                           where["layer"])))
            notes.append(f"{label(value)} ({places}): {OVERCORRECTED}")
    head = [key if key != "env" else "environment", "shares", "training (s)", "env steps/s", *OPERATION_GROUPS.values(),
            *LAYER_GROUPS, "max spread"]
    if not corrected_any:  # no run was corrected: the table as it always was
        return markdown_table([h for h in head if h != "shares"], [r[:1] + r[2:] for r in rows_out])
    plain = [label(v) for v in in_order(rows[key]) if not _is_corrected(rows[rows[key] == v])]
    note = f"\nAs profiled only (no calibration on the machine that ran them): {', '.join(plain)}." if plain else ""
    return markdown_table(head, rows_out) + note + "".join(f"\n\n{n}" for n in notes) + ("\n" if note or notes else "")


def _is_corrected(rows: pd.DataFrame) -> bool:
    """Whether every breakdown row of these runs has corrected seconds (they had a calibration)."""
    return "corrected_seconds" in rows and bool(rows["corrected_seconds"].notna().all())


def _survey_transitions(name: str, key: str, label: Callable[[str], str]) -> str:
    """Transitions per environment step (all operations), mean over repetitions."""
    data = ok_results(name)
    rows = data[data["table"] == "transitions"]
    kinds = ["Python->Backend", "Backend->CUDA", "GPU kernels", "Python->Simulator"]
    out = []
    for value in in_order(rows[key]):
        mine = rows[rows[key] == value]
        per_step = (mine["per_iteration"] / env_steps_per_iteration(mine)).groupby(
            [mine["repetition"], mine["transition"]]).sum()
        mean = per_step.groupby(level="transition").mean()
        out.append([label(value), *(f"{mean.get(kind, 0.0):.1f}" for kind in kinds)])
    return markdown_table([key if key != "env" else "environment", *kinds], out)


def algorithm_choice() -> str:
    return _survey("algorithm_choice", "algorithm", str.upper)


def algorithm_choice_transitions() -> str:
    return _survey_transitions("algorithm_choice", "algorithm", str.upper)


def simulator_choice() -> str:
    return _survey("simulator_choice", "env", str)


def simulator_choice_transitions() -> str:
    return _survey_transitions("simulator_choice", "env", str)


def framework_speed() -> str:
    """``bench/framework_speed.py``'s rounds: median [min, max] seconds per framework, and the
    speed-up over eager SB3 as the ratio of medians [range of the per-round ratios]."""
    data = pd.read_csv(RESULTS / "casestudies" / "framework_speed_h100.csv")
    out = []
    for algorithm in in_order(data["algorithm"]):
        mine = data[data["algorithm"] == algorithm].pivot(index="round", columns="framework", values="learn_s")
        cells = [f"{mine[f].median():.2f} [{mine[f].min():.2f}, {mine[f].max():.2f}]" for f in FRAMEWORK_LABELS]
        for other in ("sb3_compile", "sbx"):
            ratio = mine["sb3"] / mine[other]
            cell = f"{mine['sb3'].median() / mine[other].median():.2f}x [{ratio.min():.2f}, {ratio.max():.2f}]"
            cells.append(f"**{cell.split(' ')[0]}** {cell.split(' ', 1)[1]}" if other == "sbx" else cell)
        out.append([algorithm.upper(), *cells])
    return markdown_table(["algorithm", "SB3 eager", "SB3 + torch.compile", "SBX (JAX jit)", "compile vs eager",
                   "SBX vs eager"], out)


def framework_breakdown() -> str:
    """Per algorithm and framework, per iteration (one environment step): the whole time, the
    backpropagation's time (all layers, then Python / Backend / CUDA API / GPU busy), and its
    transitions."""
    data = ok_results("RL_framework_comparison")
    breakdown, transitions = data[data["table"] == "breakdown"], data[data["table"] == "transitions"]
    out = []
    for algorithm in in_order(data["algorithm"]):
        for framework, name in FRAMEWORK_LABELS.items():
            rows = breakdown[(breakdown["algorithm"] == algorithm) & (breakdown["framework"] == framework)]
            if rows.empty:
                continue
            iterations = rows["iterations"].iloc[0]
            ms = rows["seconds"].sum() / iterations * 1e3
            back = rows[rows["operation"] == "backpropagation"]
            layer_ms = [back.loc[back["layer"].isin(layers), "seconds"].sum() / iterations * 1e3
                        for layers in (["Python"], ["Backend"], ["CUDA API"], ["CPU + GPU", "GPU"])]
            moves = transitions[(transitions["algorithm"] == algorithm) & (transitions["framework"] == framework)]
            count = _counter(moves)
            out.append([f"{algorithm.upper()} / {name}", f"{ms:.2f}",
                        f"{back['seconds'].sum() / iterations * 1e3:.2f} ({' / '.join(f'{v:.2f}' for v in layer_ms)})",
                        count("backpropagation", "Python->Backend"), count("backpropagation", "Backend->CUDA"),
                        count("backpropagation", "GPU kernels"), count("inference", "Python->Backend")])
    return markdown_table(["algorithm / framework", "ms per iteration",
                   "backpropagation ms (Python / Backend / CUDA API / GPU)",
                   "backprop Python->Backend", "backprop Backend->CUDA", "backprop kernels",
                   "inference Python->Backend"], out)


def _counter(moves: pd.DataFrame) -> Callable[[str, str], str]:
    """Transitions of one kind in one operation, per iteration, from a run's transitions rows."""
    def count(operation: str, kind: str) -> str:
        picked = moves[(moves["operation"] == operation) & (moves["transition"] == kind)]
        return f"{picked['per_iteration'].sum():.0f}"
    return count


def scale_up() -> str:
    """Per number of actors: nvidia-smi's utilisation, GPM's SM utilisation and the true
    GPU-bound share (union of all processes' kernels and copies), and throughput."""
    data = ok_results("scale_up")
    gpu = data[data["table"] == "gpu"]
    out = []
    for workers in in_order(gpu["workers"]):
        mine = gpu[gpu["workers"] == workers].set_index("measure")["percent"]
        smi, bound = mine["nvidia-smi utilization.gpu"], mine["GPU-bound (kernels+copies)"]
        first = gpu[gpu["workers"] == workers].iloc[0]
        out.append([f"{workers:d}", f"{smi:.1f}%", f"{mine['SM utilisation (GPM)']:.1f}%", f"{bound:.1f}%",
                    f"{smi / bound:.1f}x", f"{first['worker_steps_per_s']:,.0f}",
                    f"{first['learner_updates_per_s']:.0f}"])
    return markdown_table(["M actors", "nvidia-smi utilization.gpu", "GPM SM utilisation",
                   "true GPU-bound (union of all processes' kernels and copies)", "nvidia-smi / true",
                   "actors' steps/s (all)", "learner updates/s"], out)


# -- Optimizing Data Collection in Deep RL ----------------------------------------------------

_COMPARE_LABELS = {
    "cuda fused (fast math)": "CUDA fused, hardware sin/cos/rcp (`precise=False`)",
    "cuda fused (precise)": "CUDA fused, precise (default; polynomial sin/cos, IEEE division)",
    "cuda unfused K=1 (precise)": "CUDA unfused, K = 1 launches",
    "jax lax.scan": "JAX `lax.scan` of K steps, one jitted call",
    "torch CUDA graph": "PyTorch, K steps captured in a CUDA graph",
    "torch eager": "PyTorch eager",
    "gymnasium CartPoleVectorEnv": "gymnasium `CartPoleVectorEnv` (NumPy)",
    "gymnasium single": "gymnasium, one env",
}
FUSED_TARGET = 5e11  # env-steps/s the fused kernel is asked for at N = 2^22, K = 1000


def _n(value: float) -> str:
    """A number of environments: 2^k where it is a power of two above 1."""
    exponent = np.log2(value)
    return f"2^{int(exponent)}" if value > 1 and float(exponent).is_integer() else f"{value:g}"


def fused_compare() -> str:
    """``bench/datacollection.py compare``: median env-steps/s per implementation, the fused
    kernel's over each, and whether the fused kernel meets its target."""
    rows = [r for r in read_jsonl(DATACOLLECTION / "compare_h100.jsonl") if "backend" in r]
    out = []
    for row in sorted(rows, key=lambda r: -r["steps_per_s"]):
        rate = short_sci(row['steps_per_s'])
        if row["backend"].startswith("cuda fused"):
            met = row["steps_per_s"] >= FUSED_TARGET
            rate = f"**{rate}** (target ≥ {short_sci(FUSED_TARGET)}: **met**)" if met else f"{rate} (target: missed)"
        label = _COMPARE_LABELS.get(row["backend"], row["backend"])
        out.append([f"{label}, N = {_n(row['num_envs'])}", rate, short_sci(row['fused_over_this'])])
    return markdown_table(["implementation", "env-steps/s", "fused (precise) over this"], out)


def fused_roofline() -> str:
    """Nsight Compute's counts per env-step against the FP32 and issue rooflines."""
    labels = {"fused": "fused, precise", "fused-fast": "fused, hardware math", "unfused": "unfused (K = 1)"}
    out = []
    for row in read_jsonl(DATACOLLECTION / "roofline_h100.jsonl"):
        fused = row["kernel"] != "unfused"
        out.append([labels.get(row["kernel"], row["kernel"]), short_sci(row['fp32_inst_per_step']),
                    short_sci(row['thread_inst_per_step']), short_sci(row['warp_inst_per_step_x32']),
                    short_sci(row['fp32_roofline_steps_per_s']) if fused else "—",
                    short_sci(row['issue_roofline_steps_per_s']) if fused else "—",
                    short_sci(row['measured_steps_per_s']),
                    f"{row['fraction_of_fp32_roofline']:.0%}" if fused else "—",
                    f"**{row['fraction_of_issue_roofline']:.0%}**" if fused else "—"])
    return markdown_table(["kernel", "FP32 inst / step", "thread inst / step", "issued lane-slots / step",
                           "FP32 roofline", "issue roofline", "measured", "of FP32 roof", "of issue roof"], out)


_FUSED_CONFIGS = {"fused fp16": "fused fp16", "fused fp16 + trajectory": "fused fp16 + trajectory (T = 128)",
                  "fused fp32": "fused fp32", "jax scan": "JAX `lax.scan`", "torch graph": "PyTorch CUDA graph",
                  "cuda sim + torch policy": "CUDA sim + PyTorch policy"}


def fused_inference() -> str:
    """``bench/fused_inference.py``: median samples/s over rounds per N and configuration, and the
    fp16 kernel's (with and without a trajectory) over the best unfused way at that N."""
    data = pd.read_csv(DATACOLLECTION / "fused_inference_bench_h100.csv")
    median = data.groupby(["num_envs", "config"])["samples_per_s"].median().unstack()
    out = []
    for n, row in median.iterrows():
        best = row[list(UNFUSED)].max()
        fp16 = row["fused fp16"] / best
        out.append([_n(n), *(short_sci(row[c]) for c in _FUSED_CONFIGS),
                    f"**{fp16:.3g}x**" if n >= 2 ** 16 else f"{fp16:.3g}x",
                    f"{row['fused fp16 + trajectory'] / best:.3g}x"])
    return markdown_table(["N", *_FUSED_CONFIGS.values(), "fp16 / best unfused", "trajectory / best unfused"], out)


_FIGURES = [("Fig. 4", "throughput_vs_envs", "gpu_vectorization"),
            ("Fig. 5", "breakdown_vs_fused_steps", "xla_breakdown"),
            ("Fig. 6", "transitions_vs_fused_steps", "transitions"),
            ("Fig. 8", "fusion_throughput", "kernel_fusion"),
            ("Fig. 9", "fusion_speedup_grid", "simulator_complexity"),
            ("Fig. 2", "simulator_comparison", "simulator_comparison")]


def figure_runs() -> str:
    """Per figure, the runs behind it: how many finished, how the others ended, the seconds the
    runs took, and the sessions (day and machine) they come from (``h100/README.md``)."""
    out = []
    for figure, name, experiment in _FIGURES:
        data = pd.read_csv(H100 / experiment / "results.csv")
        runs = data.drop_duplicates(["run_id", "repetition"]) if "repetition" in data else data
        ok = runs[runs["status"] == "ok"]
        others = runs.loc[runs["status"] != "ok", "status"].value_counts()
        ended = ", ".join(f"{n} {status}" for status, n in others.items())
        seconds = f"{runs['run_seconds'].sum():,.0f}" if "run_seconds" in runs else "—"
        sessions = "; ".join(in_order(data["session"])) if "session" in data else "one (`h100/README.md`)"
        out.append([figure, f"`{name}`", f"[`{experiment}`](h100/{experiment}/results.csv)",
                    f"{len(ok)} of {len(runs)}" + (f" ({ended})" if ended else ""), seconds, sessions])
    return markdown_table(["figure", "figure file", "results", "runs x repetitions finished", "seconds of runs",
                   "sessions"], out)


def brax_throughput() -> str:
    """Fig. 2: env-steps/s of CartPole and the brax environments on MJX (K = 10), median of
    repetitions, per N, and CartPole over ant; from one session (the one that ran all three
    environments at most N), since rates of two machines are not compared."""
    data = ok_results("simulator_comparison")
    mjx = data[(data["environment"] == "cartpole") | (data["brax_backend"] == "mjx")]
    if "session" in mjx:
        complete = mjx.groupby(["session", "num_envs"])["environment"].nunique().eq(3).groupby(level="session").sum()
        mjx = mjx[mjx["session"] == complete.idxmax()]
    median = mjx.groupby(["num_envs", "environment"])["steps_per_s"].median().unstack()
    out = [[f"{n:,}", *(short_sci(row[e]) for e in ("cartpole", "ant", "humanoid")),
            f"{row['cartpole'] / row['ant']:,.0f}"] for n, row in median.iterrows()]
    table = markdown_table(["N", "cartpole", "ant", "humanoid", "cartpole / ant"], out)
    compiled = int(data["timed_compilations"].max()) if "timed_compilations" in data else None
    caption = (f"Env-steps/s, K = 10, median of {mjx['repetition'].nunique()} repetitions; compilations inside "
               f"a timed window: at most {compiled} in any run of Fig. 2.\n\n" if compiled is not None else
               f"Env-steps/s, K = 10, median of {mjx['repetition'].nunique()} repetitions.\n\n")
    return caption + table + (f"\n(session: {mjx['session'].iloc[0]})\n" if "session" in mjx else "")


TABLES: dict[str, Callable[[], str]] = {
    "algorithm_choice": algorithm_choice, "algorithm_choice_transitions": algorithm_choice_transitions,
    "simulator_choice": simulator_choice, "simulator_choice_transitions": simulator_choice_transitions,
    "framework_speed": framework_speed, "framework_breakdown": framework_breakdown, "scale_up": scale_up,
    "fused_compare": fused_compare, "fused_roofline": fused_roofline, "fused_inference": fused_inference,
    "figure_runs": figure_runs, "brax_throughput": brax_throughput,
    **findings_casestudies.TABLES,
    **findings_datacollection.TABLES,
    **tables_gpu.TABLES,
    **tables_sampled.TABLES,
    **tables_jax_scopes.TABLES,
    **tables_jitted.TABLES,
    **tables_overhead.TABLES,
    **tables_profiler.TABLES,
}


def render(page: Path) -> str:
    """``page`` with each marked table generated again."""
    text = page.read_text()

    def fill(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in TABLES:
            raise SystemExit(f"{page}: unknown table {name!r}; known: {', '.join(TABLES)}")
        return match.group(1) + TABLES[name]() + match.group(4)

    return _BLOCK.sub(fill, text)


def pages() -> list[Path]:
    """The results pages that hold a generated table."""
    return [p for p in sorted(RESULTS.glob("*.md")) if _BLOCK.search(p.read_text())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is not what its data gives")
    args = parser.parse_args(argv)
    stale = []
    for page in pages():
        text = render(page)
        if text != page.read_text():
            stale.append(page)
            if not args.check:
                page.write_text(text)
    for page in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {page}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
