"""`rlscope calibrate`: run a workload with rlscope's layers switched on and off, and derive
what each recorded event costs (``rlscope.calibrate.estimate``).

Per repetition:

- one run that alternates the layers in windows of a few milliseconds
  (``rlscope.collect.windows``): annotations and transitions, and where a GPU is, CUDA API and
  GPU activity recording;
- pairs of start-ups (``startup_cost``): an uninstrumented run ended at its first
  ``rlscope.step()`` against a profiled one (the first pair's profiled start-up is the
  alternating run's own). Where a GPU is traced, the pairs after the first run whole, which also
  measures what a continuously profiled run pays per CUDA API call (``continuous_cost``).

The order alternates between repetitions, so slow drift of the machine touches every kind of
run alike. Where a GPU is traced, once per calibration, the CUPTI residual probe
(``rlscope.calibrate.residual``, a process of its own). A workload that never calls
``rlscope.step()`` has no iterations to alternate on: it is calibrated with whole runs of every
configuration instead.

Layout: ``OUTPUT/calibration.json`` and ``OUTPUT/runs/<repetition>-<config>/`` (each a trace
directory with ``log.txt``). A run that fails or times out is reported with its log; the others
are kept and used.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any


from rlscope.calibrate.estimate import derive_calibration
from rlscope.calibrate.model import (
    CALIBRATION_FILE,
    CONFIGS,
    GPU_CONFIGS,
    PROFILED_STARTUP,
    RESIDUAL,
    STARTUP,
    WINDOWS,
    Calibration,
    event_counts,
    machine_fingerprint,
)
from rlscope.calibrate.residual import measure_residual_run
from rlscope.calibrate.spans import (
    first_step_ns,
    iterating_process,
    measure_windows,
    profiled_startup,
    profiled_steady,
    trace_iteration,
)
from rlscope.calibrate.window_costs import window_blocks
from rlscope.collect.windows import LEVELS, format_windows
from rlscope.errors import RlscopeError

__all__ = ["calibrate", "measure_run", "WINDOW_MS"]

WINDOW_MS = 10.0  # long enough for a few iterations of a fast loop, short against the machine's drift
STARTUP_PAIRS = 3  # start-up pairs per repetition (``calibrate``'s ``startup_pairs``)
MORE_RUNS_FACTOR = 4  # precision_pct adds runs up to this many times the repetitions asked for


def measure_run(trace_dir: Path) -> dict[str, Any]:
    """Wall time (summed over the trace's processes) and event counts of one finished run."""
    from rlscope.analyze import analyze_trace
    from rlscope.analyze.attribution import read_attributed

    processes = read_attributed(trace_dir)
    wall = sum(int(p.meta["end_ns"]) - int(p.meta["start_ns"]) for p in processes)
    if all(p.meta.get("wall_only") for p in processes):
        counts = dict.fromkeys(("annotation", "python_call", "cuda_api", "gpu_activity"), 0)
    else:
        counts = event_counts(analyze_trace(trace_dir)["transitions"])
    return {"wall_ns": wall, "counts": counts}


def is_calibration_part(path: Path) -> bool:
    """Whether ``path``, in a calibration's directory, is something ``calibrate`` wrote there (what
    ``rlscope calibrate --force`` may remove): ``calibration.json``, and ``runs/`` if each of its
    folders is a calibration run's (it has the run's ``log.txt``)."""
    if path.is_symlink():
        return False
    if path.name == CALIBRATION_FILE:
        return path.is_file()
    return path.name == "runs" and path.is_dir() and all(
        run.is_dir() and not run.is_symlink() and (run / "log.txt").is_file() for run in path.iterdir())


def calibrate(command: list[str], output: Path, repetitions: int = 3, gpu: bool = True, timeout_s: float = 3600,
              progress: Callable[[str], None] = print, window_ms: float = WINDOW_MS, precision_pct: float = 0.0,
              startup_pairs: int = STARTUP_PAIRS, extend: bool = False) -> tuple[Calibration, list[str]]:
    """Run the configurations ``repetitions`` times; returns the calibration (also saved to
    ``output/calibration.json``) and the failed runs' descriptions.

    ``precision_pct``: with alternating windows, add runs until a corrected
    iteration is uncertain to at most ± this many % (``correction_uncertainty_pct``), up to
    MORE_RUNS_FACTOR times ``repetitions`` runs. Why: a workload whose iterations outlast a
    window gets one block per ~10 iterations, a few per run, too few for costs that a check at
    ±5% can rely on; a fast CPU loop gets hundreds and needs no more runs.

    ``startup_pairs``: start-up pairs per repetition (0: the start-up's excess is not measured).
    Each is one sample, and start-ups vary between processes by as much as the excess itself, so
    a few pairs can leave it uncertain by more than its size. Where a GPU is traced, pairs after the first
    run to the end, for ``Calibration.continuous_ns`` (the first pair's profiled run is the
    alternating one).

    ``calibration.json`` is written after every repetition, so a calibration stopped part way
    (a job's time limit) keeps the repetitions it finished, and ``extend`` can go on from them.

    ``extend``: add ``repetitions`` to the calibration already in ``output`` (same command, same
    machine) rather than start afresh, and derive the costs from all of its runs. Why: on a host
    whose identical processes differ widely in wall time, the whole-run pairs behind
    ``continuous_ns`` need more repetitions than one sitting (or one time-limited job) holds."""
    from rlscope.analyze.attribution import read_attributed
    from rlscope.collect.launch import run_profiled
    from rlscope.nvidia import gpu_unavailable_reason

    if not command:
        raise RlscopeError("no command given; usage: rlscope calibrate -- python train.py ARGS")
    if repetitions < 1:
        raise RlscopeError(f"--repetitions {repetitions}: need at least 1 (3 or more for a confidence interval)")
    if gpu and (reason := gpu_unavailable_reason()) is not None:
        gpu = False
        progress(f"no GPU here ({reason}): calibrating the CPU-side events only")
    if startup_pairs < 0:
        raise RlscopeError(f"--startup-pairs {startup_pairs}: need 0 (not measured) or more")
    ladder = [(c, 0) for c in CONFIGS if gpu or c not in GPU_CONFIGS]
    gpu_layers = CONFIGS["gpu_activities"][1] if gpu else False
    alternate = format_windows(window_ms, list(LEVELS if gpu else LEVELS[:3]))
    plan = [(WINDOWS, 0)] + [(STARTUP, 0)] * bool(startup_pairs)
    plan += [run for k in range(1, startup_pairs) for run in ((PROFILED_STARTUP, k), (STARTUP, k))]
    runs, first_rep = _earlier_runs(output, command, gpu) if extend else ([], 0)
    if any(r["config"] in CONFIGS for r in runs):  # it had no rlscope.step() to alternate on
        plan = ladder
    failures: list[str] = []
    if gpu and not any(r["config"] == RESIDUAL for r in runs):
        progress("CUPTI's residual cost per CUDA call (a process of its own, about 10 s)")
        residual, failure = measure_residual_run(output / "runs" / RESIDUAL, timeout_s)
        if residual is not None:
            runs.append({"config": RESIDUAL, "repetition": 0, **residual})
        else:
            failures.append(failure)
            progress(f"  failed: {failure}; the CUDA API cost will lack what recording leaves on every call")
    done = 0
    rep = first_rep
    uncertainty: float | None = None  # the calibration so far's, once a repetition is done
    while rep < first_rep + repetitions or _wants_more(uncertainty, plan, precision_pct, rep - first_rep,
                                                       repetitions, progress):
        queue = list(plan if rep % 2 == 0 else plan[::-1])  # W S, S W, ...: drift touches both alike
        while queue:
            config, pair = queue.pop(0)
            run_dir = output / "runs" / (f"{rep}-{config}" + (f"-{pair}" if pair else ""))
            run_dir.mkdir(parents=True, exist_ok=True)
            label = f"repetition {rep + 1}, {config}" + (f" {pair + 1}" if config != WINDOWS and pair else "")
            done += 1
            progress(f"[{done}/{done + len(queue) + len(plan) * max(first_rep + repetitions - rep - 1, 0)}] {label}")
            log = run_dir / "log.txt"
            whole_pair = gpu and pair > 0  # runs to the end: also what continuous profiling costs
            with log.open("w") as out:
                try:
                    if config == WINDOWS:
                        _, code = run_profiled(command, run_dir, gpu=gpu_layers, windows=alternate, stdout=out,
                                               timeout_s=timeout_s)
                    elif config in (STARTUP, PROFILED_STARTUP):
                        _, code = run_profiled(command, run_dir, gpu=gpu_layers, wall_only=config == STARTUP,
                                               until_first_step=not whole_pair, stdout=out, timeout_s=timeout_s)
                    else:
                        transitions, layers, _ = CONFIGS[config]
                        _, code = run_profiled(command, run_dir, transitions=bool(transitions),
                                               gpu=False if layers == "0" else layers,
                                               wall_only=transitions is None, stdout=out, timeout_s=timeout_s)
                except subprocess.TimeoutExpired:
                    code = None
            if code != 0:
                why = "timed out" if code is None else f"exit code {code}"
                failures.append(f"{label}: {why}; log: {log}")
                progress(f"  failed ({why}); log: {log}")
                continue
            if config == STARTUP:
                stepped = [(p, first) for p in read_attributed(run_dir) if (first := first_step_ns(p)) is not None]
                if stepped:
                    process, first = stepped[0]
                    runs.append({"config": config, "repetition": rep, "pair": pair,
                                 "startup_ns": first - process.meta["start_ns"],
                                 **({"steady_ns": process.meta["end_ns"] - first} if whole_pair else {})})
                continue
            if config not in (WINDOWS, PROFILED_STARTUP):
                runs.append({"config": config, "repetition": rep, **measure_run(run_dir)})
                continue
            processes = read_attributed(run_dir)
            iterating = iterating_process(processes)
            startup = {"pair": pair, "startup": profiled_startup(iterating) if iterating is not None else None}
            if config == PROFILED_STARTUP:
                if whole_pair and iterating is not None:
                    startup.update(steady=profiled_steady(iterating), iteration=trace_iteration(processes))
                runs.append({"config": config, "repetition": rep, **startup})
                continue
            windows = measure_windows(processes)
            if any(window_blocks(w) for w in windows):
                runs.append({"config": config, "repetition": rep, "windows": windows, **startup})
            elif plan[0][0] == WINDOWS:  # nothing to alternate on: whole runs from now on
                progress("  too few rlscope.step() iterations to alternate on; calibrating with whole runs of "
                         "each configuration instead (mark iterations with rlscope.step() for tighter costs)")
                plan = ladder
                queue = list(ladder)
        rep += 1
        calibration = derive_calibration(runs, machine_fingerprint(), command)
        calibration.save(output / CALIBRATION_FILE)  # after every repetition: a run cut off keeps those before it
        uncertainty = calibration.uncertainty_pct
    return calibration, failures


def _earlier_runs(output: Path, command: list[str], gpu: bool) -> tuple[list[dict[str, Any]], int]:
    """The runs of the calibration in ``output`` and the next repetition's number, or an error
    saying why they cannot be extended with these runs."""
    path = output / CALIBRATION_FILE
    if not path.exists():
        raise RlscopeError(f"--extend: no {CALIBRATION_FILE} in {output}; calibrate there without --extend first")
    earlier = Calibration.load(path)
    if list(earlier.command) != command:
        raise RlscopeError(f"--extend: {path} calibrated `{' '.join(earlier.command)}`, not `{' '.join(command)}`; "
                           f"extend it with the same command, or calibrate afresh into another --output")
    here = machine_fingerprint()
    for key in ("host", "rlscope"):
        if earlier.machine.get(key) != here[key]:
            raise RlscopeError(f"--extend: {path} was measured with {key}={earlier.machine.get(key)!r}, this is "
                               f"{here[key]!r}; costs from two machines or versions do not mix: calibrate afresh")
    if not gpu and any(r["config"] == RESIDUAL for r in earlier.runs):
        raise RlscopeError(f"--extend: {path} also calibrated GPU records; extend it with --gpu")
    return list(earlier.runs), 1 + max((r["repetition"] for r in earlier.runs), default=-1)


def _wants_more(uncertainty: float | None, plan: list[tuple[str, int]], precision_pct: float, rep: int,
                repetitions: int, progress: Callable[[str], None]) -> bool:
    """Whether to add a run for ``precision_pct`` (only with alternating windows, within the cap),
    given the calibration so far's ``uncertainty_pct``."""
    if not precision_pct or plan[0][0] != WINDOWS:
        return False
    if uncertainty is not None and uncertainty <= precision_pct:
        return False
    now = "no interval yet" if uncertainty is None else f"±{uncertainty:.1f}%"
    if rep >= MORE_RUNS_FACTOR * repetitions:
        progress(f"correction uncertain to {now} of an iteration after {rep} runs, above --precision "
                 f"{precision_pct:g}%; stopping there (at most {MORE_RUNS_FACTOR}x --repetitions runs)")
        return False
    progress(f"correction uncertain to {now} of an iteration, above --precision {precision_pct:g}%: one more run")
    return True
