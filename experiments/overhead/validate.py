"""Overhead-correction validation (RL-Scope paper, Fig. 11), one workload per run.

Calibrate on runs of ``calibration_steps``, then check the correction on runs of
``validation_steps`` (a different length, as RL-Scope's subtraction validation did), two ways:

- **whole runs**: ``validation_pairs`` profiled runs, each between two uninstrumented ones
  (``base, profiled, base, profiled, ..., base``); per profiled run its corrected total (the sum
  of its main threads' breakdown rows: interpreter start to exit) against the mean of the
  uninstrumented runs beside it, and the median over these pairs (every pair's error is kept
  too, ``corrected_error_pairs_pct``). Identical runs differ by 2.5-37% on the machines
  measured, so one pair says little; the noise floor (``noise_pct``: how far apart the two
  uninstrumented runs of a pair were) tells how much. The same comparison from each run's
  first ``rlscope.step()`` on (``steady_*``) leaves out the interpreter's start-up, whose time
  (imports, CUDA initialisation) varies by seconds between identical runs.
- **alternating windows**: one run that switches everything rlscope records on and off every
  ``window_ms`` (``rlscope.collect.windows``; where the GPU is traced, CUPTI records nothing in
  the unprofiled windows but stays attached). Per palindromic block, the corrected time per
  iteration of the profiled windows against that of the unprofiled windows next to them; median
  and its 95% interval over blocks. Unprofiled windows that follow a recording pay CUPTI's
  residual on each CUDA call (``rlscope.calibrate.residual``), which calibration adds to
  the CUDA API cost; their time is taken less that, for the profiled windows' calls. So this
  check cannot test the residual itself; whole runs and sessions (CUPTI detached between them) do.
- **sessions** (``session_*``): one run of ``session_steps`` that starts and stops whole
  ``rlscope.profile()`` sessions as it goes (``experiments.overhead.sessions``): segments of
  ``session_segment_ms`` profiled or not, compared per palindromic block as the windows are. Unlike
  the windows, a profiled segment carries everything a session costs while it exists (CUPTI
  attached, the NVML sampler, the collectors installed), and unlike whole runs it is compared
  with unprofiled stretches of the same process, so the host's differences between processes
  cancel.

Both corrections scale the CPU-side costs by how long the run's iterations took against the
calibration's profiled windows (``speed_factor``), as ``rlscope analyze --corrected`` does, and
remove the trace writes whole.

    error = (corrected - uninstrumented) / uninstrumented

Under ``rlscope run`` a repetition checkpoints its stages (``rlscope.stages``): the calibration,
each whole-run pair, the windows run and the sessions run. A repetition stopped part way (a
machine's time limit, a pre-empted node) resumes from the last stage it finished, with the
results of an uninterrupted one.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rlscope.calibrate.ladder import STARTUP_PAIRS
from rlscope.errors import SkipRun

__all__ = ["overhead_correction", "window_errors", "steady_errors", "whole_run_pair", "median_of_pairs",
           "pairs_within_budget", "unprofiled_slowdown", "session_errors", "reused_calibration"]


def _total_ns(breakdown: Any, column: str) -> float:
    return float(breakdown.loc[breakdown["thread"] == "main", column].sum())


def window_errors(windows: list[list[list[float]]], costs_ns: dict[str, float], speed: float = 1.0,
                  prefix: str = "window", unprofiled_ns: dict[str, float] | None = None) -> dict[str, float]:
    """Raw and corrected error of the profiled windows against the unprofiled ones, in percent:
    per block, time per iteration of each (trace writes left out: the correction removes them
    whole); the median over blocks with its 95% interval, as calibration takes its costs, and
    the mean beside it (on a shared machine a block now and then loses milliseconds to another
    process, which moves the mean by more than the correction's own error). The same for the
    segments of a ``--sessions`` run, with ``prefix="session"``.

    ``unprofiled_ns``: per event type, what the unprofiled windows pay per event of the profiled
    windows though they record nothing (CUPTI's residual on each CUDA call): their time less that
    is the uninstrumented time they stand for."""
    from rlscope.calibrate.correct import applied_costs
    from rlscope.calibrate.stats import median_ci95
    from rlscope.calibrate.window_costs import window_blocks

    costs = applied_costs(costs_ns, speed)
    raw, corrected = [], []
    for run in windows:
        for block in window_blocks(run):
            if len(block) != 2:
                continue
            (base, _), (tau, eps) = block[min(block)], block[max(block)]
            base -= sum(cost * eps.get(event, 0.0) for event, cost in (unprofiled_ns or {}).items())
            removed = sum(costs.get(event, 0.0) * per_iteration for event, per_iteration in eps.items())
            raw.append(100 * (tau - base) / base)
            corrected.append(100 * (tau - removed - base) / base)
    if len(corrected) < 6:
        raise RuntimeError(f"only {len(corrected)} blocks of alternating {prefix}s; run longer")
    error, half = median_ci95(corrected)
    return {f"{prefix}_raw_error_pct": float(np.median(raw)), f"{prefix}_corrected_error_pct": error,
            f"{prefix}_corrected_ci95_pct": half, f"{prefix}_corrected_mean_error_pct": float(np.mean(corrected)),
            f"{prefix}_blocks": len(corrected)}


def window_costs(calibration: Any) -> dict[str, float]:
    """The costs that alternating windows pay: the calibration's, less what only a continuously
    profiled process pays per CUDA API call (``Calibration.continuous_ns``)."""
    costs = dict(calibration.costs_ns)
    if calibration.continuous_ns is not None:
        costs["cuda_api"] -= calibration.continuous_ns
    return costs


def steady_errors(base: list[Any], profiled: list[Any], raw_ns: float, corrected_ns: float,
                  costs_ns: dict[str, float], speed: float, startup_ns: float = 0.0) -> dict[str, float]:
    """The whole-run check from the first rlscope.step() on: the interpreter's start-up (imports,
    CUDA initialisation) varies by seconds between identical runs and is left out. The profiled
    run's corrected time from its first step is its time from there less what the correction
    removed from there on (all it removed, less what it removed from the start-up: the main
    thread's events and trace writes there, and ``startup_ns``, the calibration's start-up
    cost as applied). ``base``: the uninstrumented runs' traces; empty when a run has no step."""
    from rlscope.calibrate.correct import applied_costs, span_removed
    from rlscope.calibrate.spans import first_step_ns, profiled_startup
    from rlscope.trace.schema import Kind

    if len(profiled) != 1 or len(base) != 2:
        return {}
    process = profiled[0]
    firsts = [first_step_ns(p) for p in base]
    startup = profiled_startup(process)
    if None in firsts or startup is None:
        return {}
    bases = [float(b.meta["end_ns"] - f) for b, f in zip(base, firsts)]
    before = span_removed(startup, applied_costs(costs_ns, speed)) + startup_ns
    steady_raw = float(process.meta["end_ns"] - process.meta["start_ns"] - startup["raw_ns"])
    steady_corrected = steady_raw - (raw_ns - corrected_ns - before)
    uninstrumented = sum(bases) / 2
    events = process.events
    iterations = int(((events["kind"] == int(Kind.STEP)) & (events["tid"] == process.meta["main_tid"])).sum())
    return {"steady_uninstrumented_s": uninstrumented / 1e9,
            "steady_iterations": iterations,
            "steady_raw_error_pct": 100 * (steady_raw - uninstrumented) / uninstrumented,
            "steady_corrected_error_pct": 100 * (steady_corrected - uninstrumented) / uninstrumented,
            "steady_noise_pct": 100 * abs(bases[0] - bases[1]) / uninstrumented}


def unprofiled_slowdown(runs: list[list[list[float]]], steady: dict[str, float],
                        name: str = "windows") -> dict[str, float]:
    """How much slower, per iteration, the unprofiled stretches of an alternating run (``name``:
    its windows, or the segments between sessions) ran than the uninstrumented runs from their
    first step (same command, so the same iterations): what profiling costs even while it
    records nothing (CUPTI attached, or detached after recording; collectors idle), which the
    in-process checks take as their baseline and so cannot see. Runs differ by their noise."""
    if not steady.get("steady_iterations"):
        return {}
    lowest_rows = []
    for run in runs:
        lowest = min((w[0] for w in run), default=0)
        lowest_rows += [w[:3] for w in run if w[0] == lowest]
    rows = np.array(lowest_rows, dtype=np.float64)
    if not len(rows) or rows[:, 2].sum() == 0:
        return {}
    off = rows[:, 1].sum() / rows[:, 2].sum()
    base = steady["steady_uninstrumented_s"] * 1e9 / steady["steady_iterations"]
    return {f"unprofiled_{name}_vs_uninstrumented_pct": 100 * (off - base) / base}


def session_errors(directory: Path, calibration: Any, steady: dict[str, float] | None = None) -> dict[str, float]:
    """The sessions check of a ``--sessions`` run in ``directory``: its segments' raw and
    corrected error as ``window_errors`` gives them, with the CPU-side costs scaled by how fast
    its profiled segments ran against the calibration (``speed_factor``); with the whole runs'
    ``steady`` columns, also how much slower its unprofiled segments ran than those
    (``unprofiled_slowdown``)."""
    from experiments.overhead.sessions import read_segments
    from rlscope.calibrate.speed import speed_factor
    from rlscope.calibrate.window_costs import window_iteration

    rows = read_segments(directory)
    speed = speed_factor(calibration, window_iteration([rows]))
    return {**window_errors([rows], calibration.costs_ns, speed or 1.0, prefix="session"),
            "session_speed_vs_calibration": speed if speed is not None else float("nan"),
            **unprofiled_slowdown([rows], steady or {}, "sessions")}


def whole_run_pair(base: list[Any], base_again: list[Any], profiled: list[Any], tables: dict[str, Any],
                   calibration: Any) -> dict[str, float]:
    """The whole-run check of one profiled run against the uninstrumented runs made just before
    and after it (``base``, ``base_again``: their traces; ``tables``: the profiled run's
    analysis corrected with ``calibration``), from the start and from the first step
    (``steady_errors``)."""
    from rlscope.calibrate.correct import applied_startup_ns

    breakdown = tables["breakdown"]
    raw, corrected = _total_ns(breakdown, "time_ns"), _total_ns(breakdown, "corrected_ns")
    speed = float(breakdown["speed_vs_calibration"].iloc[0]) if len(breakdown) else float("nan")
    speed = 1.0 if np.isnan(speed) else speed
    steady = steady_errors([*base, *base_again], profiled, raw, corrected, calibration.costs_ns, speed,
                           applied_startup_ns(calibration, speed)[0])
    base_ns, base_again_ns = (sum(p.meta["end_ns"] - p.meta["start_ns"] for p in r) for r in (base, base_again))
    mean = (base_ns + base_again_ns) / 2
    return {"uninstrumented_s": mean / 1e9, "raw_s": raw / 1e9, "corrected_s": corrected / 1e9,
            "raw_error_pct": 100 * (raw - mean) / mean, "corrected_error_pct": 100 * (corrected - mean) / mean,
            "noise_pct": 100 * abs(base_ns - base_again_ns) / mean, "speed_vs_calibration": speed, **steady}


def pairs_within_budget(run_pair: Callable[[int], dict[str, float]], wanted: int, deadline: float | None,
                        after_pairs: float = 0.0,
                        clock: Callable[[], float] = time.monotonic) -> list[dict[str, float]]:
    """Up to ``wanted`` whole-run pairs (``run_pair(i)``), as many as end by ``deadline`` (a
    ``clock()`` time; None: all of them) with the runs after them still to come.

    Another pair starts only if it and ``after_pairs`` more pairs' worth of time (the windows and
    sessions runs, which follow) would end by the deadline, at the longest pair so far: a
    repetition short of time reports fewer pairs (``whole_run_pairs`` says how many) rather than
    being killed at the manifest's ``timeout_s`` with every finished pair lost. The first pair
    always runs."""
    pairs: list[dict[str, float]] = []
    longest = 0.0
    for i in range(wanted):
        started = clock()
        pairs.append(run_pair(i))
        longest = max(longest, clock() - started)
        if deadline is not None and clock() + longest * (1 + after_pairs) > deadline:
            break
    return pairs


def median_of_pairs(pairs: list[dict[str, float]]) -> dict[str, float | str]:
    """Per column, the median over the pairs (identical runs differ by 2.5-37% on the machines
    measured, so one pair says little), with the corrected errors' range beside it and every
    pair's error in run order (``*_pairs_pct``, a JSON list in one results.csv cell): whether a
    median's miss is one stray pair or all of them leaning one way is what tells noise from a
    cost the correction lacks."""
    columns = [c for c in pairs[0] if all(c in p for p in pairs)]
    out: dict[str, float | str] = {c: float(np.median([p[c] for p in pairs])) for c in columns}
    for column in ("corrected_error_pct", "steady_corrected_error_pct"):
        if column in out:
            values = [p[column] for p in pairs]
            out[column.replace("_pct", "_min_pct")], out[column.replace("_pct", "_max_pct")] = min(values), max(values)
            out[column.replace("_pct", "_pairs_pct")] = json.dumps([round(v, 2) for v in values])
    return {**out, "whole_run_pairs": len(pairs)}


def overhead_correction(workload: str, calibration_steps: int, validation_steps: int,
                        calibration_repetitions: int = 3, gpu: bool = True, window_ms: float = 10.0,
                        validation_pairs: int = 5, calibration_precision_pct: float = 0.0,
                        session_steps: int = 0, session_segment_ms: float = 100.0,
                        calibration_file: str | None = None, budget_s: float = 0.0,
                        calibration_startup_pairs: int = STARTUP_PAIRS) -> dict[str, Any]:
    """Calibrate (``calibration_precision_pct``: adding runs until a corrected iteration is
    uncertain to at most ± that, as ``rlscope calibrate --precision``; ``calibration_startup_pairs``:
    start-up pairs per calibration repetition, as ``--startup-pairs``; ``calibration_file``: use
    a calibration made earlier by ``rlscope calibrate`` of this workload instead, e.g. one too
    long to make in the same sitting, whose ``calibration_*`` parameters then do not apply), validate every
    way (whole runs: ``validation_pairs`` profiled runs, each between two uninstrumented ones,
    reported as medians over the pairs; sessions: a run of ``session_steps``, 0 for none);
    return the errors in percent. ``budget_s``: seconds this repetition may take, calibration
    included (0: no limit); the whole-run pairs stop short of it (``pairs_within_budget``). The
    time that stages read back from an earlier attempt took then counts as spent.

    Resumed at a pair, a repetition runs the uninstrumented run before that pair's profiled one
    again: the earlier one's trace went with the stopped attempt's temporary directory."""
    from experiments.overhead.loops import GPU_WORKLOADS
    from rlscope.calibrate import CALIBRATION_FILE, Calibration, analyze_corrected, calibrate
    from rlscope.calibrate.spans import measure_windows
    from rlscope.calibrate.speed import speed_factor
    from rlscope.calibrate.window_costs import window_iteration
    from rlscope.nvidia import gpu_unavailable_reason
    from rlscope.collect.launch import run_profiled
    from rlscope.collect.windows import LEVELS, format_windows
    from rlscope.analyze.attribution import read_attributed
    from rlscope.files import write_json_atomic
    from rlscope.stages import current

    if workload in GPU_WORKLOADS and (reason := gpu_unavailable_reason()) is not None:
        raise SkipRun(f"needs a GPU: {reason}")
    if validation_pairs < 1:
        raise ValueError(f"validation_pairs {validation_pairs}: need at least 1")
    stages = current()

    def clock() -> float:  # time spent, that of the stages read back included
        return time.monotonic() + stages.resumed_seconds

    deadline = clock() + budget_s if budget_s > 0 else None
    command = [sys.executable, "-m", "experiments.overhead.loops", workload]
    validation = command + [str(validation_steps)]
    with tempfile.TemporaryDirectory(prefix="rlscope-overhead-") as tmp:
        root = Path(tmp)

        def run(name: str, **options: Any) -> Path:
            with (root / f"{name}.log").open("w") as log:
                _, code = run_profiled(validation, root / name, stdout=log, **options)
            if code != 0:
                raise RuntimeError(f"{name} run failed: {(root / f'{name}.log').read_text()[-2000:]}")
            return root / name

        reused: dict[str, Any] = {}
        if calibration_file:  # the results say how it was made, not what the manifest asked
            calibration_path = Path(calibration_file)
            calibration = reused_calibration(calibration_path, workload, validation_steps)
            reused = {"calibration_steps": int(calibration.command[-1]),
                      "calibration_repetitions": calibration.repetitions, "calibration_precision_pct": float("nan")}
        else:
            calibration_path = root / "calibration" / CALIBRATION_FILE

            def calibrated() -> dict[str, Any]:
                _, failures = calibrate(command + [str(calibration_steps)], calibration_path.parent,
                                        calibration_repetitions, gpu=gpu, progress=lambda line: None,
                                        window_ms=window_ms, precision_pct=calibration_precision_pct,
                                        startup_pairs=calibration_startup_pairs)
                if failures:
                    raise RuntimeError("calibration runs failed: " + "; ".join(failures))
                return json.loads(calibration_path.read_text())

            # The file, computed or read back: the correction of each profiled run reads it.
            write_json_atomic(calibration_path, stages.stage("calibration", calibrated, this_machine=True))
            calibration = Calibration.load(calibration_path)
        bases: dict[int, list[Any]] = {}

        def base(i: int) -> list[Any]:
            """The uninstrumented run before pair i's profiled one (after pair i - 1's)."""
            if i not in bases:
                bases[i] = read_attributed(run(f"base{i}", wall_only=True))
            return bases[i]

        def measured_pair(i: int) -> dict[str, float]:
            before = base(i)
            tables = analyze_corrected(run(f"profiled{i}", gpu=gpu), calibration_path)
            return whole_run_pair(before, base(i + 1), read_attributed(root / f"profiled{i}"), tables, calibration)

        def pair(i: int) -> dict[str, float]:
            return stages.stage("validation pairs", lambda: measured_pair(i), index=i, of=validation_pairs)

        if not stages.has("validation pairs", 0):
            base(0)  # before the pairs, so that no pair's time, by which the budget goes, includes it
        # The windows run is about half a pair (one profiled run); the sessions run, half profiled,
        # about half a pair per validation length it spans.
        after_pairs = 0.5 + 0.5 * session_steps / validation_steps
        whole = median_of_pairs(pairs_within_budget(pair, validation_pairs, deadline, after_pairs, clock=clock))
        windows = stages.stage("windows run", lambda: measure_windows(read_attributed(
            run("windows", gpu=gpu, windows=format_windows(window_ms, ["off", LEVELS[-1]])))))
        window_speed = speed_factor(calibration, window_iteration(windows))
        sessions = {}
        if session_steps:
            def sessions_run() -> dict[str, float]:
                _run_sessions(command + [str(session_steps), "--segment-ms", f"{session_segment_ms:g}"], root, gpu)
                return session_errors(root / "sessions", calibration, whole)

            sessions = stages.stage("sessions run", sessions_run)
    return {
        **reused,
        **sessions,
        **whole,
        **window_errors(windows, window_costs(calibration), window_speed or 1.0,
                        unprofiled_ns={"cuda_api": calibration.cupti_residual_ns or 0.0}),
        "window_speed_vs_calibration": window_speed if window_speed is not None else float("nan"),
        **unprofiled_slowdown(windows, whole),
        "calibration_blocks": calibration.blocks,
        "calibration_runs": len([r for r in calibration.runs if r["config"] == "windows"]),
        "startup_cost_s": calibration.startup_ns / 1e9 if calibration.startup_ns is not None else float("nan"),
        "startup_cost_ci95_s": (calibration.startup_ci95_ns / 1e9 if calibration.startup_ci95_ns is not None
                                else float("nan")),
        "calibration_uncertainty_pct": (calibration.uncertainty_pct if calibration.uncertainty_pct is not None
                                        else float("nan")),
        "cupti_residual_ns": (calibration.cupti_residual_ns if calibration.cupti_residual_ns is not None
                              else float("nan")),
        "continuous_ns": calibration.continuous_ns if calibration.continuous_ns is not None else float("nan"),
        "continuous_ci95_ns": (calibration.continuous_ci95_ns if calibration.continuous_ci95_ns is not None
                               else float("nan")),
        **{f"cost_{event}_ns": cost for event, cost in calibration.costs_ns.items()},
        **{f"cost_{event}_ci95_ns": ci for event, ci in calibration.ci95_ns.items() if ci is not None},
    }


def reused_calibration(path: Path, workload: str, validation_steps: int) -> Any:
    """A calibration made earlier (``rlscope calibrate -- python -m experiments.overhead.loops
    WORKLOAD STEPS``), checked to be of ``workload`` and of another length than the validation,
    as the check requires."""
    from rlscope.calibrate import Calibration

    calibration = Calibration.load(path)
    command = list(calibration.command)
    if command[-3:-1] != ["experiments.overhead.loops", workload] or not command[-1].isdigit():
        raise ValueError(f"calibration_file {path}: made with {' '.join(command) or 'no command'!r}, not for "
                         f"{workload}; calibrate with `rlscope calibrate -- python -m experiments.overhead.loops "
                         f"{workload} STEPS`")
    if int(command[-1]) == validation_steps:
        raise ValueError(f"calibration_file {path}: made at {validation_steps} steps, the validation's length; "
                         f"the check needs a calibration of another length (e.g. half)")
    return calibration


def _run_sessions(command: list[str], root: Path, gpu: bool) -> None:
    """The ``--sessions`` run: a plain process (sessions are started by the loop itself), with
    GPU collection left to the loop (``gpu=False``: none)."""
    import os
    import subprocess

    from rlscope.collect.environment import ENV_GPU

    env = {k: v for k, v in os.environ.items() if not k.startswith("RLSCOPE_")}
    if not gpu:
        env[ENV_GPU] = "0"
    with (root / "sessions.log").open("w") as log:
        code = subprocess.call([*command, "--sessions", str(root / "sessions")], env=env, stdout=log,
                               stderr=subprocess.STDOUT)
    if code != 0:
        raise RuntimeError(f"sessions run failed: {(root / 'sessions.log').read_text()[-2000:]}")
