"""What recording with CUPTI leaves on every later CUDA call of a process, measured per call.

Once CUPTI has recorded API calls in a process, each CUDA call there costs more, recorded or
not, until ``cuptiFinalize`` detaches CUPTI. Calibration's unprofiled windows all follow a
recording, so the CUDA API cost it measures between windows lacks that part, while a profiled
process against an uninstrumented one pays it on every call. Detaching between windows would
remove it, but detaching and attaching again hundreds of times can crash processes whose other
threads call CUDA on their own (XLA's).

So it is measured here, in a process of rlscope's own with one thread: cheap CUDA calls timed
in tight loops, alternately with CUPTI detached and right after a recording (every activity
kind then off, as in calibration's unprofiled windows), detaching after each. Per cycle, the
time per call after recording less the mean of the detached probes either side of it; the
median over cycles and its 95% interval (``median_ci95``). Calibration adds the launch's to its
CUDA API cost (``add_residual``, ``Calibration.cupti_residual_ns``).

    python -m rlscope.calibrate.residual OUT.json [--cycles N] [--calls N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rlscope.calibrate.stats import median_ci95
from rlscope.collect.gpu_layers import QUERY_APIS
from rlscope.nvidia import libcupti_candidates, nvidia_library_candidates
from rlscope.errors import RlscopeError

__all__ = ["measure_residual", "measure_residual_run", "libcudart_candidates", "CYCLES", "CALLS"]

CYCLES = 24  # detached / recorded probe pairs: enough for a distribution-free 95% interval of the median
CALLS = 20000  # calls per probe: long against the clock's resolution, short against the machine's drift
RESIDUAL_TIMEOUT_S = 300.0


def libcudart_candidates() -> list[str]:
    """Where the CUDA runtime may be, best first: the nvidia-cuda-runtime wheel (torch's), the
    CUDA toolkit, then the loader's search path."""
    return nvidia_library_candidates("libcudart", ("cu13/lib", "cuda_runtime/lib"), ("lib64",))


def measure_residual(cycles: int = CYCLES, calls: int = CALLS,
                     progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Time each probe call (``rlscope._cupti.probe_calls``) with CUPTI detached and right after a
    recording, ``cycles`` times; returns ``{"probes": {name: {"residual_ns", "ci95_ns",
    "detached_ns", "recorded_ns"}}, "cycles", "calls", "libcupti", "libcudart"}``.

    Raises RlscopeError where rlscope has no CUPTI collector, or CUPTI cannot record or does not
    detach."""
    try:
        from rlscope import _cupti
    except ImportError as err:
        raise RlscopeError("rlscope was built without the CUPTI collector (rlscope._cupti): no CUDA headers at "
                           "install time; install them (a CUDA toolkit, or pip's with 'rlscope[gpu]') and "
                           "reinstall rlscope") from err

    library = _cupti.load(libcupti_candidates())
    cudart = _cupti.probe_open(libcudart_candidates())
    detached: list[dict[str, float]] = []
    recorded: list[dict[str, float]] = []
    _cupti.probe_calls(calls)  # warm-up: the first launches load the module onto the GPU
    detached.append(_cupti.probe_calls(calls))
    with tempfile.TemporaryDirectory(prefix="rlscope-residual-") as scratch:
        tracer = _cupti.Tracer(str(Path(scratch) / "gpu.rows"), str(Path(scratch) / "gpu.names"))
        for cycle in range(cycles):
            started = tracer.start(runtime=True, driver=True, gpu=True, untraced_apis=list(QUERY_APIS))
            if not started["ok"]:
                raise RlscopeError(f"CUPTI could not record for the residual probe ({started['step']}: "
                                   f"{started['error']}); stop any other profiler of this process")
            _cupti.probe_calls(calls // 10)  # recorded calls, as a profiled window makes
            tracer.record(api=False, gpu=False)
            recorded.append(_cupti.probe_calls(calls))
            tracer.stop()  # detaches CUPTI before it returns
            if tracer.stats()["cupti_attached"]:
                raise RlscopeError("CUPTI did not detach after the residual probe's recording; "
                                   "the residual cannot be measured here")
            detached.append(_cupti.probe_calls(calls))
            if progress is not None and (cycle + 1) % 8 == 0:
                progress(f"CUPTI residual probe: {cycle + 1}/{cycles} cycles")
    probes: dict[str, Any] = {}
    for name in detached[0]:
        residuals = [r[name] - (before[name] + after[name]) / 2
                     for r, before, after in zip(recorded, detached, detached[1:])]
        residual, half = median_ci95(residuals)
        probes[name] = {"residual_ns": residual, "ci95_ns": half,
                        "detached_ns": float(np.median([d[name] for d in detached])),
                        "recorded_ns": float(np.median([r[name] for r in recorded]))}
    return {"probes": probes, "cycles": cycles, "calls": calls, "libcupti": library, "libcudart": cudart}


def measure_residual_run(run_dir: Path, timeout_s: float) -> tuple[dict[str, Any] | None, str]:
    """Run ``python -m rlscope.calibrate.residual`` in ``run_dir``: its result, or None and
    why it failed (with its log)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log, result = run_dir / "log.txt", run_dir / "residual.json"
    with log.open("w") as out:
        try:
            code = subprocess.run([sys.executable, "-m", "rlscope.calibrate.residual", str(result)], stdout=out,
                                  stderr=subprocess.STDOUT, timeout=min(timeout_s, RESIDUAL_TIMEOUT_S)).returncode
        except subprocess.TimeoutExpired:
            code = None
    if code == 0 and result.exists():
        return json.loads(result.read_text()), ""
    why = "timed out" if code is None else f"exit code {code}"
    return None, f"CUPTI residual probe: {why}; log: {log}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="where to write the result (JSON)")
    parser.add_argument("--cycles", type=int, default=CYCLES)
    parser.add_argument("--calls", type=int, default=CALLS)
    args = parser.parse_args()
    try:
        result = measure_residual(args.cycles, args.calls, progress=lambda m: print(m, file=sys.stderr))
    except (RlscopeError, RuntimeError) as err:
        sys.exit(f"rlscope: {err}")
    args.out.write_text(json.dumps(result, indent=1))
    for name, probe in result["probes"].items():
        half = "n/a" if probe["ci95_ns"] is None else f"{probe['ci95_ns']:.0f}"
        print(f"{name:>14}: detached {probe['detached_ns']:7.0f} ns, after recording {probe['recorded_ns']:7.0f} ns, "
              f"residual {probe['residual_ns']:+6.0f} ± {half} ns per call")


if __name__ == "__main__":
    main()
