"""Profiling overhead on three GPU RL loops: uninstrumented vs rlscope (everything on) vs the
framework's own profiler, alternating inside each process, several processes (rounds).

    python bench/gpu_overhead.py compare [--loops tiny sb3_ppo_cuda jax_loop] [--rounds 5] \\
        [--modes rlscope profiler] [--cores 2,3] [--out gpu_overhead.csv] [--tree COMMIT] [--work DIR]
    python bench/gpu_overhead.py run LOOP MODE STEPS OUT_DIR      one process, one JSON line
    python bench/gpu_overhead.py summary CSV [CSV ...]             the summary of compare's CSVs

Loops:

- ``tiny``: NumPy CartPole + a batch-1 MLP on the GPU, backprop every 32 steps
  (``bench/gpu_collector.py``'s RL-like loop of tiny kernels);
- ``sb3_ppo_cuda``: Stable-Baselines3 PPO with its networks on the GPU
  (``experiments/overhead/loops.py``);
- ``jax_loop``: a jitted JAX MLP policy stepping a NumPy CartPole (the same module).

Why alternate inside a process: on the lent (virtualised) GPU machines, identical uninstrumented
processes differ by up to 40% in wall time (tiny loop, 2.7-3.9 s for the same 10,000 steps), far
more than the overhead to be measured. So each process runs its loop in segments of
``--segment-ms`` in the order unprofiled, profiled, profiled, unprofiled, ... (``SessionSegments``,
as the overhead validation does): a profiled segment runs inside its own session of MODE, an
unprofiled one with no session at all. Each group of four gives the profiled time per iteration
over the unprofiled one; the palindrome cancels drift within the group. A session's start and
stop (attaching CUPTI, flushing, writing; torch.profiler's post-processing) are left out: the
ratio is what profiling does to the loop while it is profiled. The first group is dropped (it
holds the loop's own warm-up: JAX compiles its policy there).

Modes (``--modes``, default rlscope profiler): ``rlscope`` (``rlscope.profile()`` with everything on:
annotations, transitions, CUDA API calls through CUPTI callbacks and GPU activity), ``profiler``
(torch.profiler with CPU and CUDA activities for the PyTorch loops, ``jax.profiler.trace`` for
JAX); to see where the cost is: ``rlscope-activity`` (API calls as activity records, the way
callbacks replaced), ``annotations``, ``transitions`` (annotations and transitions), ``api``
(annotations and CUDA API calls), ``kernels`` (annotations and GPU activity); and CUPTI's own floor,
a bare client with no rlscope in the loop at all (``rlscope._cupti.Floor``, csrc/cupti/floor.hpp):
``floor`` enables the GPU layer's activity kinds and frees every buffer unread, ``floor-api`` also
enables the runtime and driver API callbacks that ``rlscope`` uses, doing nothing in them.
``sampled-between`` (a sampled session no window of which opens: layers off, steps counted,
CUPTI attached), what a sampled session within its trace budget costs between its rare windows,
in-process where whole sampled processes against unprofiled ones are lost in the machine's noise
(``docs/results/sampled.md``). A window's own cost is ``rlscope``'s (everything on) for the share
of iterations windows hold; a session of a segment's length would not draw windows as a long run does.
``sampled-between-no-gpu`` is the same session without the GPU layer: never attached to CUPTI,
and without the NVML utilisation sampler's thread; what ``sampled-between`` costs beyond it is
what the GPU layer costs between windows (CUPTI attached with every kind off, and the sampler).
``kernels`` over ``floor`` and ``rlscope`` over ``floor-api`` are what rlscope adds to CUPTI's cost
for the same kinds: the summary gives them per round (the modes of a round run one after another,
so each pair shares the machine's state of the moment) as median [range] over rounds.

Per round (process) the ratio is the median over its groups; the summary gives, per loop and
mode, the median and range of those over rounds, the uninstrumented time per iteration, what a
session's start and stop take (ms, and the stop per iteration the session saw), and how much
less time rlscope adds than the framework's profiler ((profiler - off) / (rlscope - off), medians
of the added time per iteration), while profiling and with each session's stop added. An rlscope
mode's row also says how many events of each kind one session recorded per ``rlscope.step()``
(``events_per_step``): what the time bought.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

LOOPS = ("tiny", "sb3_ppo_cuda", "jax_loop")
# rlscope's modes: rlscope.profile() options and how CUDA API calls are recorded
# ($RLSCOPE_CUPTI_API; "rlscope" is the default, everything on).
RLSCOPE_MODES: dict[str, tuple[dict[str, Any], str]] = {
    "rlscope": ({}, "callbacks"),
    "rlscope-activity": ({}, "activity"),
    "annotations": ({"transitions": False, "gpu": False}, "callbacks"),
    "transitions": ({"gpu": False}, "callbacks"),
    "api": ({"transitions": False, "gpu": "runtime,driver"}, "callbacks"),
    "kernels": ({"transitions": False, "gpu": "kernels"}, "callbacks"),
    # A sampled session whose warm-up outlasts the segment: what sampling costs between windows.
    "sampled-between": ({"sample": {"warmup": 2**62}}, "callbacks"),
    # The same with no GPU layer (no CUPTI, no NVML sampler): what of it is the GPU layer's.
    "sampled-between-no-gpu": ({"sample": {"warmup": 2**62}, "gpu": False}, "callbacks"),
}
# CUPTI's floor: a bare client's kinds (api: with the API callbacks) -> the rlscope mode it bounds.
FLOOR_MODES: dict[str, tuple[bool, str]] = {"floor": (False, "kernels"), "floor-api": (True, "rlscope")}
MODES = (*RLSCOPE_MODES, *FLOOR_MODES, "profiler")
DEFAULT_MODES = ("rlscope", "profiler")
# Steps per loop (about 9 s uninstrumented on an H100; SB3 about 20 s) and the length of a
# segment (several ticks each: the tiny loop ticks every step, JAX every 8 (the overhead loops'
# TICK_EVERY), SB3 once per 64-step rollout). --steps and --segment-ms override.
DEFAULT_STEPS = {"tiny": 30_000, "sb3_ppo_cuda": 200_000, "jax_loop": 120_000}
SEGMENT_MS = {"tiny": 250.0, "sb3_ppo_cuda": 500.0, "jax_loop": 250.0}


def _loop(name: str, steps: int, segments: Any = None) -> None:
    if name == "tiny":
        from gpu_collector import rl_loop

        rl_loop(steps, segments)
    else:  # annotated with rlscope's calls, which are no-ops when nothing profiles
        from experiments.overhead.loops import run

        run(name, steps, segments)


def session_opener(name: str, mode: str) -> Callable[[Path], AbstractContextManager[Any]]:
    """How a profiled segment of loop ``name`` is profiled in ``mode``: a function of the segment's
    trace directory that returns the session (a context manager)."""
    import rlscope

    if mode in RLSCOPE_MODES:
        from rlscope.collect.gpu_layers import ENV_API

        options, source = RLSCOPE_MODES[mode]
        os.environ[ENV_API] = source
        return lambda trace: rlscope.profile(trace, process=name, **options)
    if mode in FLOOR_MODES:
        return lambda trace: floor_session(api=FLOOR_MODES[mode][0])
    if name == "jax_loop":
        import jax

        return lambda trace: jax.profiler.trace(str(trace))
    from torch.profiler import ProfilerActivity, profile

    return lambda trace: profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])


@contextmanager
def floor_session(api: bool) -> Iterator[None]:
    """A session of the bare CUPTI client: the GPU layer's activity kinds, buffers freed unread,
    with ``api`` the runtime and driver callbacks that rlscope enables (less the same query
    calls), empty. Stopping it flushes, frees and detaches CUPTI, as an rlscope session's stop does."""
    from rlscope import _cupti
    from rlscope.collect.gpu_layers import QUERY_APIS
    from rlscope.nvidia import libcupti_candidates

    _cupti.load(libcupti_candidates())
    floor = _cupti.Floor()
    started = floor.start(api=api, untraced_apis=list(QUERY_APIS))
    if not started["ok"]:
        raise SystemExit(f"CUPTI floor: {started['step']} failed: {started['error']}")
    try:
        yield
    finally:
        stats = floor.stop()
        if stats["dropped"]:
            print(f"CUPTI floor: {stats['dropped']} records dropped", file=sys.stderr)


def groups_of(segments: list[list[Any]]) -> list[tuple[float, float]]:
    """(unprofiled, profiled) time per iteration, in µs, of each complete group of four
    segments ``[profiled, start_ns, end_ns, iterations, trace]`` in the order U P P U: the mean
    of its two unprofiled and of its two profiled segments. The first group is left out (the
    loop's own warm-up); so is a group with a segment of no iterations."""
    from experiments.overhead.sessions import SessionSegments

    pattern = list(SessionSegments.PATTERN)
    groups = []
    for first in range(len(pattern), len(segments) - len(pattern) + 1, len(pattern)):
        group = segments[first:first + len(pattern)]
        if [bool(s[0]) for s in group] != pattern or any(s[3] <= 0 for s in group):
            continue
        per_iteration = [((s[2] - s[1]) / s[3] / 1e3, bool(s[0])) for s in group]
        off = statistics.mean(t for t, profiled in per_iteration if not profiled)
        on = statistics.mean(t for t, profiled in per_iteration if profiled)
        groups.append((off, on))
    return groups


def run_one(name: str, mode: str, steps: int, out: Path, segment_ms: float | None = None) -> dict[str, Any]:
    """Warm up, then run ``steps`` of loop ``name`` in alternating segments, the profiled ones
    in sessions of ``mode``."""
    from experiments.overhead.loops import TICK_EVERY
    from experiments.overhead.sessions import SessionSegments

    if name not in LOOPS or mode not in MODES:
        raise SystemExit(f"loop {name!r} / mode {mode!r}: use one of {LOOPS} and one of {MODES}")
    _loop(name, max(1, steps // 10))
    directory = out / f"{name}_{mode}_{time.time_ns()}"
    segment_ms = segment_ms or SEGMENT_MS[name]
    with SessionSegments(directory, segment_ms, every=TICK_EVERY.get(name, 1),
                         open_session=session_opener(name, mode)) as segments:
        _loop(name, steps, segments)
    row: dict[str, Any] = {"loop": name, "mode": mode, "steps": steps, "segment_ms": segment_ms,
                           "groups": groups_of(segments.segments), "sessions": segments.sessions}
    traces = [s[4] for s in segments.segments if s[4]]
    if mode in RLSCOPE_MODES and traces:  # what the time bought, read after the runs
        row["events_per_step"] = events_per_step(directory / traces[-1])
    return row


def events_per_step(trace: Path) -> str:
    """How many events of each kind an rlscope trace holds per ``rlscope.step()``
    ("cuda_api=21.04 ..."): where a mode's overhead can come from (every CUDA API call, kernel
    and native call recorded costs something)."""
    from rlscope.analyze.attribution import read_attributed
    from rlscope.trace.schema import Kind

    counts: dict[str, int] = {}
    for process in read_attributed(trace):
        for kind, n in process.events["kind"].value_counts().items():
            name = Kind(int(kind)).name.lower()
            counts[name] = counts.get(name, 0) + int(n)
    steps = max(1, counts.get("step", 0))
    return " ".join(f"{kind}={n / steps:.2f}" for kind, n in sorted(counts.items()))


def session_costs(sessions: list[list[int]]) -> dict[str, float]:
    """A process's profiled sessions ``[open_ns, close_ns, iterations]``: the median time to
    start one (ms), to stop one (ms) and to stop one per iteration it saw (µs): work a profiled
    run pays outside the profiled stretch (attaching CUPTI; flushing and writing, torch.profiler's
    post-processing of its events)."""
    if not sessions:
        return {}
    seen = [s for s in sessions if s[2] > 0]
    return {"start_ms": statistics.median(s[0] for s in sessions) / 1e6,
            "stop_ms": statistics.median(s[1] for s in sessions) / 1e6,
            "stop_us_per_iteration": statistics.median(s[1] / s[2] for s in seen) / 1e3 if seen else float("nan")}


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows are groups (loop, mode, round, off_us, on_us, and the round's session costs). Per
    round: the median over its groups of on/off and of on - off. Per loop and mode: the median
    and range over rounds of the ratio, the median uninstrumented time per iteration and
    session costs; per loop, the profiler's added time per iteration over rlscope's while
    profiling, and with each session's stop per iteration added (medians over rounds); with
    6 rounds or more, the median ratio's distribution-free 95% interval (``median_interval95``:
    the spread between processes on the lent machines is neither normal nor symmetric)."""
    from rlscope.calibrate.stats import median_interval95

    per_round: dict[tuple[str, str, int], list[tuple[float, float]]] = {}
    costs: dict[tuple[str, str, int], dict[str, float]] = {}
    for row in rows:
        key = (row["loop"], row["mode"], row["round"])
        per_round.setdefault(key, []).append((row["off_us"], row["on_us"]))
        costs[key] = {k: row[k] for k in ("start_ms", "stop_ms", "stop_us_per_iteration") if k in row}
    summary = []
    for name in dict.fromkeys(row["loop"] for row in rows):
        entry: dict[str, Any] = {"loop": name}
        added: dict[str, float] = {}
        offs = []
        for mode in MODES:
            rounds = [groups for (loop, m, _), groups in per_round.items() if loop == name and m == mode]
            if not rounds:
                continue
            ratios = [statistics.median(on / off for off, on in groups) for groups in rounds]
            entry[mode] = statistics.median(ratios)
            entry[f"{mode}_range"] = (min(ratios), max(ratios))
            entry[f"{mode}_rounds"] = len(rounds)
            if (interval := median_interval95(ratios)) is not None:
                entry[f"{mode}_interval"] = interval
            added[mode] = statistics.median(statistics.median(on - off for off, on in groups) for groups in rounds)
            offs += [statistics.median(off for off, _ in groups) for groups in rounds]
            for cost in ("start_ms", "stop_ms", "stop_us_per_iteration"):
                values = [c[cost] for (loop, m, _), c in costs.items() if loop == name and m == mode and cost in c]
                if values:
                    entry[f"{mode}_{cost}"] = statistics.median(values)
        entry["off_us"] = statistics.median(offs)
        for floor, (_, mode) in FLOOR_MODES.items():
            paired = [statistics.median(on / off for off, on in per_round[(name, mode, r)]) /
                      statistics.median(on / off for off, on in per_round[(name, floor, r)])
                      for (loop, m, r) in per_round if loop == name and m == mode and (name, floor, r) in per_round]
            if paired:
                entry[f"{mode}_over_{floor}"] = statistics.median(paired)
                entry[f"{mode}_over_{floor}_range"] = (min(paired), max(paired))
                entry[f"{mode}_over_{floor}_rounds"] = len(paired)
        if added.get("rlscope", 0) > 0 and "profiler" in added:
            entry["profiler_added_over_rlscope"] = added["profiler"] / added["rlscope"]
            ours, theirs = (entry.get(f"{m}_stop_us_per_iteration") for m in ("rlscope", "profiler"))
            if ours is not None and theirs is not None:
                with_stop = (added["profiler"] + theirs) / (added["rlscope"] + ours)
                entry["profiler_added_over_rlscope_with_stop"] = with_stop
        summary.append(entry)
    return summary


def compare(args: argparse.Namespace) -> None:
    import pandas as pd

    from run_record import provenance

    from rlscope.files import write_json_atomic

    args.work.mkdir(parents=True, exist_ok=True)
    if args.out is not None:  # beside the CSV, which holds the times only
        write_json_atomic(args.out.with_suffix(".json"), provenance("gpu_overhead.py", sys.argv[1:], args.tree))
    pin = ["taskset", "-c", args.cores] if args.cores and shutil.which("taskset") else []
    rows: list[dict[str, Any]] = []
    modes = tuple(args.modes)
    total, done_runs = args.rounds * len(args.loops) * len(modes), 0
    try:  # an interrupt (Ctrl-C, a deadline) keeps the finished runs: CSV and summary of those
        for round_ in range(args.rounds):
            for name in args.loops:
                shift = round_ % len(modes)
                for mode in modes[shift:] + modes[:shift]:
                    command = [*pin, sys.executable, __file__, "run", name, mode,
                               str(args.steps or DEFAULT_STEPS[name]), str(args.work)]
                    if args.segment_ms:
                        command += ["--segment-ms", str(args.segment_ms)]
                    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
                    done_runs += 1
                    if done.returncode != 0:
                        tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
                        print(f"round {round_} {name} {mode}: exit {done.returncode}: {tail[0]}", flush=True)
                        continue
                    run = json.loads(done.stdout.strip().splitlines()[-1])
                    costs = session_costs(run["sessions"])
                    rows += [{"loop": name, "mode": mode, "round": round_, "group": i, "off_us": off, "on_us": on,
                              **costs} for i, (off, on) in enumerate(run["groups"])]
                    ratios = [on / off for off, on in run["groups"]]
                    middle = f"{statistics.median(ratios):.3f}x over {len(ratios)} groups" if ratios else "no groups"
                    print(f"[{done_runs}/{total}] round {round_} {name:13s} {mode:11s} {middle} "
                          f"{run.get('events_per_step', '')}", flush=True)
    except KeyboardInterrupt:
        print(f"stopped after {done_runs} of {total} runs; the summary is of those", flush=True)
    if args.out is not None:
        pd.DataFrame(rows).to_csv(args.out, index=False)
    print_summary(rows)


def print_summary(rows: list[dict[str, Any]]) -> None:
    """One line per loop: each mode's ratio, range and interval, session costs, added time."""
    for entry in summarize(rows):
        parts = [f"{entry['loop']:13s} (off {entry['off_us']:.0f} us/iteration)"]
        for mode in MODES:
            if mode in entry:
                low, high = entry[f"{mode}_range"]
                rounds = f"{entry[f'{mode}_rounds']} rounds"
                if f"{mode}_interval" in entry:
                    rounds += ", median's 95% interval [{:.3f}, {:.3f}]".format(*entry[f"{mode}_interval"])
                parts.append(f"{mode} {entry[mode]:.3f}x [{low:.3f}, {high:.3f}] ({rounds})")
                if f"{mode}_stop_ms" in entry:
                    parts.append(f"{mode} session start {entry[f'{mode}_start_ms']:.1f} ms, stop "
                                 f"{entry[f'{mode}_stop_ms']:.1f} ms ({entry[f'{mode}_stop_us_per_iteration']:.1f} "
                                 f"us/iteration)")
        for floor, (_, mode) in FLOOR_MODES.items():
            if f"{mode}_over_{floor}" in entry:
                low, high = entry[f"{mode}_over_{floor}_range"]
                parts.append(f"{mode} over {floor} {entry[f'{mode}_over_{floor}']:.3f}x [{low:.3f}, {high:.3f}] "
                             f"({entry[f'{mode}_over_{floor}_rounds']} rounds)")
        if "profiler_added_over_rlscope" in entry:
            parts.append(f"profiler adds {entry['profiler_added_over_rlscope']:.1f}x rlscope's time while profiling")
        if "profiler_added_over_rlscope_with_stop" in entry:
            parts.append(f"{entry['profiler_added_over_rlscope_with_stop']:.1f}x with each session's stop")
        print("; ".join(parts), flush=True)


def summary(paths: list[Path]) -> None:
    """The summary of CSVs that ``compare --out`` wrote, together: each file's rounds count as
    rounds of their own, so the rounds of several runs of ``compare`` (several commands on one
    machine, each under a time limit) add up."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for path in paths:
        if not path.is_file():
            raise SystemExit(f"{path}: no such file; give CSVs written by 'compare --out'")
        frame = pd.read_csv(path)
        missing = {"loop", "mode", "round", "off_us", "on_us"} - set(frame.columns)
        if missing:
            raise SystemExit(f"{path}: not a 'compare --out' CSV (no {', '.join(sorted(missing))} column)")
        offset = 1 + max((row["round"] for row in rows), default=-1)
        rows += [row | {"round": row["round"] + offset} for row in frame.to_dict("records")]
    print_summary(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("run", help="one loop, alternating unprofiled and MODE segments, in this process")
    one.add_argument("loop", choices=LOOPS)
    one.add_argument("mode", choices=MODES)
    one.add_argument("steps", type=int)
    one.add_argument("out", type=Path)
    one.add_argument("--segment-ms", type=float, default=None, help="segment length (default: per loop)")
    many = commands.add_parser("compare", help="every loop and mode in interleaved rounds, then the ratios")
    many.add_argument("--loops", nargs="+", choices=LOOPS, default=list(LOOPS))
    many.add_argument("--modes", nargs="+", choices=MODES, default=list(DEFAULT_MODES))
    many.add_argument("--rounds", type=int, default=5, help="processes per loop and mode")
    many.add_argument("--steps", type=int, default=None, help="steps for every loop (default: per loop)")
    many.add_argument("--segment-ms", type=float, default=None, help="segment length (default: per loop)")
    many.add_argument("--cores", default="2,3", help="taskset core list for every process ('' to not pin)")
    many.add_argument("--timeout", type=float, default=600.0, help="seconds one process may take")
    many.add_argument("--out", type=Path, default=None,
                      help="CSV of every group's times per iteration (and OUT.json: where and how it ran)")
    many.add_argument("--tree", default=None, help="the commit that ran, where the machine's git metadata lags")
    many.add_argument("--work", type=Path, default=Path("/tmp/rlscope_gpu_overhead"), help="traces go here")
    again = commands.add_parser("summary", help="the summary of CSVs written by compare --out, together")
    again.add_argument("csv", nargs="+", type=Path)
    args = parser.parse_args()
    if args.command == "summary":
        summary(args.csv)
        return
    if args.command == "run":
        if args.segment_ms is not None and args.segment_ms <= 0:
            parser.error(f"--segment-ms {args.segment_ms:g}: must be positive, e.g. 250")
        args.out.mkdir(parents=True, exist_ok=True)
        print(json.dumps(run_one(args.loop, args.mode, args.steps, args.out, args.segment_ms)), flush=True)
    else:
        compare(args)


if __name__ == "__main__":
    main()
