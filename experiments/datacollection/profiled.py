"""Data collection under the profiler: where time goes as K steps are handed to the backend per
Python call (paper Fig. 5) and how many transitions each call makes (Fig. 6).

    python -m experiments.datacollection.profiled BACKEND N K ITERATIONS DEVICE

runs ITERATIONS calls of ``rollout(policy, K)`` (each one ``rlscope.step()`` and one
``data_collection`` operation) after an unannotated warm-up call that compiles. The workload
function runs that command under ``rlscope prof``, analyses the trace and returns one row per
layer of the time breakdown and one per transition type, per iteration. With ``calibrate: true``
in the manifest's params it also corrects the breakdown for profiling's own overhead, with a
calibration of the same loop made once per machine (``rlscope.calibrate.cached_calibration``).
"""

from __future__ import annotations

import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import rlscope
from rlscope.errors import SKIPPED_EXIT, SkipRun

__all__ = ["profiled_collection", "collect_loop", "OPERATION"]

OPERATION = "data_collection"
# Calibration runs of the loop last about this long by default (judged from the first profiled run
# of its configuration, which all its runs then share), enough for ~100 blocks of 10 ms windows,
# and at least twice as long as the profiled run: correction is checked on runs of another length.
CALIBRATION_SECONDS = 8.0
# Fewer palindromic blocks of windows than this, and the calibration was sized from warm-up.
MIN_CALIBRATION_BLOCKS = 20


def collect_loop(backend: str, num_envs: int, fused_steps: int, iterations: int, device: str) -> None:
    """The annotated loop: one operation and one iteration per call of K steps."""
    import torch

    from experiments.datacollection.backends import make_backend
    from experiments.datacollection.collect import backend_options
    from experiments.devices import resolve_device
    from experiments.datacollection.policy import make_policy

    device = resolve_device(device)
    env = make_backend(backend, num_envs, 0, **backend_options(backend, device))
    policy = make_policy(64, device, 0)
    with torch.inference_mode():
        obs = env.rollout(policy, env.reset(), fused_steps)
        env.synchronize()
        for _ in range(iterations):
            rlscope.step()
            with rlscope.operation(OPERATION):
                obs = env.rollout(policy, obs, fused_steps)
                env.synchronize()


def profiled_collection(backend: str, num_envs: int, fused_steps: int, iterations: int = 20,
                        device: str = "auto", timeout_s: float = 600, calibrate: bool = False,
                        calibration_seconds: float = CALIBRATION_SECONDS) -> dict[str, Any]:
    """Profile :func:`collect_loop`; rows of the breakdown (seconds and share per layer, per
    iteration, and the analysis's ``caveat`` on that layer's time) and of the transitions (count
    per iteration). With ``calibrate``, the breakdown rows also hold the times corrected for
    profiling's overhead, ``corrected_seconds_per_iteration`` and ``corrected_share``, and their
    bounds by the correction's 95% interval: ``corrected_{low,high}_seconds_per_iteration``
    (the sums of the rows' ``corrected_{low,high}_ns``) and ``corrected_{low,high}_share``
    (``rlscope.analyze.shares.share_intervals``)."""
    from experiments.devices import resolve_device
    from rlscope.analyze.caveats import CAVEAT
    from rlscope.analyze.shares import share_intervals
    from rlscope.calibrate import analyze_corrected
    from rlscope.collect.launch import run_profiled
    from rlscope.plot.breakdown import stack_label

    device = resolve_device(device)
    command = [sys.executable, "-m", "experiments.datacollection.profiled", backend, str(num_envs),
               str(fused_steps), str(iterations), device]
    calibration, calibration_path = None, None
    with tempfile.TemporaryDirectory(prefix="rlscope-collect-") as tmp:
        log_path = Path(tmp) / "log.txt"
        with log_path.open("w") as log:
            trace, code = run_profiled(command, Path(tmp) / "trace", gpu=device.startswith("cuda"), stdout=log,
                                       timeout_s=timeout_s)
        if code != 0:
            text = log_path.read_text()
            if code == SKIPPED_EXIT:
                raise SkipRun(text.strip().splitlines()[-1])
            raise RuntimeError(f"profiled loop failed (exit {code}):\n{text[-3000:]}")
        if calibrate:
            calibration, calibration_path = _calibration(command, trace, iterations, device, timeout_s,
                                                         calibration_seconds)
        tables = analyze_corrected(trace, calibration_path)
    frame = tables["breakdown"]
    ours = frame[(frame["thread"] == "main") & (frame["operation"] == OPERATION)].copy()
    ours["layer"] = [stack_label(c, g) for c, g in zip(ours["cpu"], ours["gpu"])]
    per_layer = ours.groupby("layer")["time_s"].sum()
    total = float(per_layer.sum())
    rows: list[dict[str, Any]] = [
        {"table": "breakdown", "layer": layer, "seconds_per_iteration": seconds / iterations,
         "share": seconds / total if total else float("nan")}
        for layer, seconds in per_layer.items()
    ]
    for row in rows:  # what the analysis says these times lack (calls 3.11 cannot see, overcorrection)
        row[CAVEAT] = "; ".join(dict.fromkeys(t for t in ours.loc[ours["layer"] == row["layer"], CAVEAT] if t))
    extra: dict[str, Any] = {}
    if calibration is not None:  # the same layers with profiling's overhead taken out, and its 95% interval
        corrected = ours.groupby("layer")[["corrected_ns", "corrected_low_ns", "corrected_high_ns"]].sum() / 1e9
        corrected_total = float(corrected["corrected_ns"].sum())
        shares = share_intervals(corrected["corrected_ns"], corrected["corrected_low_ns"],
                                 corrected["corrected_high_ns"])
        for row in rows:
            for bound, ns, share in zip(("", "low_", "high_"), corrected.columns, shares):
                row[f"corrected_{bound}seconds_per_iteration"] = corrected.at[row["layer"], ns] / iterations
                row[f"corrected_{bound}share"] = float(share[row["layer"]])
        extra = {"corrected_iteration_s": corrected_total / iterations,
                 "calibration_uncertainty_pct": (calibration.uncertainty_pct if calibration.uncertainty_pct is not None
                                                 else float("nan"))}
    counts = tables["transitions"]
    counts = counts[(counts["thread"] == "main") & (counts["operation"] == OPERATION)]
    for transition, group in counts.groupby("transition"):
        rows.append({"table": "transitions", "transition": transition,
                     "per_iteration": float(group["count"].sum()) / iterations})
    return {"rows": rows, **extra, "device": device, "python": platform.python_version(),
            "iteration_s": total / iterations,
            "steps_per_s": num_envs * fused_steps * iterations / total if total else float("nan")}


def _calibration(command: list[str], trace: Path, iterations: int, device: str, timeout_s: float,
                 seconds: float) -> tuple[Any, Path]:
    """The calibration of this loop on this machine (made once, then cached), with runs of about
    ``seconds``, judged by the profiled run's iterations.

    A short profiled run can be all warm-up: the torch loop's first 5 iterations take 16 ms and
    later ones 0.2 ms, so a calibration sized from them came out 40x short, with no complete
    block of windows and no interval for its costs. Where a calibration has fewer than
    ``MIN_CALIBRATION_BLOCKS``, it is made again at the length its own windows' iterations call
    for (up to twice)."""
    import math
    import shutil

    from rlscope.calibrate import cached_calibration
    from rlscope.calibrate.spans import trace_iteration
    from rlscope.analyze.attribution import read_attributed

    length: int | None = None  # None: judged from the profiled run, read only if nothing is cached

    def sized() -> list[str]:
        nonlocal length
        if length is None:
            measured = trace_iteration(read_attributed(trace))
            if measured is None or measured[0] <= 0:
                raise RuntimeError("the profiled loop recorded no iterations to size its calibration by")
            length = max(2 * iterations, math.ceil(seconds / (measured[0] / 1e9)))
        return command[:-2] + [str(length), device]

    for attempt in range(3):
        calibration, path = cached_calibration(command[:-2] + [device], sized, startup_pairs=0,
                                               gpu=device.startswith("cuda"), timeout_s=timeout_s)
        made = int(calibration.command[-2])  # its length (a cached one's may differ from this run's sizing)
        steady_s = calibration.iteration_ns / 1e9
        length = math.ceil(seconds / steady_s) if steady_s > 0 else 16 * made
        if calibration.blocks >= MIN_CALIBRATION_BLOCKS or attempt == 2 or length <= 2 * made:
            break  # (few blocks of long iterations: as long as it should be)
        shutil.rmtree(path.parent)
    return calibration, path


def main(argv: list[str]) -> int:
    backend, num_envs, fused_steps, iterations, device = argv
    try:
        collect_loop(backend, int(num_envs), int(fused_steps), int(iterations), device)
    except SkipRun as skip:
        print(skip, file=sys.stderr)
        return SKIPPED_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
