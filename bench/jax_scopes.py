"""Scopes inside jax.jit on a GPU: the default mode (kernel names joined to the dumped HLO) against
the precise mode (XLA's NVTX ranges), and what the default mode costs over ``rlscope prof``.

    python bench/jax_scopes.py [--rounds 5] [--envs 256] [--steps 128] [--iterations 20] \\
        [--out docs/results/jax_scopes/RECORD.json] [--work DIR]

The workload is ``experiments/casestudies/jitted_ppo.py`` (PPO compiled whole). Each round runs
one process per mode: none (no rlscope), prof (``rlscope prof``), scopes (``--jax-scopes``),
precise (``--jax-scopes=precise``), scopes-graphs-off (``--jax-scopes`` with XLA's command buffers
off), rotated so that each mode goes first in turn; each process
reports its own seconds per training iteration after two that compile. The record holds, per
mode, every round's time and their median, and per round the scopes-over-prof ratio (so both
sides share the round's machine state), summarised as median [min, max] over rounds.
``--modes`` times fewer modes (scopes and precise always run). ``--cost-only`` runs the modes named
and nothing else (no traces joined): more rounds of ``--jax-scopes`` against ``rlscope prof`` for
the same device time, with the median ratio's distribution-free 95% interval over the rounds
(six or more). ``--out`` is written after each
round (``rounds_done``), so a bench stopped part way keeps what it finished. ``--traces DEFAULT
PRECISE`` times nothing and writes the attribution of two traces recorded already (e.g. with
``rlscope prof --no-analyze --jax-scopes[=precise]`` on the same workload), for the join's
checks after a change to it.

Shares over rounds: every round's traces of the modes that join (scopes, precise and, where
``--modes`` names it, scopes-graphs-off: the default mode with XLA's command buffers off, as the
precise mode runs) give each scope's share of the timed iterations' kernel time; the record keeps
them per round and their means, and each default-join mode's difference from the precise mode's.
The precise mode turns CUDA graphs off, which changes kernels' durations; scopes-graphs-off tells
that part apart from the join's.

Attribution: round 0's traces are analysed (right after that round); per (scope, mode) the GPU kernel time of the timed
iterations and its share of the step (autotuning kernels left out), the fraction of kernels
attributed (to a user scope, or explicitly to "no scope", library or fused across scopes: not
unmatched or ambiguous), and per kernel name whether the default mode's scope equals the
precise mode's, and kernel by kernel over the step's timed kernels (the step launches the same
kernels in both modes, mostly in the same order): checks on the join that no timing enters. ``one_trace``:
the precise trace joined by name alone (the default mode's join) against its NVTX join, on the
same kernels with the same durations: the join's error without the two processes' timing.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.run_record import gpu, host, write  # noqa: E402
from rlscope.calibrate.stats import median_interval95  # noqa: E402
from experiments.casestudies.jitted_ppo import WARM_UP  # noqa: E402
from rlscope.analyze.attribution import attribute_gpu  # noqa: E402
from rlscope.analyze.hlo_join import AMBIGUOUS, UNMATCHED  # noqa: E402
from rlscope.analyze.jax_scopes import AUTOTUNING  # noqa: E402
from rlscope.trace.reader import read_trace  # noqa: E402
from rlscope.trace.schema import XLA_DIR, Kind  # noqa: E402

MODES = {"none": [], "prof": ["--no-analyze"], "scopes": ["--no-analyze", "--jax-scopes"],
         "precise": ["--no-analyze", "--jax-scopes=precise"],
         "scopes-graphs-off": ["--no-analyze", "--jax-scopes"]}
# The default mode with XLA's command buffers (CUDA graphs) off, as the precise mode runs: what
# separates the precise mode's shares from the default's into the join's part and the graphs'.
MODE_XLA_FLAGS = {"scopes-graphs-off": "--xla_gpu_enable_command_buffer="}
ATTRIBUTION_MODES = ("scopes", "precise")
SHARE_MODES = ("scopes", "scopes-graphs-off", "precise")  # whose shares are compared round by round
WORKLOAD = ["-m", "experiments.casestudies.jitted_ppo"]
MIN_SHARE = 0.05  # the goal compares scopes of at least this share of the step


def run(mode: str, args: argparse.Namespace, trace: Path) -> float:
    workload = [sys.executable, *WORKLOAD, "--envs", str(args.envs), "--steps", str(args.steps),
                "--iterations", str(args.iterations)]
    command = workload if mode == "none" else [sys.executable, "-m", "rlscope.cli", "prof", "--output", str(trace),
                                                *MODES[mode], "--", *workload]
    env = dict(os.environ)
    if mode in MODE_XLA_FLAGS:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {MODE_XLA_FLAGS[mode]}".strip()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{mode}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return float(json.loads(lines[-1])["iteration_s"])


def kernel_tables(trace: Path, both: bool = False) -> tuple[dict[str, Any], list[Any]]:
    """The trace's meta, and the kernels of the timed iterations with their scope and match (None:
    no kernels) joined as the trace's mode joins them; with ``both``, also joined by name alone
    (a precise-mode trace as the default mode would join it), from the one reading of the trace."""
    process = workload_process(trace, read_trace(trace))
    return process.meta, [_timed_kernels(attribute_gpu(process, nvtx)) for nvtx in ((True, False) if both else (True,))]


def workload_process(trace: Path, processes: list[Any]) -> Any:
    """The process the workload ran in: of those with XLA's dump, the one with the most events. A
    run may leave others (brax's ant leaves a ``python -c`` helper with a dump and one event)."""
    jitted = [p for p in processes if (p.directory / XLA_DIR).is_dir()]
    if not jitted:
        raise SystemExit(f"{trace}: no process has XLA's dump ({XLA_DIR}/): not a --jax-scopes trace")
    return max(jitted, key=lambda p: len(p.events))


def _timed_kernels(process: Any) -> Any:
    scopes = process.scopes
    if scopes is None or scopes.empty:
        return None
    steps = process.events[process.events["kind"] == int(Kind.STEP)].sort_values("start_ns")
    # step() ends each iteration: the timed ones begin at the WARM_UP-th
    timed_from = int(steps["start_ns"].iloc[WARM_UP - 1]) if len(steps) >= WARM_UP else 0
    starts = process.events.loc[scopes.index, "start_ns"].to_numpy()
    names = process.events.loc[scopes.index, "name"].astype(str).to_numpy()
    table = scopes.assign(kernel=names, start_ns=starts)
    return table[(table["start_ns"] >= timed_from) & (table["scope"] != AUTOTUNING)]


def _shares(default: Any, precise: Any) -> dict[str, dict[str, Any]]:
    """Per scope, its share of the kernel time in each table and the default's relative difference."""
    shares = {}
    for label, table in (("default", default), ("precise", precise)):
        total = table["duration_ns"].sum()
        shares[label] = (table.groupby("scope")["duration_ns"].sum() / total).to_dict()
    compared = {}
    for scope in sorted(set(shares["default"]) | set(shares["precise"])):
        d, p = shares["default"].get(scope, 0.0), shares["precise"].get(scope, 0.0)
        compared[scope] = {"default": d, "precise": p, "relative_difference": (d - p) / p if p else None,
                           "goal_applies": max(d, p) >= MIN_SHARE}
    return compared


def scope_shares(table: Any) -> dict[str, float]:
    """Per scope, its share of the timed iterations' kernel time."""
    return (table.groupby("scope")["duration_ns"].sum() / table["duration_ns"].sum()).to_dict()


def shares_over_rounds(by_round: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    """Per scope: each mode's share, mean over the rounds that ran it, and each default-join
    mode's relative difference from the precise mode's mean; ``goal_applies`` where either is at
    least MIN_SHARE."""
    modes = [m for m in SHARE_MODES if any(m in r for r in by_round)]
    means = {m: {} for m in modes}
    for mode in modes:
        rounds = [r[mode] for r in by_round if mode in r]
        for scope in {s for r in rounds for s in r}:
            means[mode][scope] = statistics.fmean(r.get(scope, 0.0) for r in rounds)
    summary = {}
    for scope in sorted({s for m in means.values() for s in m}):
        precise = means.get("precise", {}).get(scope, 0.0)
        row: dict[str, Any] = {m: means[m].get(scope, 0.0) for m in modes}
        for mode in modes:
            if mode != "precise":
                row[f"{mode}_relative_difference"] = (row[mode] - precise) / precise if precise else None
        row["goal_applies"] = max(row[m] for m in modes) >= MIN_SHARE
        summary[scope] = row
    return {"rounds": len(by_round), "modes": modes, "scopes": summary}


def one_trace(by_name: Any, by_nvtx: Any) -> dict[str, Any]:
    """The default mode's join against the precise mode's on the same kernels: the precise trace
    joined by name alone and by XLA's NVTX ranges. Both tables hold the same kernels with the same
    durations, so the differences are the name join's alone; between the two modes' own traces,
    each kernel's duration also differs (two processes, CUDA graphs on in one, off in the other)."""
    if by_name is None or by_nvtx is None:
        return {"kernels": 0}
    same = by_name["scope"].to_numpy() == by_nvtx.loc[by_name.index, "scope"].to_numpy()
    duration = by_name["duration_ns"].to_numpy()
    return {"shares": _shares(by_name, by_nvtx), "kernels": len(by_name), "kernels_same_scope": float(same.mean()),
            "time_same_scope": float(duration[same].sum() / duration.sum()),
            "matches_by_name": by_name["match"].value_counts().to_dict()}


def attribution(default: Any, precise: Any) -> dict[str, Any]:
    if default is None or precise is None:
        return {"kernels": 0}
    compared = _shares(default, precise)
    # Kernel by kernel: the step launches the same kernels in both modes, mostly in the same order
    # (the n-th kernel of the timed iterations is then the same launch of the same instruction in
    # each); where the order differs, the per-name comparison below still holds.
    step_d, step_p = default[default["module"] == "jit_train_step"], precise[precise["module"] == "jit_train_step"]
    n = min(len(step_d), len(step_p))
    same_kernel = step_d["kernel"].to_numpy()[:n] == step_p["kernel"].to_numpy()[:n]
    same_scope = same_kernel & (step_d["scope"].to_numpy()[:n] == step_p["scope"].to_numpy()[:n])
    first_default = default.drop_duplicates("kernel").set_index("kernel")["scope"]
    first_precise = precise.drop_duplicates("kernel").set_index("kernel")["scope"]
    both = first_default.index.intersection(first_precise.index)
    same = int((first_default[both] == first_precise[both]).sum())
    durations = {label: {scope: {"kernels": int(len(g)), "mean_ns": float(g.mean())}
                         for scope, g in table.groupby("scope")["duration_ns"]}
                 for label, table in (("default", default), ("precise", precise))}
    return {"shares": compared, "kernel_durations": durations,
            "attributed_default": float((~default["scope"].isin([UNMATCHED, AMBIGUOUS])).mean()),
            "attributed_precise": float((~precise["scope"].isin([UNMATCHED, AMBIGUOUS])).mean()),
            "matches_default": default["match"].value_counts().to_dict(),
            "matches_precise": precise["match"].value_counts().to_dict(),
            "step_kernels": [len(step_d), len(step_p)], "step_kernels_same_name": int(same_kernel.sum()),
            "step_kernels_same_scope": int(same_scope.sum()),
            "kernel_names_compared": len(both), "kernel_names_same_scope": same,
            "kernel_names_differing": {k: [first_default[k], first_precise[k]] for k in both
                                       if first_default[k] != first_precise[k]}}


def _setting() -> dict[str, Any]:
    """The command, GPU, JAX and XLA flags (every mode's, beside what a mode adds) of this bench,
    asked once before the rounds."""
    return {"command": " ".join(sys.argv), "gpu": gpu(), "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "versions": {name: importlib.metadata.version(name) for name in ("jax", "jaxlib")}}


def _record(args: argparse.Namespace, setting: dict[str, Any], times: dict[str, list[float]],
            rounds: list[dict[str, float]], attributed: dict[str, Any],
            shares_by_round: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    """The record of the rounds done so far (the ratios to ``rlscope prof`` where it ran)."""
    record = {
        **setting,
        "workload": {"envs": args.envs, "steps": args.steps, "iterations": args.iterations},
        "rounds_done": len(rounds),
        "iteration_s": times,
        "iteration_s_median": {mode: statistics.median(v) for mode, v in times.items()},
    }
    if "prof" in times:
        for mode in (m for m in ("scopes", "precise") if m in times):
            ratios = [row[mode] / row["prof"] for row in rounds]
            record[f"{mode}_over_prof"] = {"median": statistics.median(ratios), "min": min(ratios),
                                           "max": max(ratios), "interval95": median_interval95(ratios),
                                           "rounds": ratios}
    if args.cost_only:
        return record
    return {**record, "attribution": attributed, "shares_by_round": shares_by_round,
            "shares_over_rounds": shares_over_rounds(shares_by_round)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES),
                        help="modes to time each round (scopes and precise are always run: the attribution needs them)")
    parser.add_argument("--tree", default=None, help="the commit that ran, where the machine's git metadata lags")
    parser.add_argument("--cost-only", action="store_true",
                        help="time the modes named and nothing else (needs prof and scopes among them)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=None, help="keep the traces here")
    parser.add_argument("--traces", type=Path, nargs=2, metavar=("DEFAULT", "PRECISE"), default=None,
                        help="time nothing: the attribution of two traces recorded already, one per mode")
    args = parser.parse_args()
    if args.traces:
        default, precise = args.traces
        (default_meta, (by_name,)), (precise_meta, (by_nvtx, precise_by_name)) = \
            kernel_tables(default), kernel_tables(precise, both=True)
        recorded = [default_meta, precise_meta]  # where and with what the traces were made
        record = {"command": " ".join(sys.argv), "traces": [str(t) for t in args.traces],
                  "timed_from_step": WARM_UP,  # kernels before the WARM_UP-th rlscope.step() left out
                  "recorded": [{"mode": m["jax_scopes"]["mode"], "jax": m["jax_scopes"]["jax"], "machine": m["machine"],
                                "python": m["python"], "argv": m["argv"]} for m in recorded],
                  "attribution": {**attribution(by_name, by_nvtx), "one_trace": one_trace(precise_by_name, by_nvtx)}}
        print(json.dumps(record, indent=1, default=str))
        if args.out:
            write(args.out, record)
        return
    if args.cost_only and not {"prof", "scopes"} <= set(args.modes):
        parser.error("--cost-only times --jax-scopes against rlscope prof: name both in --modes")
    work = args.work or Path(tempfile.mkdtemp(prefix="jax_scopes_"))
    modes = [m for m in MODES if m in args.modes or (m in ATTRIBUTION_MODES and not args.cost_only)]
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    rounds: list[dict[str, float]] = []
    setting = _setting() | ({"tree": args.tree} if args.tree else {})
    attributed: dict[str, Any] = {}
    shares_by_round: list[dict[str, dict[str, float]]] = []
    for r in range(args.rounds):
        for mode in modes[r % len(modes):] + modes[:r % len(modes)]:  # each mode first in turn
            times[mode].append(run(mode, args, work / f"{mode}{r}"))
            print(f"round {r} {mode}: {times[mode][-1] * 1e3:.2f} ms/iteration", file=sys.stderr, flush=True)
        rounds.append({mode: times[mode][-1] for mode in modes})
        for mode in modes:  # gigabytes over many rounds; only the timing is kept
            if args.cost_only and args.work is None:
                shutil.rmtree(work / f"{mode}{r}", ignore_errors=True)
        if args.cost_only:
            record = _record(args, setting, times, rounds, attributed, shares_by_round)
            if args.out:
                write(args.out, record)
            continue
        tables = {}
        for mode in (m for m in SHARE_MODES if m in modes):
            (_, found) = kernel_tables(work / f"{mode}{r}", both=mode == "precise" and r == 0)
            tables[mode] = found
        if r == 0:  # round 0's traces, analysed before more rounds: a stopped bench keeps its attribution
            (by_name,), (by_nvtx, precise_by_name) = tables["scopes"], tables["precise"]
            attributed = {**attribution(by_name, by_nvtx), "one_trace": one_trace(precise_by_name, by_nvtx)}
        shares_by_round.append({mode: scope_shares(found[0]) for mode, found in tables.items() if found[0] is not None})
        record = _record(args, setting, times, rounds, attributed, shares_by_round)
        if args.out:  # rewritten after every round, so a bench stopped part way keeps the rounds it finished
            write(args.out, record)
    print(json.dumps({"host": host(), **record}, indent=1, default=str))


if __name__ == "__main__":
    main()
