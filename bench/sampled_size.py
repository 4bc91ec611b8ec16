"""What a sampled session costs a loop, writes and holds, and whether its shares match full tracing.

    python bench/sampled_size.py [--workload gym_numpy] [--steps 100000] [--rounds 3] \\
        [--sample window=20,block=1000,warmup=50] [--watch-s 1] [--out size.json]
    python bench/sampled_size.py long --workload W --steps N [--sample ...] \
        [--reference-steps M --reference-rounds K] --out long.json

One process per mode and round (``off``: unprofiled; ``full``: every layer the whole run;
``sampled``: ``rlscope.profile(sample=...)``; with ``--modes``, also ``between`` and
``between-noflush``, what sampling costs between its windows: ``BETWEEN_MODES``), modes rotated
each round. Workloads: the overhead
loops (``experiments/overhead/loops.py``: gym_numpy, sb3_ppo_cuda, jax_loop, ...) and ``tiny``
(``bench/gpu_collector.py``'s batch-1 GPU loop); GPU layers where a GPU is visible.

Per process: the loop's wall time, the trace's bytes, peak resident memory, and a timeline
sampled every ``--watch-s`` seconds by a thread of the process (resident memory, the GPU's used
memory through NVML, the trace's bytes so far; also appended to ``TRACE.timeline.jsonl`` beside
the trace as it goes, so a run stopped by a time limit keeps it), from which the summary takes
each one's growth per hour over the run's second half (a fit): what a run of hours would add.
The watcher runs in the measured process (a few file reads a sample): its cost is in every
mode's time alike, and the final sample, taken after the session's end, holds the last flush.
``full`` and ``sampled`` also give CUPTI's dropped records (``meta.json``). The record names the
host, commit and GPU.

``long``: one sampled process of minutes to hours, no other mode beside it: whether memory and
the trace's rate stay flat (``long_record``), and its shares' estimates over all its windows;
with ``--reference-rounds K``, then K fully traced processes of ``--reference-steps`` on the same
machine, one after another, against whose shares those estimates are held
(``reference_agreement``): a budgeted run holds too few windows in seconds to test the estimates,
and a full trace of minutes is gigabytes.

Shares: with ``--subsample SEEDS``, the first full trace is also sampled afterwards once per seed
(``sampled_validation.check``): the estimator and its intervals against the very run they sample.
After each round, the full trace's share of the iteration time per operation and
resources over the iterations after the warm-up (``sampled_validation.full_shares``) and the
sampled run's estimate with its 95% interval (``rlscope.analyze.sampled``, one phase). The summary
gives, per share of at least 5% in the full traces, how many rounds' estimates are within
max(0.5 points, 5% relative) of the same round's full trace and how many intervals cover it: the
two runs differ by their own noise too, so this is stricter than sampling one trace afterwards.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
MODES = ("off", "full", "sampled")
# What sampling costs between windows, apart: a sampled session whose warm-up outlasts the run, so
# no window ever opens (layers off, steps counted, CUPTI attached), and the same with no
# time-bound writes (RLSCOPE_FLUSH_INTERVAL_S=inf: the flusher thread never wakes to write them).
BETWEEN_MODES = ("between", "between-noflush")
_NEVER_WARM = 2**62
MIN_SHARE = 0.05


def _loop(workload: str, steps: int) -> None:
    if workload == "tiny":
        from gpu_collector import rl_loop

        rl_loop(steps)
    else:
        from experiments.overhead.loops import run

        run(workload, steps)


class Watcher(threading.Thread):
    """Every ``every`` seconds: [seconds since start, resident MB, the loop's GPU's used MB (all
    its processes'; NaN without NVML), trace MB]."""

    def __init__(self, trace: Path, every: float) -> None:
        super().__init__(daemon=True)
        self.trace, self.every, self.samples = trace, every, []
        self._done = threading.Event()
        self._began = time.perf_counter()
        self._page_mb = resource.getpagesize() / 1e6
        from rlscope.collect.nvml import visible_nvml_indices
        from rlscope.nvidia import open_nvml

        try:  # the first GPU the loop sees (CUDA_VISIBLE_DEVICES), not NVML's first: another run may use that
            pynvml = open_nvml()
            handle = pynvml.nvmlDeviceGetHandleByIndex(visible_nvml_indices(pynvml)[0])
            self._gpu = lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used / 1e6
        except Exception:  # NvmlUnavailable, or NVML's own error without a GPU: the column stays NaN
            self._gpu = lambda: float("nan")

    def sample(self) -> None:
        with open("/proc/self/statm") as statm:
            rss = int(statm.read().split()[1]) * self._page_mb
        size = sum(p.stat().st_size for p in self.trace.rglob("*") if p.is_file()) if self.trace.exists() else 0
        self.samples.append([time.perf_counter() - self._began, rss, self._gpu(), size / 1e6])
        with self.trace.with_name(self.trace.name + ".timeline.jsonl").open("a") as kept:  # outlives a killed run
            kept.write(json.dumps(self.samples[-1]) + "\n")

    def run(self) -> None:
        while not self._done.wait(self.every):
            self.sample()

    def finish(self) -> list[list[float]]:
        self._done.set()
        self.join()
        self.sample()
        return self.samples


def one(workload: str, steps: int, mode: str, sample: str, trace: Path, watch_s: float) -> dict[str, Any]:
    """Run the loop once in this process; print one JSON line."""
    import rlscope
    from rlscope.collect.sampling import parse_sample

    watcher = Watcher(trace, watch_s)
    watcher.start()
    options = {}  # every sampled mode's spec made before the clock starts, the same way
    if mode == "sampled":
        options = {"sample": parse_sample(sample)}
    elif mode in BETWEEN_MODES:
        options = {"sample": dataclasses.replace(parse_sample(sample), warmup=_NEVER_WARM)}
    began = time.perf_counter()
    if mode == "off":
        _loop(workload, steps)
    else:
        with rlscope.profile(trace, process=workload, **options):
            _loop(workload, steps)
    wall = time.perf_counter() - began
    timeline = watcher.finish()
    size = sum(p.stat().st_size for p in trace.rglob("*") if p.is_file()) if trace.exists() else 0
    gpu_meta = [json.loads(m.read_text()).get("gpu", {}) for m in trace.rglob("meta.json")]
    dropped = sum(meta.get("dropped", 0) for meta in gpu_meta)
    buffers = sorted({meta["buffer_bytes"] for meta in gpu_meta if "buffer_bytes" in meta})
    return {"mode": mode, "wall_s": wall, "trace_bytes": size, "dropped_records": dropped,
            "cupti_buffer_bytes": buffers, "max_rss_mb": peak_rss_mb(), "timeline": timeline}


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB (the record's ``max_rss_mb``; the timeline's
    columns are MB of 10^6 bytes): VmHWM, the high-water mark of its own address space.
    Not getrusage's ru_maxrss, which Linux carries across exec: a run started by the bench after it
    analysed a full trace reported the bench's peak as its own."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def growth_per_hour(timeline: list[list[float]], column: int) -> float:
    """The slope of ``column`` over the second half of the run, per hour (NaN with < 3 samples)."""
    points = np.array(timeline, dtype=np.float64)
    half = points[points[:, 0] >= points[-1, 0] / 2] if len(points) else points
    if len(half) < 3 or np.isnan(half[:, column]).any():
        return float("nan")
    return float(np.polyfit(half[:, 0], half[:, column], 1)[0] * 3600)


def shares(trace: Path, mode: str, warmup: int) -> dict[str, Any]:
    """The main process's iterations and its shares: ``full`` -> {key: share}; ``sampled`` ->
    {key: [share, low, high]}; keys ``operation / resources``."""
    from sampled_validation import full_shares

    from rlscope.analyze.attribution import read_attributed
    from rlscope.analyze.sampled import analyze_sampled, is_sampled, sampled_calls, step_calls

    def calls(process: Any) -> int:
        return int(sampled_calls(process)[0][-1]) if is_sampled(process) else len(step_calls(process))

    process = max(read_attributed(trace), key=calls)
    iterations = calls(process)
    if mode == "full":
        full = full_shares(process, warmup)
        return {"iterations": iterations, "shares": {f"{o} / {r}": s for (o, r), s in full.items()}}
    table = analyze_sampled(process, find_phases=False)[2]
    return {"iterations": iterations, "windows": int(table["windows"].max()) if len(table) else 0,
            "shares": {f"{row.operation} / {row.resources}": [float(row.share), float(row.share_low),
                                                              float(row.share_high)] for row in table.itertuples()}}


def time_in_windows(starts: np.ndarray, ends: np.ndarray, windows: np.ndarray) -> tuple[int, float]:
    """Of the intervals ``[starts, ends)``, how many overlap one of ``windows`` (rows of [begin,
    end), disjoint) and for how many nanoseconds in all."""
    count, inside_ns = 0, 0.0
    for begin, end in windows:
        inside = np.clip(np.minimum(ends, end) - np.maximum(starts, begin), 0, None)
        count += int((inside > 0).sum())
        inside_ns += float(inside.sum())
    return count, inside_ns


def cupti_overhead(trace: Path) -> dict[str, dict[str, float]]:
    """CUPTI's own overhead records (``Kind.PROFILER_OVERHEAD``) of the trace's processes, by name:
    how many, their median and total time; how many on the process's main thread (CUPTI gives the
    low 32 bits of the thread's id); and of a sampled process, how many fell in its windows'
    measured parts, and their time there. A buffer request is one: where a window's first records
    wait for one, that wait is in the window's operations."""
    from rlscope.analyze.attribution import read_attributed
    from rlscope.analyze.sampled import is_sampled, sampled_windows
    from rlscope.trace.schema import Kind

    out: dict[str, dict[str, float]] = {}
    for process in read_attributed(trace):  # with the GPU rows, where CUPTI's records are
        ev = process.events
        records = ev[ev["kind"] == int(Kind.PROFILER_OVERHEAD)]
        windows = np.array([[b, e] for _, b, e, _ in sampled_windows(process)], dtype=np.int64).reshape(-1, 2) \
            if is_sampled(process) else np.empty((0, 2), dtype=np.int64)
        main = int(process.meta["main_tid"]) & 0xFFFFFFFF
        for name, group in records.groupby("name", observed=True):
            starts, ends = group["start_ns"].to_numpy(), group["end_ns"].to_numpy()
            row = out.setdefault(str(name), {"count": 0, "total_ms": 0.0, "main_thread": 0, "in_windows": 0,
                                             "in_windows_ms": 0.0, "_all": []})
            row["count"] += len(starts)
            row["total_ms"] += float((ends - starts).sum()) / 1e6
            row["main_thread"] += int(((group["tid"].to_numpy().astype(np.int64) & 0xFFFFFFFF) == main).sum())
            count, inside_ns = time_in_windows(starts, ends, windows)
            row["in_windows"] += count
            row["in_windows_ms"] += inside_ns / 1e6
            row["_all"].extend(((ends - starts) / 1e3).tolist())
    for row in out.values():
        row["median_us"] = float(statistics.median(row.pop("_all")))
    return out


def finite_median(values: Iterable[float]) -> float:
    """The median of the values that are numbers (NaN if none): ``statistics.median`` with a NaN
    among them gives an answer that depends on their order."""
    finite = [v for v in values if not math.isnan(v)]
    return statistics.median(finite) if finite else float("nan")


def share_agreement(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per share of at least MIN_SHARE in the full traces: per round, the sampled estimate against
    that round's full trace (the profiler's own time left out of both: ``without_profiler``)."""
    runs = [r | {"shares": without_profiler(r["shares"])} if "shares" in r else r for r in runs]
    by_round = {(r["round"], r["mode"]): r for r in runs}
    keys = sorted({k for r in runs if r["mode"] == "full" for k, v in r["shares"].items() if v >= MIN_SHARE})
    rows = []
    for key in keys:
        # a share no window of the sampled run saw is estimated as 0, with no interval
        pairs = [(by_round[(n, "full")]["shares"].get(key, 0.0),
                  by_round[(n, "sampled")]["shares"].get(key, [0.0, 0.0, 0.0]))
                 for n in sorted({r["round"] for r in runs}) if (n, "sampled") in by_round and (n, "full") in by_round]
        if not pairs:  # no sampled run beside the full ones
            rows.append({"share": key, "rounds": 0})
            continue
        within = [within_tolerance(est[0], full) for full, est in pairs]
        covered = [bool(est[1] <= full <= est[2]) for full, est in pairs]
        half_widths = [(e[2] - e[1]) / 2 for _, e in pairs]  # NaN where a run's windows gave no interval
        rows.append({"share": key, "rounds": len(pairs), "full": statistics.median(f for f, _ in pairs),
                     "sampled": statistics.median(e[0] for _, e in pairs),
                     "half_width": finite_median(half_widths),
                     "rounds_with_interval": sum(not math.isnan(w) for w in half_widths),
                     "within_tolerance": sum(within), "covered": sum(covered)})
    return rows


def compare(workload: str, steps: int, rounds: int, sample: str, watch_s: float, subsample: int,
            modes: tuple[str, ...] = MODES, out: Path | None = None, tree: str | None = None) -> dict[str, Any]:
    """Run the rounds (``off`` always among the modes: it is every ratio's base); after each one,
    the record so far replaces ``out`` whole, so a run stopped by a time limit keeps the rounds it
    finished. ``tree``: the commit of the code that ran, where the machine's git metadata may lag
    (a lent machine is sent a working tree); else this checkout's."""
    from run_record import gpu, host
    from sampled_validation import check

    from rlscope.collect.flusher import ENV_FLUSH_INTERVAL
    from rlscope.collect.sampling import parse_sample
    from rlscope.files import write_json_atomic

    modes = tuple(dict.fromkeys(["off", *modes]))
    spec = parse_sample(sample)
    warmup = spec.warmup
    runs: list[dict[str, Any]] = []
    subsampled = None
    machine = {"host": host(), "gpu": gpu()}  # asked once, not between the timed runs
    setting = {"tree": tree or machine["host"]["commit"], "budget_mb_per_hour": spec.budget or None}
    record: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as work:
        for round_ in range(rounds):
            shift = round_ % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                trace = Path(work) / f"{mode}{round_}"
                command = [sys.executable, __file__, "one", workload, str(steps), mode, sample, str(trace),
                           str(watch_s)]
                env = os.environ | ({ENV_FLUSH_INTERVAL: "inf"} if mode == "between-noflush" else {})
                done = subprocess.run(command, capture_output=True, text=True, env=env)
                if done.returncode:
                    raise SystemExit(f"{workload} {mode} round {round_} failed:\n{done.stderr[-3000:]}")
                run = json.loads(done.stdout.strip().splitlines()[-1]) | {"round": round_}
                if mode in ("full", "sampled"):
                    run |= shares(trace, mode, warmup)
                if mode == "full" and subsampled is None and subsample:
                    fields = {name: getattr(spec, name) for name in ("window", "block", "warmup", "settle")}
                    subsampled = check(trace, subsample, fields)
                runs.append(run)
                print(f"round {round_} {mode:8s} {run['wall_s']:.2f} s {run['trace_bytes'] / 1e6:.1f} MB "
                      f"rss {run['max_rss_mb']:.0f} MiB", flush=True)
            record = summarise(runs, modes) | machine | setting | {
                "workload": workload, "steps": steps, "rounds": round_ + 1,
                "sample": sample, "min_share": MIN_SHARE, "runs": runs, "subsampled": subsampled}
            if out is not None:
                write_json_atomic(out, record)
    return record


def summarise(runs: list[dict[str, Any]], modes: tuple[str, ...]) -> dict[str, Any]:
    """Per mode over the rounds run: medians of time over the unprofiled run of its round, trace
    size, memory and growth; and the shares' agreement."""
    counted = [r["iterations"] for r in runs if "iterations" in r]  # full and sampled runs count them
    iterations = statistics.median(counted) if counted else float("nan")
    summary = {}
    for mode in modes:
        mine = [r for r in runs if r["mode"] == mode]
        ratios = [r["wall_s"] / next(o["wall_s"] for o in runs if o["mode"] == "off" and o["round"] == r["round"])
                  for r in mine]
        wall = statistics.median(r["wall_s"] for r in mine)
        size = statistics.median(r["trace_bytes"] for r in mine)
        summary[mode] = {"wall_s": wall, "over_off": statistics.median(ratios), "over_off_each": ratios,
                         "over_off_range": [min(ratios), max(ratios)], "trace_bytes": size,
                         "bytes_per_iteration": size / iterations, "mb_per_hour": size / wall * 3600 / 1e6,
                         "max_rss_mb": statistics.median(r["max_rss_mb"] for r in mine),
                         "rss_mb_per_hour": finite_median(growth_per_hour(r["timeline"], 1) for r in mine),
                         "gpu_mb_per_hour": finite_median(growth_per_hour(r["timeline"], 2) for r in mine),
                         "trace_mb_per_hour_late": finite_median(growth_per_hour(r["timeline"], 3) for r in mine),
                         "dropped_records": max(r["dropped_records"] for r in mine)}
    return {"iterations": iterations, "summary": summary, "shares": share_agreement(runs)}


def long_record(run: dict[str, Any], trace: Path, workload: str, steps: int, sample: str,
                machine: dict[str, Any]) -> dict[str, Any]:
    """One long sampled run (``one``'s output and its trace): what it wrote and held per hour.
    Trace rate over the whole run and, fitted, over its second half (the start-up left out);
    resident and GPU memory once settled and at the session's end, the resident range between
    them, and their growth fitted over the second half;
    the windows it drew and the gaps it let go of CUPTI for (``samples.json``), CUPTI's dropped
    records and the activity buffers' size its processes asked for (``RLSCOPE_CUPTI_BUFFER_KIB``
    can change it)."""
    samples = [json.loads(path.read_text()) for path in trace.rglob("samples.json")]
    stepped = [s for s in samples if s["calls"]]
    if not stepped:
        raise SystemExit(f"{trace}: no process of the run stepped in a sampled session (no samples.json with calls)")
    main_process = max(stepped, key=lambda s: s["calls"][-1][0])
    timeline = run["timeline"]
    # Memory is read inside the session: the last sample comes after its end, which frees CUPTI's
    # buffers. "Settled": the first sample past a tenth of the run, start-up's allocations made.
    inside = timeline[:-1]
    settled = next((point for point in inside if point[0] >= timeline[-1][0] / 10), None)
    if settled is None:
        raise SystemExit(f"{trace}: the run ended before its memory was sampled inside the session; run it for "
                         f"longer than a few --watch-s")
    rss_settled = [point[1] for point in inside if point[0] >= settled[0]]
    return machine | {
        "workload": workload, "steps": steps, "sample": sample, "wall_s": run["wall_s"],
        "iterations": main_process["calls"][-1][0], "windows": len(main_process["windows"]),
        "detached_gaps": main_process.get("detached_gaps", 0),
        "largest_block": max(main_process["blocks"], default=0), "trace_bytes": run["trace_bytes"],
        "trace_mb_per_hour": run["trace_bytes"] / 1e6 / run["wall_s"] * 3600,
        "trace_mb_per_hour_late": growth_per_hour(timeline, 3),
        "rss_mb_settled_last": [settled[1], inside[-1][1]], "rss_mb_per_hour": growth_per_hour(inside, 1),
        "rss_mb_range_settled": [min(rss_settled), max(rss_settled)],
        "gpu_mb_settled_last": [settled[2], inside[-1][2]], "gpu_mb_per_hour": growth_per_hour(inside, 2),
        "max_rss_mb": run["max_rss_mb"], "dropped_records": run["dropped_records"],
        "cupti_buffer_bytes": run.get("cupti_buffer_bytes", []), "timeline": timeline}


def without_profiler(shares: dict[str, Any]) -> dict[str, Any]:
    """Shares (``operation / resources`` -> a share, or [share, low, high]) with the profiler's own
    time left out of the iteration: its rows dropped, the rest divided by what is left. A full
    trace writes its chunks on the training thread (``Kind.PROFILER_WRITE``, resources
    ``Profiler``), a share of the iteration the same loop sampled, whose windows rarely fill a
    chunk, does not have; the loop's own shares are compared without it. A profiler share that is
    no number (a window-less estimate) counts as none."""
    def share_of(value: Any) -> float:
        return value[0] if isinstance(value, list) else value

    def is_profiler(key: str) -> bool:
        return "Profiler" in key.rpartition(" / ")[2]

    profiler = sum(share for k, v in shares.items() if is_profiler(k) and math.isfinite(share := share_of(v)))
    if profiler >= 1:
        raise ValueError(f"the profiler's own time is {profiler:.0%} of the iteration: no loop time is left to share")
    scale = 1.0 / (1.0 - profiler)
    return {k: ([x * scale for x in v] if isinstance(v, list) else v * scale)
            for k, v in shares.items() if not is_profiler(k)}


def within_tolerance(estimate: float, full: float) -> bool:
    """Issue 53's tolerance: within max(0.5 points, 5% relative) of the full trace's share."""
    return bool(abs(estimate - full) <= max(0.005, 0.05 * full))


def reference_agreement(estimates: dict[str, list[float]], references: list[dict[str, float]]) -> list[dict[str, Any]]:
    """Per share of at least MIN_SHARE in the full traces' median (the profiler's own time left
    out of both sides: ``without_profiler``): that median and the full traces' range, the long
    run's estimate and interval, whether it is within the tolerance of the median and whether
    the interval covers it; and how many full traces are within the tolerance of their median."""
    estimates = without_profiler(estimates)
    references = [without_profiler(ref) for ref in references]
    keys = sorted({k for ref in references for k in ref})
    rows = []
    for key in keys:
        values = [float(ref.get(key, 0.0)) for ref in references]
        full = float(statistics.median(values))
        if full < MIN_SHARE:
            continue
        share, low, high = (float(x) for x in estimates.get(key, [0.0, math.nan, math.nan]))
        rows.append({"share": key, "full": full, "full_range": [min(values), max(values)], "estimate": share,
                     "low": low, "high": high, "within_tolerance": within_tolerance(share, full),
                     "covered": bool(low <= full <= high),
                     "full_runs_within_tolerance": sum(within_tolerance(v, full) for v in values)})
    return rows


def long_run(workload: str, steps: int, sample: str, watch_s: float, out: Path, tree: str | None,
             args: list[str], reference_steps: int = 0, reference_rounds: int = 0) -> dict[str, Any]:
    """One sampled process for as long as ``steps`` takes (minutes to hours); its trace stays
    beside ``out`` (``out`` with ``.trace``), its timeline grows beside that as the run goes.
    Then ``reference_rounds`` fully traced processes of ``reference_steps``, one after another,
    whose shares the run's estimates are held to (``reference_agreement``; their traces are
    deleted once read). ``args``: the command line, kept in the record."""
    from run_record import provenance

    from rlscope.collect.sampling import parse_sample
    from rlscope.files import write_json_atomic

    made = provenance("sampled_size.py", args, tree)
    machine = {"host": made["host"], "gpu": made["gpu"]}
    warmup = parse_sample(sample).warmup  # left out of the full traces' shares as well
    trace = out.with_suffix(".trace")
    for path in [trace] + [out.with_suffix(f".full{n}") for n in range(reference_rounds)]:
        if path.exists():
            raise SystemExit(f"{path} exists: a long run's traces and timelines must be its own; remove it or "
                             f"choose another --out")
    command = [sys.executable, __file__, "one", workload, str(steps), "sampled", sample, str(trace), str(watch_s)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{workload} long run failed:\n{done.stderr[-3000:]}")
    record = long_record(json.loads(done.stdout.strip().splitlines()[-1]), trace, workload, steps, sample, machine)
    estimates = shares(trace, "sampled", warmup)  # over all its windows, one phase
    record |= {"tree": made["tree"], "command": made["command"], "environment": made["environment"],
               "estimates": estimates["shares"],
               "estimated_windows": estimates["windows"], "cupti_overhead": cupti_overhead(trace)}
    write_json_atomic(out, record)
    if reference_rounds:
        references, reference_overhead, reference_buffers = [], [], []
        for round_ in range(reference_rounds):
            full_trace = out.with_suffix(f".full{round_}")
            command = [sys.executable, __file__, "one", workload, str(reference_steps), "full", sample,
                       str(full_trace), str(watch_s)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{workload} full reference {round_} failed:\n{done.stderr[-3000:]}")
            references.append(shares(full_trace, "full", warmup)["shares"])
            reference_overhead.append(cupti_overhead(full_trace))
            reference_buffers.append(json.loads(done.stdout.strip().splitlines()[-1])["cupti_buffer_bytes"])
            shutil.rmtree(full_trace)  # gigabytes an hour: its shares are what is kept
            print(f"reference {round_ + 1} of {reference_rounds} done", flush=True)
        record["reference"] = {"steps": reference_steps, "rounds": reference_rounds, "shares": references,
                               "cupti_overhead": reference_overhead, "cupti_buffer_bytes": reference_buffers,
                               "agreement": reference_agreement(record["estimates"], references)}
        write_json_atomic(out, record)
    return record


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        _, _, workload, steps, mode, sample, trace, watch_s = sys.argv
        print(json.dumps(one(workload, int(steps), mode, sample, Path(trace), float(watch_s))), flush=True)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "long":
        parser = argparse.ArgumentParser(prog="sampled_size.py long", description=long_run.__doc__)
        parser.add_argument("--workload", default="gym_numpy")
        parser.add_argument("--steps", type=int, required=True)
        parser.add_argument("--sample", default="window=20,block=1000,warmup=50")
        parser.add_argument("--watch-s", type=float, default=10.0)
        parser.add_argument("--out", type=Path, required=True)
        parser.add_argument("--tree", default=None, help="the commit that ran, where the machine's git metadata lags")
        parser.add_argument("--reference-steps", type=int, default=0, help="steps of each full-trace reference")
        parser.add_argument("--reference-rounds", type=int, default=0,
                            help="full-trace processes run after the long one, whose shares the estimates are held to")
        args = parser.parse_args(sys.argv[2:])
        if args.reference_rounds < 0 or (args.reference_rounds and args.reference_steps < 1):
            parser.error("--reference-rounds K needs K >= 0, and --reference-steps of at least 1 with K > 0")
        record = long_run(args.workload, args.steps, args.sample, args.watch_s, args.out, args.tree, sys.argv[1:],
                          args.reference_steps, args.reference_rounds)
        print(f"{record['wall_s']:.0f} s, {record['windows']} windows, trace {record['trace_mb_per_hour']:.0f} MB/h "
              f"({record['trace_mb_per_hour_late']:.0f} over the second half), rss {record['rss_mb_per_hour']:+.1f} "
              f"MB/h, dropped {record['dropped_records']}", flush=True)
        for row in record.get("reference", {}).get("agreement", []):
            print(f"{row['share']:>32s} full {row['full']:.3f} sampled {row['estimate']:.3f} "
                  f"[{row['low']:.3f}, {row['high']:.3f}] within {row['within_tolerance']} covered {row['covered']}",
                  flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="gym_numpy")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sample", default="window=20,block=1000,warmup=50")
    parser.add_argument("--watch-s", type=float, default=1.0, help="seconds between memory and size samples")
    parser.add_argument("--subsample", type=int, default=0, metavar="SEEDS",
                        help="also sample the first full trace afterwards with SEEDS seeds (sampled_validation check)")
    parser.add_argument("--modes", nargs="+", choices=[*MODES, *BETWEEN_MODES], default=list(MODES),
                        help="off is always run (the ratios' base); between, between-noflush: the cost between "
                             "windows apart")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--tree", default=None, help="the commit that ran, where the machine's git metadata lags")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: at least one round")
    result = compare(args.workload, args.steps, args.rounds, args.sample, args.watch_s, args.subsample,
                     tuple(args.modes), args.out, args.tree)
    for mode, row in result["summary"].items():
        print(f"{mode:8s} {row['over_off']:.2f}x {row['bytes_per_iteration']:.1f} B/iteration "
              f"{row['mb_per_hour']:.0f} MB/h rss {row['max_rss_mb']:.0f} MiB (+{row['rss_mb_per_hour']:.0f} MB/h) "
              f"dropped {row['dropped_records']}", flush=True)
    for row in result["shares"]:
        if row["rounds"]:
            print(f"{row['share']:>32s} full {row['full']:.3f} sampled {row['sampled']:.3f} "
                  f"±{row['half_width']:.3f} within {row['within_tolerance']}/{row['rounds']} "
                  f"covered {row['covered']}/{row['rounds']}", flush=True)


if __name__ == "__main__":
    main()
