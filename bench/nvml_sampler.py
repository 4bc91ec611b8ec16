"""What sampling GPU utilisation costs a CUDA workload, measured side by side in one process.

A profiled process samples NVML on a thread throughout, so whatever that costs is in every
calibration window and seen by none. States, each round in a new random order, timed on a loop
of ``x.add_(1); torch.cuda.synchronize()`` (a round trip like an RL rollout's per-step
inference) and on a loop of launches:

- ``off``: no sampler;
- ``poll_100ms``: the current utilisation asked for every 100 ms (what rlscope did before);
- ``sampler``: rlscope's ``UtilisationSampler`` (the driver's samples fetched every 2 s).

    python bench/nvml_sampler.py ROUNDS OUT.json

Prints one JSON line per state: median ns per round trip and per launch, with distribution-free
95% intervals, and the difference from ``off``. Needs a CUDA GPU and nvidia-ml-py.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from cupti_idle import launch_blocks  # this folder: python puts the script's own first on sys.path

from rlscope.analyze.calibration import median_ci95
from rlscope.collect.nvml import UtilisationSampler

BLOCKS = 40  # per state and round, of each loop


def loops(x: Any) -> dict[str, list[float]]:
    return {"round_trip": launch_blocks(x, BLOCKS, 200, synchronise_each=True),
            "launch": launch_blocks(x, BLOCKS, 2000)}


class Poll100ms:
    """The previous sampler's NVML traffic: the current utilisation, every 100 ms."""

    def __init__(self) -> None:
        import pynvml

        self.nvml, self.stop_event = pynvml, threading.Event()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop_event.wait(0.1):
            self.nvml.nvmlDeviceGetUtilizationRates(self.handle)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join()


def main() -> None:
    import pynvml
    import torch

    rounds, out = int(sys.argv[1]), Path(sys.argv[2])
    pynvml.nvmlInit()
    x = torch.zeros(1, device="cuda")
    loops(x)  # warm-up
    scratch = Path(tempfile.mkdtemp())
    states = ["off", "poll_100ms", "sampler"]
    samples: dict[str, dict[str, list[float]]] = {s: {"round_trip": [], "launch": []} for s in states}
    rng = random.Random(0)
    for r in range(rounds):
        order = states[:]
        rng.shuffle(order)
        for state in order:
            running: Any = None
            if state == "poll_100ms":
                running = Poll100ms()
            elif state == "sampler":
                running = UtilisationSampler(scratch)
                if not running.start():
                    raise SystemExit(f"nvml_sampler: {running.meta}")
            for loop, values in loops(x).items():
                samples[state][loop] += values
            if running is not None:
                running.stop()
        print(f"  round {r + 1}/{rounds}", file=sys.stderr, flush=True)
    rows = []
    for state in states:
        row: dict[str, Any] = {"state": state}
        for loop, values in samples[state].items():
            median, half = median_ci95(values)
            reference = float(np.median(samples["off"][loop]))
            row.update({f"{loop}_ns": round(median), f"{loop}_ci95_ns": None if half is None else round(half),
                        f"{loop}_vs_off_pct": round(100 * (median - reference) / reference, 2)})
        rows.append(row)
        print(json.dumps(row), flush=True)
    out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
