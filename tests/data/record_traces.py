"""Record the small traces whose analysis tables tests/test_stored_traces.py keeps: a CPU one
(NumPy, here) and a GPU one (PyTorch on CUDA, on a GPU machine).

    python tests/data/record_traces.py cpu tests/data/traces/numpy_cpu
    python tests/data/record_traces.py gpu tests/data/traces/torch_cuda

Each runs a short loop of operations under `rlscope prof`. The GPU loop's backward pass runs on
PyTorch's autograd thread, and one iteration launches GPU work from a thread of its own, so the
trace holds GPU work launched outside any operation's thread as well as inside.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ITERATIONS = 20

CPU_LOOP = f"""
import threading
import numpy as np
import rlscope

rng = np.random.default_rng(0)
w = rng.standard_normal((32, 32))
state = rng.standard_normal((64, 32))
for i in range({ITERATIONS}):
    rlscope.step()
    with rlscope.operation("inference"):
        action = np.tanh(state @ w).argmax(axis=1)
    with rlscope.operation("simulation"):
        state = state * 0.99 + np.sin(action)[:, None] * 0.01
        if i == {ITERATIONS // 2}:
            worker = threading.Thread(target=lambda: np.linalg.svd(w))
            worker.start()
            worker.join()
    with rlscope.operation("backpropagation"):
        w -= 1e-3 * state.T @ (state @ w)
"""

GPU_LOOP = f"""
import threading
import torch
import rlscope

torch.manual_seed(0)
x = torch.randn(64, 32, device="cuda")
w = torch.randn(32, 32, device="cuda", requires_grad=True)
for i in range({ITERATIONS}):
    rlscope.step()
    with rlscope.operation("inference"):
        y = torch.tanh(x @ w)
    with rlscope.operation("backpropagation"):
        y.sum().backward()
        with torch.no_grad():
            w -= 1e-3 * w.grad
            w.grad = None
    with rlscope.operation("simulation"):
        obs = y.detach().cpu().numpy()
        if i == {ITERATIONS // 2}:
            worker = threading.Thread(target=lambda: (x @ x.T).sum().item())
            worker.start()
            worker.join()
torch.cuda.synchronize()
"""


def record(kind: str, out: Path) -> None:
    loop = {"cpu": CPU_LOOP, "gpu": GPU_LOOP}[kind]
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / f"{kind}_loop.py"
        script.write_text(loop)
        subprocess.run([sys.executable, "-m", "rlscope.cli", "prof", "--output", str(out), "--no-analyze", "--",
                        sys.executable, str(script)], check=True)


if __name__ == "__main__":
    record(sys.argv[1], Path(sys.argv[2]))
