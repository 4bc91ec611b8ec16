"""Do a host's slow spells show on a probe that runs beside the workload, on a core of its own?

On the lent H100 hosts identical uninstrumented runs of one workload took 27-52 s, and a
validation's corrected error follows its raw error with correlation 0.99: the whole-run check
there measures the host more than the correction. If the spells slow the whole host (clock,
memory, a neighbour), a fixed piece of work timed over and over beside each run sees them too,
and each run's time divided by the probe's pace during it would scatter less. If the probe's
pace does not follow the runs, the spells are the workload's own (its core, its GPU path) and
no such normalisation can help. This measures which, for runs in the given order:

    python bench/host_speed_probe.py OUT jax_loop 500000 UPUUPUUPU

``U`` is an uninstrumented run (``python -m experiments.overhead.loops``), ``P`` the same under
``rlscope prof --no-analyze``. The probe (pure Python, ~1 ms a piece) is pinned to the last
CPU and the runs to the others, where the machine has more than two. It prints each run's time
and the probe's median piece during it, then the spread of the uninstrumented runs, raw and
normalised, and each ``UPU`` triple's profiled excess, raw and normalised. The probe's pieces
(end ns, duration ns) are kept in ``OUT/pieces.json``, each run's seconds and the probe's median
piece during it in ``OUT/probe.json``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
from multiprocessing.synchronize import Event
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

MODES = {"U": [], "P": ["rlscope", "prof", "--no-analyze"]}
PIECE = 20_000  # iterations of the probe's loop per timed piece: about 1 ms of one core


def probe(stop: Event, out: Path, cpu: int | None) -> None:
    """Time a fixed pure-Python piece of work until told to stop; write (end ns, duration ns)."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    pieces = []
    while not stop.is_set():
        started = time.perf_counter_ns()
        total = 0
        for i in range(PIECE):
            total += i * i
        ended = time.perf_counter_ns()
        pieces.append((ended, ended - started))
    out.write_text(json.dumps(pieces))


def spread_pct(values: np.ndarray) -> float:
    """Sample standard deviation as a percent of the mean."""
    return float(100 * values.std(ddof=1) / values.mean()) if len(values) > 1 else float("nan")


def main() -> None:
    if len(sys.argv) != 5 or set(sys.argv[4]) - set(MODES) or "U" not in sys.argv[4]:
        raise SystemExit(f"usage: python {sys.argv[0]} OUT WORKLOAD STEPS ORDER (letters U and P, at least one U)")
    out, workload, steps, order = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    out.mkdir(parents=True, exist_ok=True)
    cpus = sorted(os.sched_getaffinity(0))
    probe_cpu = cpus[-1] if len(cpus) > 2 else None  # on 2 cores the probe would take the workload's
    run_cpus = set(cpus[:-1]) if probe_cpu is not None else None
    stop = mp.Event()
    pieces_path = out / "pieces.json"
    prober = mp.Process(target=probe, args=(stop, pieces_path, probe_cpu))
    prober.start()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    spans = []
    try:
        for k, mode in enumerate(order, 1):
            prefix = MODES[mode] + (["--output", str(out / f"trace{k}"), "--"] if MODES[mode] else [])
            command = prefix + [sys.executable, "-m", "experiments.overhead.loops", workload, steps]
            started = time.perf_counter_ns()
            subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL,
                           preexec_fn=(lambda: os.sched_setaffinity(0, run_cpus)) if run_cpus else None)
            spans.append((mode, started, time.perf_counter_ns()))
            print(f"run {k} ({mode}): {(spans[-1][2] - started) / 1e9:.1f} s", flush=True)
    finally:
        stop.set()
        prober.join()
    pieces = np.asarray(json.loads(pieces_path.read_text()), dtype=np.int64)
    rows = []
    for k, (mode, start, end) in enumerate(spans, 1):
        during = pieces[(pieces[:, 0] > start) & (pieces[:, 0] <= end), 1]
        pace = float(np.median(during)) / 1e6 if len(during) else float("nan")
        rows.append({"run": k, "mode": mode, "seconds": (end - start) / 1e9, "probe_ms": pace, "pieces": len(during)})
        print(f"run {k} ({mode}): {rows[-1]['seconds']:.1f} s, probe {pace:.3f} ms per piece ({len(during)} pieces)")
    (out / "probe.json").write_text(json.dumps({"probe_cpu": probe_cpu, "piece_iterations": PIECE, "runs": rows}))

    seconds = np.array([r["seconds"] for r in rows])
    paces = np.array([r["probe_ms"] for r in rows])
    uninstrumented = np.array([r["mode"] == "U" for r in rows])
    u_s, u_p = seconds[uninstrumented], paces[uninstrumented]
    correlation = float(np.corrcoef(u_s, u_p)[0, 1]) if len(u_s) > 2 else float("nan")
    print(f"uninstrumented runs: {len(u_s)}, spread {spread_pct(u_s):.1f}% raw, {spread_pct(u_s / u_p):.1f}% "
          f"normalised by the probe; correlation of run time with probe pace {correlation:+.2f}")
    normalised = seconds / paces
    for k in range(1, len(order) - 1):
        if order[k - 1 : k + 2] == "UPU":
            raw_base, norm_base = seconds[[k - 1, k + 1]].mean(), normalised[[k - 1, k + 1]].mean()
            print(f"runs {k}-{k + 2} (UPU): profiled excess {100 * (seconds[k] / raw_base - 1):+.1f}% raw, "
                  f"{100 * (normalised[k] / norm_base - 1):+.1f}% normalised; uninstrumented runs "
                  f"{100 * abs(seconds[k - 1] - seconds[k + 1]) / raw_base:.1f}% apart raw, "
                  f"{100 * abs(normalised[k - 1] - normalised[k + 1]) / norm_base:.1f}% normalised")

if __name__ == "__main__":
    main()
