"""GPU collection: CUDA API calls, kernels, copies and memsets through the native CUPTI tracer.

The native module (``rlscope._cupti``, ``csrc/cupti``) decodes CUPTI activity buffers on
CUPTI's own thread and writes rows to ``gpu.rows`` / ``gpu.names`` beside the process's events,
so the GIL is never taken for GPU records. This module starts and stops that tracer (what it
traces: ``gpu_layers``; where libcupti is and whether a GPU is there: ``rlscope.nvidia``), turns
CUPTI's failures into messages a user can act on, and wires the operation recorder's enter/exit
to CUPTI external correlation ids.

A machine without a GPU is not an error: profiling goes on CPU-only with one warning.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from rlscope.collect.environment import ENV_GPU, number_from_env
from rlscope.collect.gpu_layers import DEFAULT_GPU_LAYERS, QUERY_APIS, api_source
from rlscope.errors import RlscopeError
from rlscope.nvidia import ENV_LIBCUPTI, gpu_unavailable_reason, libcupti_candidates
from rlscope.trace.schema import GPU_NAMES_FILE, GPU_ROWS_FILE

__all__ = ["GpuCollector", "GpuCollectorError", "GpuUnavailableWarning", "buffer_bytes_from_env", "FULL_BUFFER_BYTES",
           "SAMPLED_BUFFER_BYTES", "ENV_BUFFER_KIB"]

ENV_DUMP = "RLSCOPE_CUPTI_DUMP_DIR"  # also save raw activity buffers there (decoder test fixtures)
ENV_BUFFER_KIB = "RLSCOPE_CUPTI_BUFFER_KIB"  # the size of CUPTI's activity buffers, over the session's choice
# CUPTI asks for an activity buffer on the thread whose record needs one, and a request takes
# longer the larger the buffer (CUPTI's overhead records: docs/results/sampled.md). A full trace
# fills each buffer, so that is paid once per buffer of records. A sampled window writes far less
# than a buffer and starts on fresh ones (the flusher hands CUPTI's buffers over between windows),
# so its first records wait for requests inside the window's operations; sampled runs with 8 MiB
# buffers missed the full traces' shares where the same runs with 256 KiB agreed.
FULL_BUFFER_BYTES = 8 << 20
SAMPLED_BUFFER_BYTES = 256 << 10
_CUPTI_ERROR_INSUFFICIENT_PRIVILEGES = 35
_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS = 39


class GpuCollectorError(RlscopeError):
    """CUPTI refused to trace for a reason the user can fix."""


class GpuUnavailableWarning(UserWarning):
    """No GPU collection in this process (no GPU, no driver, no libcupti); CPU profiling goes on."""


def _likely_culprit() -> str:
    """Name the other CUPTI client as well as we can guess it."""
    if any(k.startswith("NSYS_") for k in os.environ) or "CUDA_INJECTION64_PATH" in os.environ:
        return "Nsight Systems / Nsight Compute (CUDA_INJECTION64_PATH or NSYS_* is set)"
    torch = sys.modules.get("torch")
    profiler = getattr(getattr(torch, "autograd", None), "profiler", None)
    if profiler is not None and getattr(profiler, "_is_profiler_enabled", False):
        return "torch.profiler (a profile is running)"
    if torch is not None:
        return "torch.profiler, probably: once it has profiled, it keeps CUPTI until the process exits"
    if "jax" in sys.modules:
        return "jax.profiler, if a trace or profiler server is running"
    return "another profiler in this process (torch.profiler, jax.profiler, Nsight)"


def buffer_bytes_from_env(chosen: int) -> int:
    """``chosen``, or the size ``RLSCOPE_CUPTI_BUFFER_KIB`` asks for (KiB, a whole number from 4 to 2**20)."""
    kib = number_from_env(ENV_BUFFER_KIB, int, lambda v: 4 <= v <= 1 << 20,
                          f"CUPTI's activity buffer size in KiB, a whole number from 4 to {1 << 20} (e.g. 256); "
                          f"unset it for the session's choice ({chosen >> 10} KiB)")
    return chosen if kib is None else int(kib) << 10


class GpuCollector:
    """One process's CUPTI tracer; ``start`` returns False (with a warning) when there is no GPU."""

    def __init__(self, directory: Path, layers: frozenset[str] = DEFAULT_GPU_LAYERS,
                 buffer_bytes: int = FULL_BUFFER_BYTES) -> None:
        self.directory = directory
        self.layers = layers
        self.buffer_bytes = buffer_bytes
        self.meta: dict[str, Any] = {"collector": "cupti", "status": "off"}
        self._tracer: Any = None
        self._ops: Any = None
        self.library: str | None = None  # path of the libcupti in use, once loaded

    def start(self, operations: Any) -> bool:
        """Trace GPU activity from now on and attribute it to ``operations``' innermost entry."""
        reason = self._unavailable()
        if reason is not None:
            self.meta.update(status="unavailable", reason=reason)
            warnings.warn(f"rlscope: no GPU collection ({reason}); profiling the CPU side only",
                          GpuUnavailableWarning, stacklevel=3)
            return False
        from rlscope import _cupti

        dump = os.environ.get(ENV_DUMP, "")
        if dump:
            Path(dump).mkdir(parents=True, exist_ok=True)
        source = api_source()
        tracer = _cupti.Tracer(str(self.directory / GPU_ROWS_FILE), str(self.directory / GPU_NAMES_FILE),
                               buffer_bytes=self.buffer_bytes, dump_dir=dump)
        result = tracer.start(runtime="runtime" in self.layers, driver="driver" in self.layers,
                              gpu="kernels" in self.layers, sync="sync" in self.layers,
                              untraced_apis=[] if "queries" in self.layers else list(QUERY_APIS),
                              api_callbacks=source == "callbacks", nvtx="nvtx" in self.layers)
        if not result["ok"]:
            self._fail(result)
            return False
        self._tracer, self._ops = tracer, operations
        operations.set_correlation_hooks(tracer.hooks())
        clock = "CLOCK_MONOTONIC" if result["own_clock"] else "CUPTI's, offset onto CLOCK_MONOTONIC at start"
        self.meta.update(status="on", libcupti=self.library, cupti_version=_cupti.version(),
                         layers=sorted(self.layers), api_source=source, buffer_bytes=self.buffer_bytes,
                         clock=clock, rows=GPU_ROWS_FILE,
                         names=GPU_NAMES_FILE)
        return True

    def stop(self) -> dict[str, Any]:
        """Flush CUPTI, write the last rows and let go of CUPTI: it is detached (``cuptiFinalize``,
        at the exit of one cheap driver call the tracer makes) before this returns, so the process
        runs as fast as before it was profiled (disabling and unsubscribing alone leave every later
        CUDA call slower) and another CUPTI client can start. Returns the collector's meta entry."""
        if self._tracer is not None:
            self._ops.set_correlation_hooks(None)
            self.meta.update(self._tracer.stop())
            self._tracer = self._ops = None
        return self.meta

    def record(self, api: bool, gpu: bool) -> None:
        """Stop or resume recording CUDA API calls and GPU activities (calibration's alternating
        windows, sampled windows); recording neither turns every activity kind off and keeps CUPTI
        attached: detaching and attaching it again at every switch is not safe in JAX processes.
        Only the layers started with come back."""
        if self._tracer is not None:
            self._tracer.record(api=api, gpu=gpu)

    def abandon(self) -> None:
        """In a forked child: the parent's CUPTI state is not ours to touch."""
        if self._tracer is not None:
            self._tracer.abandon()
            self._tracer = self._ops = None

    @property
    def active(self) -> bool:
        return self._tracer is not None

    def _unavailable(self) -> str | None:
        try:
            _cupti = importlib.import_module("rlscope._cupti")
        except ImportError:
            return "rlscope was built without the CUPTI collector: no CUDA headers at install time"
        reason = gpu_unavailable_reason()
        if reason is not None:
            return reason
        try:
            self.library = _cupti.load(libcupti_candidates())
        except RuntimeError as err:
            return f"{err}; install nvidia-cuda-cupti or set {ENV_LIBCUPTI}"
        return None

    def _fail(self, result: dict[str, Any]) -> None:
        code, error = result["code"], result["error"]
        if code == _CUPTI_ERROR_MULTIPLE_SUBSCRIBERS:
            holder = result["subscriber"]
            if not holder or "not provided" in holder:  # clients that did not name themselves
                holder = _likely_culprit()
            raise GpuCollectorError(
                f"CUPTI is already in use by {holder}: only one CUPTI client can trace a process. "
                f"Stop the other profiler, or profile without GPU collection ({ENV_GPU}=0 / --no-gpu)")
        if code == _CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
            raise GpuCollectorError(
                "CUPTI: insufficient privileges to trace the GPU (the driver restricts profiling to admin "
                "users). Fix: run as root, or set the driver option NVreg_RestrictProfilingToAdminUsers=0 "
                "(e.g. `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in /etc/modprobe.d/, then reboot); "
                "in Docker, start the container with --cap-add SYS_ADMIN")
        self.meta.update(status="unavailable", reason=f"{result['step']}: {error}")
        warnings.warn(f"rlscope: CUPTI could not start ({result['step']}: {error}); profiling the CPU side only",
                      GpuUnavailableWarning, stacklevel=3)
