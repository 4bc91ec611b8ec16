"""On a GPU machine: the CUPTI tracer's ``gpu.rows.crc`` and ``gpu.names.crc`` cover every row and
name it wrote and verify, and a profiled torch loop SIGKILLed 4 s in keeps its CPU and GPU events
up to its last time-bound write.

``OUT=DIR python bench/gpu_trace_check.py`` (needs torch with CUDA) writes ``DIR/gpu_check.json``,
the data behind docs/results/reliability_gpu.json.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

from rlscope.analyze.attribution import read_attributed
from rlscope.trace import Kind, read_process
from rlscope.trace.schema import GPU_CRC_RECORD

LOOP = '''
import sys, time, torch, rlscope
n = int(sys.argv[2])
x = torch.randn(512, 512, device="cuda")
torch.cuda.synchronize()
steps = open(sys.argv[3], "w", buffering=1)
with rlscope.profile(sys.argv[1], process="gpu_loop"):
    i = 0
    while not n or i < n:
        rlscope.step()
        steps.write(f"{i} {time.perf_counter_ns()}\\n")
        i += 1
        with rlscope.operation("work"):
            y = x @ x
            torch.cuda.synchronize()
        time.sleep(0.01)
'''


def finished(script: Path, out: Path) -> dict:
    """A run that ends: every write of gpu.rows has its record, and every record verifies."""
    subprocess.run([sys.executable, str(script), str(out / "done"), "300", str(out / "done.txt")], check=True)
    (proc_dir,) = [p.parent for p in (out / "done").glob("*/meta.json")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (proc,) = read_attributed(out / "done")
    crc = (proc_dir / "gpu.rows.crc").read_bytes()
    records = [GPU_CRC_RECORD.unpack_from(crc, i) for i in range(0, len(crc), GPU_CRC_RECORD.size)]
    names_crc = (proc_dir / "gpu.names.crc").read_bytes()
    name_records = [GPU_CRC_RECORD.unpack_from(names_crc, i) for i in range(0, len(names_crc), GPU_CRC_RECORD.size)]
    events = proc.events
    return {"gpu_meta": {k: proc.meta["gpu"].get(k) for k in ("status", "rows_written", "dropped", "buffers")},
            "crc_records": len(records), "rows_in_records": sum(r[1] for r in records),
            "rows_file": (proc_dir / "gpu.rows").stat().st_size // 72,
            "names_crc_records": len(name_records), "bytes_in_name_records": sum(r[1] for r in name_records),
            "names_file_bytes": (proc_dir / "gpu.names").stat().st_size,
            "kernels": int((events["kind"] == int(Kind.GPU_KERNEL)).sum()),
            "api": int((events["kind"] == int(Kind.CUDA_API)).sum())}


def killed(script: Path, out: Path) -> dict:
    """A run SIGKILLed 4 s after its first step: how much before the kill its trace ends."""
    steps = out / "killed.txt"
    child = subprocess.Popen([sys.executable, str(script), str(out / "killed"), "0", str(steps)])
    while not (steps.exists() and steps.stat().st_size):
        time.sleep(0.05)
    time.sleep(4.0)
    child.send_signal(signal.SIGKILL)
    child.wait()
    *_, recorded, last_ns = steps.read_text().split()
    (directory,) = [p.parent for p in (out / "killed").glob("*/meta.json")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = read_process(directory)
    gpu = trace.gpu
    kernels = gpu[gpu["kind"] == int(Kind.GPU_KERNEL)]
    api = gpu[gpu["kind"] == int(Kind.CUDA_API)]
    kept = trace.events[trace.events["kind"] == int(Kind.STEP)]

    def lost(frame) -> float | None:
        return (int(last_ns) - int(frame["end_ns"].max())) / 1e9 if len(frame) else None

    return {"recorded_steps": int(recorded), "kept_steps": len(kept), "kernels": len(kernels), "api_rows": len(api),
            "lost_s_cpu": lost(kept), "lost_s_gpu_kernels": lost(kernels), "lost_s_gpu_api": lost(api),
            "warnings": [str(w.message)[:160] for w in caught]}


def main() -> None:
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    script = out / "loop.py"
    script.write_text(LOOP)
    result = {"finished": finished(script, out), "killed": killed(script, out)}
    print(json.dumps(result, indent=1))
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
