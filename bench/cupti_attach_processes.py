"""How fast one fresh process runs a CUDA loop, with CUPTI never attached, attached before the
CUDA context exists and idle (every activity kind off), or recording.

A profiled process attaches CUPTI before the framework creates its context, which
``bench/cupti_idle.py`` (attaching after) does not cover; and on the lent H100 host identical
processes ran at different speeds, so this also prints a pure-Python loop's speed and the SM
clock NVML saw, to tell an interpreter-side difference from a CUDA-path one:

    for r in 1 2 3 4 5 6 7 8; do for s in never idle recording; do
      python bench/cupti_attach_processes.py $s; done; done

One JSON line: median ns per pure-Python loop iteration (``python_loop``), per launch of
``x.add_(1)`` in blocks of 2000 (``launch``), per launch plus ``torch.cuda.synchronize()``
(``sync``), and the SM clock's min/median/max in MHz. Needs a CUDA GPU and nvidia-ml-py.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from cupti_idle import launch_blocks  # this folder: python puts the script's own first on sys.path


def python_loop() -> float:
    t0 = time.perf_counter_ns()
    total = 0
    for i in range(200_000):
        total += i
    return (time.perf_counter_ns() - t0) / 200_000


def main() -> None:
    state = sys.argv[1]
    if state not in ("never", "idle", "recording"):
        raise SystemExit(f"cupti_attach_processes: state {state!r}; use never, idle or recording")
    tracer = None
    if state != "never":  # before torch creates the context, as rlscope.profile() does
        from rlscope import _cupti
        from rlscope.collect.cupti import QUERY_APIS, libcupti_candidates

        _cupti.load(libcupti_candidates())
        scratch = Path(tempfile.mkdtemp())
        tracer = _cupti.Tracer(str(scratch / "rows"), str(scratch / "names"))
        result = tracer.start(runtime=True, driver=True, gpu=True, untraced_apis=list(QUERY_APIS))
        if not result["ok"]:
            raise SystemExit(f"cupti_attach_processes: CUPTI did not start ({result['step']}: {result['error']})")
    import pynvml
    import torch

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    clocks: list[int] = []
    stop = threading.Event()

    def sample_clock() -> None:
        while not stop.wait(0.05):
            clocks.append(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))

    out: dict[str, list[float]] = {"python_loop": [python_loop() for _ in range(20)], "launch": [], "sync": []}
    x = torch.zeros(1, device="cuda")
    launch_blocks(x, 20, 2000)  # warm-up
    if tracer is not None and state == "idle":
        tracer.record(api=False, gpu=False)
    threading.Thread(target=sample_clock, daemon=True).start()
    out["launch"] = launch_blocks(x, 40, 2000)
    out["sync"] = launch_blocks(x, 25, 200, synchronise_each=True)
    stop.set()
    if tracer is not None:
        tracer.stop()
    print(json.dumps({"state": state, **{k: round(statistics.median(v), 1) for k, v in out.items()},
                      "sm_mhz": [min(clocks), round(statistics.median(clocks)), max(clocks)] if clocks else None}))


if __name__ == "__main__":
    main()
