"""Stable-Baselines3 training under the profiler: where its time goes per operation and layer.

The manifests' workload (``configs/algorithm_choice.yaml``, ``configs/simulator_choice.yaml``,
``configs/rl_framework_comparison.yaml``): runs ``experiments.casestudies.sb3_train`` under
``rlscope prof``, analyses the trace, and returns one row per operation and layer of the training
process's main thread (seconds and share of the whole training time) and one per operation and
transition type (per iteration, i.e. per rollout). The breakdown is corrected for profiling's
overhead with a calibration of the same training on this machine: ``calibrate: true`` makes one
if none is cached yet, ``calibrate: auto`` (the default) uses one only where it exists,
``calibrate: false`` never. ``baseline: true`` also trains once without the profiler and reports
that run's ``model.learn`` time (``uninstrumented_learn_s``) beside the profiled one
(``profiled_learn_s``): what a comparison of frameworks' speed rests on.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rlscope.errors import SKIPPED_EXIT, SkipRun

__all__ = ["profiled_training", "check_params", "training_rows", "timed_runs"]

CALIBRATION_TIMESTEPS_FACTOR = 2  # calibrate on runs this many times longer: checked on another length
# ... and of at least this many iterations (rollouts, one rlscope.step() each). A rollout outlasts
# a 10 ms window, so each window is one rollout: a block of the five levels' palindrome takes 10,
# the switches' settling windows a few more, and the first block is warm-up. PPO's 512-step
# rollouts gave 19 iterations in 10,000 steps on an H100, too few for one measured block, and the
# calibration fell back to whole runs of every configuration (about 4x longer, far wider costs).
MIN_CALIBRATION_ITERATIONS = 50


def check_params(name: str, value: Any) -> str | None:
    """Manifest check (``rlscope.harness.manifest``): an ``env`` that names no environment."""
    if name == "env" and isinstance(value, str):
        from experiments.casestudies.sb3_train import env_problem

        return env_problem(value)
    if name == "framework" and isinstance(value, str):
        from experiments.casestudies.frameworks import FRAMEWORKS

        if value not in FRAMEWORKS:
            return f"unknown framework {value!r}; known: {', '.join(FRAMEWORKS)}"
    if name == "algorithm" and isinstance(value, str):
        from experiments.casestudies.sb3_train import ALGORITHMS

        if value not in ALGORITHMS:
            return f"unknown algorithm {value!r}; known: {', '.join(ALGORITHMS)}"
    return None


def _command(algorithm: str, env: str, timesteps: int, device: str, learning_starts: int | None,
             n_envs: int, subproc: bool, framework: str = "sb3", hyperparameters: str = "zoo") -> list[str]:
    command = [sys.executable, "-m", "experiments.casestudies.sb3_train", algorithm, env, str(timesteps), device,
               "--n-envs", str(n_envs)]
    if framework != "sb3":
        command += ["--framework", framework]
    if hyperparameters != "zoo":
        command += ["--hyperparameters", hyperparameters]
    if learning_starts is not None:
        command += ["--learning-starts", str(learning_starts)]
    return command + (["--subproc"] if subproc else [])


def profiled_training(algorithm: str, env: str, timesteps: int, device: str = "auto",
                      learning_starts: int | None = None, n_envs: int = 1, subproc: bool = False,
                      calibrate: bool | str = "auto", framework: str = "sb3", baseline: bool = False,
                      timeout_s: float = 3600, hyperparameters: str = "zoo") -> dict[str, Any]:
    """Train under ``rlscope prof``; the breakdown and transition rows (``training_rows``)."""
    from experiments.devices import resolve_device
    from rlscope.calibrate import analyze_corrected

    device = resolve_device(device)
    command = _command(algorithm, env, timesteps, device, learning_starts, n_envs, subproc, framework, hyperparameters)
    with tempfile.TemporaryDirectory(prefix="rlscope-sb3-") as tmp:
        trace, timings = timed_runs(command, Path(tmp), device, baseline, timeout_s)
        calibration_path = None
        if calibrate not in (False, "auto", True):
            raise ValueError(f"calibrate: {calibrate!r}; use true, false or auto")
        if calibrate is not False:
            calibration_path = _calibration(algorithm, env, timesteps, device, learning_starts, n_envs, framework,
                                            timeout_s, make=calibrate is True, hyperparameters=hyperparameters)
        tables = analyze_corrected(trace, calibration_path)
    result = training_rows(tables["breakdown"], tables["transitions"], corrected=calibration_path is not None)
    return {**result, **timings, "device": device, "python": platform.python_version(), "timesteps": timesteps,
            "steps_per_s": timesteps / result["training_s"] if result["training_s"] else float("nan")}


def timed_runs(command: list[str], work: Path, device: str, baseline: bool, timeout_s: float,
               jax_scopes: str | None = None) -> tuple[Path, dict[str, float]]:
    """Run a training ``command`` (one that prints ``learn_s=``) once without the profiler where
    ``baseline`` (``uninstrumented_learn_s``) and once under ``rlscope prof`` into ``work/trace``
    (``profiled_learn_s``); returns the trace directory and those timings. A command that also
    prints a JSON line with ``iteration_s`` (the jitted PPO's seconds per iteration once compiled)
    adds ``uninstrumented_iteration_s`` and ``profiled_iteration_s``: wall time to the steps
    includes compiling, which these leave out."""
    from rlscope.collect.launch import run_profiled

    timings: dict[str, float] = {}
    if baseline:
        plain = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=timeout_s)
        timings["uninstrumented_learn_s"] = _learn_seconds(plain.returncode, plain.stdout)
        timings.update(_iteration_seconds(plain.stdout, "uninstrumented_iteration_s"))
    log_path = work / "log.txt"
    with log_path.open("w") as log:
        trace, code = run_profiled(command, work / "trace", gpu=device.startswith("cuda"), stdout=log,
                                   timeout_s=timeout_s, jax_scopes=jax_scopes)
    output = log_path.read_text()
    timings["profiled_learn_s"] = _learn_seconds(code, output)
    timings.update(_iteration_seconds(output, "profiled_iteration_s"))
    return trace, timings


def _iteration_seconds(output: str, key: str) -> dict[str, float]:
    """``{key: iteration_s}`` from the last JSON line of ``output`` that has one, else ``{}``."""
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line).get("iteration_s")
            except json.JSONDecodeError:
                continue
            if isinstance(value, (int, float)):
                return {key: float(value)}
    return {}


def _learn_seconds(code: int, output: str) -> float:
    """``model.learn``'s wall time from the training script's output; a skipped or failed training
    raises (``SkipRun`` with the script's reason, RuntimeError with the end of its output)."""
    from experiments.casestudies.sb3_train import LEARN_PREFIX

    if code == SKIPPED_EXIT:
        raise SkipRun(output.strip().splitlines()[-1])
    lines = [line for line in output.splitlines() if line.startswith(LEARN_PREFIX)]
    if code != 0 or not lines:
        raise RuntimeError(f"training failed (exit {code}):\n{output[-3000:]}")
    return float(lines[-1][len(LEARN_PREFIX):])


def training_rows(breakdown: Any, transitions: Any, corrected: bool = False) -> dict[str, Any]:
    """Rows of the training process's main thread from its first rollout on (its data-collection
    and training phases): per operation and layer, seconds and share of the training time and
    the analysis's ``caveat`` on them (``corrected_seconds``, ``corrected_share`` too where the
    breakdown was corrected, with their bounds by the correction's 95% interval:
    ``corrected_{low,high}_seconds``, ``corrected_{low,high}_share``); per operation and
    transition type, the count per iteration (per rollout: ``rlscope.step()`` is called once at
    the start of each). The training process is the one that made the iterations."""
    from rlscope.analyze.caveats import CAVEAT
    from rlscope.analyze.shares import share_intervals
    from rlscope.plot.breakdown import stack_label

    from rlscope.integrations import DATA_COLLECTION, TRAINING

    training = (DATA_COLLECTION, TRAINING)  # from the first rollout on: start-up and imports left out
    main = breakdown[(breakdown["thread"] == "main") & breakdown["phase"].isin(training)]
    steps = transitions[(transitions["thread"] == "main") & transitions["phase"].isin(training)]
    iterations_by_process = steps.groupby("process")["iterations"].max()
    if iterations_by_process.empty or iterations_by_process.max() <= 0:
        raise RuntimeError("the training recorded no iterations: was it annotated with rlscope.integrations.sb3?")
    process = iterations_by_process.idxmax()
    iterations = int(steps.loc[steps["process"] == process].groupby("phase")["iterations"].max().sum())
    ours = main[main["process"] == process].copy()
    ours["layer"] = [stack_label(c, g) for c, g in zip(ours["cpu"], ours["gpu"])]
    bounds = ["corrected_ns", "corrected_low_ns", "corrected_high_ns"]
    per_layer = ours.groupby(["operation", "layer"])[["time_s"] + (bounds if corrected else [])].sum()
    total = float(per_layer["time_s"].sum())
    corrected_total = float(per_layer["corrected_ns"].sum()) / 1e9 if corrected else 0.0
    shares = share_intervals(*(per_layer[c] for c in bounds)) if corrected else ()
    rows: list[dict[str, Any]] = []
    for (operation, layer), values in per_layer.iterrows():
        row = {"table": "breakdown", "operation": operation, "layer": layer, "seconds": float(values["time_s"]),
               "share": float(values["time_s"]) / total}
        for bound, ns, share in zip(("", "low_", "high_"), bounds, shares):
            row[f"corrected_{bound}seconds"] = float(values[ns]) / 1e9
            row[f"corrected_{bound}share"] = float(share[(operation, layer)])
        if CAVEAT in ours:
            caveats = ours.loc[(ours["operation"] == operation) & (ours["layer"] == layer), CAVEAT]
            row[CAVEAT] = "; ".join(dict.fromkeys(t for t in caveats if t))
        rows.append(row)
    counted = steps[steps["process"] == process].groupby(["operation", "transition"])["count"].sum()
    for (operation, transition), count in counted.items():
        rows.append({"table": "transitions", "operation": operation, "transition": transition,
                     "per_iteration": float(count) / iterations})
    return {"rows": rows, "iterations": iterations, "training_s": total,
            **({"corrected_training_s": corrected_total} if corrected else {})}


def steps_per_iteration(algorithm: str, n_envs: int, hyperparameters: str = "zoo") -> int:
    """Environment steps per ``rlscope.step()`` of a training: a rollout, ``n_steps`` per env for
    the on-policy algorithms (SB3's defaults where the zoo's hyperparameters set none), one
    ``train_freq`` of steps for the off-policy ones."""
    from experiments.casestudies.sb3_train import HYPERPARAMETERS, cartpole_ppo

    params = cartpole_ppo(n_envs) if hyperparameters == "cartpole" else HYPERPARAMETERS.get(algorithm, {})
    on_policy_defaults = {"ppo": 2048, "a2c": 5}  # stable_baselines3's PPO and A2C n_steps
    if algorithm in on_policy_defaults:
        return int(params.get("n_steps", on_policy_defaults[algorithm])) * n_envs
    return int(params.get("train_freq", 1)) * n_envs


def _calibration(algorithm: str, env: str, timesteps: int, device: str, learning_starts: int | None, n_envs: int,
                 framework: str, timeout_s: float, make: bool, hyperparameters: str = "zoo") -> Path | None:
    """This training's calibration on this machine, on runs ``CALIBRATION_TIMESTEPS_FACTOR`` times
    as long as the profiled one and of at least ``MIN_CALIBRATION_ITERATIONS`` iterations: made
    once (``make``) and cached, or None where there is none."""
    from rlscope.calibrate import cached_calibration, find_cached_calibration

    # The identity names the calibration's least length: one made shorter is another calibration.
    identity = [*_command(algorithm, env, 0, device, learning_starts, n_envs, False, framework, hyperparameters),
                f"--min-iterations={MIN_CALIBRATION_ITERATIONS}"]
    options = {"gpu": device.startswith("cuda"), "timeout_s": timeout_s, "repetitions": 2, "startup_pairs": 1}
    if not make:
        return find_cached_calibration(identity, **options)
    length = max(CALIBRATION_TIMESTEPS_FACTOR * timesteps,
                 MIN_CALIBRATION_ITERATIONS * steps_per_iteration(algorithm, n_envs, hyperparameters))
    _, path = cached_calibration(
        identity, lambda: _command(algorithm, env, length, device, learning_starts, n_envs, False, framework,
                                   hyperparameters),
        **options)
    return path
