"""GPU collection: CUDA API calls, kernels, copies and memsets through the native CUPTI tracer.

The native module (``rlscope._cupti``, ``csrc/cupti``) decodes CUPTI activity buffers on
CUPTI's own thread and writes rows to ``gpu.rows`` / ``gpu.names`` beside the process's events,
so the GIL is never taken for GPU records. This module finds libcupti, decides whether a GPU
is there at all, turns CUPTI's failures into messages a user can act on, and wires the
operation recorder's enter/exit to CUPTI external correlation ids.

A machine without a GPU is not an error: profiling goes on CPU-only with one warning.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from rlscope.collect.environment import ENV_GPU
from rlscope.errors import RlscopeError
from rlscope.trace.schema import GPU_NAMES_FILE, GPU_ROWS_FILE

__all__ = ["GpuCollector", "GpuCollectorError", "GpuUnavailableWarning", "GPU_LAYERS", "QUERY_APIS",
           "API_SOURCES", "ENV_API", "api_source", "parse_gpu_layers",
           "libcupti_candidates", "nvidia_library_candidates", "gpu_unavailable_reason", "ENV_LIBCUPTI"]

ENV_LIBCUPTI = "RLSCOPE_LIBCUPTI"  # path of the libcupti to use
ENV_DUMP = "RLSCOPE_CUPTI_DUMP_DIR"  # also save raw activity buffers there (decoder test fixtures)
# How CUDA API calls are recorded: "callbacks" (CUPTI's Callback API: the default, it costs the
# traced loop less; docs/results/gpu-collector.md) or "activity" (activity records, as CUPTI's own
# tracing does: what the callbacks are checked against).
ENV_API = "RLSCOPE_CUPTI_API"
API_SOURCES = ("callbacks", "activity")

_CUPTI_ERROR_INSUFFICIENT_PRIVILEGES = 35
_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS = 39


# CUDA runtime API, driver API, GPU activity (kernels, copies, memsets); not by default: the
# CPU's synchronisation waits as separate records ("sync") and API calls that only query
# state ("queries", see QUERY_APIS).
GPU_LAYERS = ("runtime", "driver", "kernels", "sync", "queries")
DEFAULT_GPU_LAYERS = frozenset(("runtime", "driver", "kernels"))

# Calls frameworks make around every launch that only read state. CUPTI spends about a
# microsecond recording any API call, several times what these take, and they say nothing
# about where time goes; their few hundred nanoseconds count as backend time instead.
QUERY_APIS = (
    "cudaGetDevice", "cudaSetDevice", "cudaGetLastError", "cudaPeekAtLastError", "cudaStreamIsCapturing",
    "cudaStreamGetCaptureInfo", "cudaGetDeviceCount", "cudaDeviceGetAttribute", "cudaPointerGetAttributes",
    "cudaGetDeviceProperties", "cudaFuncGetAttributes", "cudaDriverGetVersion", "cudaRuntimeGetVersion",
    "cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxGetDevice", "cuCtxGetId", "cuDeviceGet", "cuDeviceGetAttribute",
    "cuDeviceGetCount", "cuDevicePrimaryCtxGetState", "cuPointerGetAttribute", "cuPointerGetAttributes",
    "cuStreamIsCapturing", "cuStreamGetCaptureInfo", "cuStreamGetCtx", "cuKernelGetName", "cuKernelGetFunction",
    "cuLibraryGetKernel", "cuFuncGetAttribute", "cuGetProcAddress", "cuGetErrorString", "cuDriverGetVersion",
)


def api_source() -> str:
    """How this process records CUDA API calls ($RLSCOPE_CUPTI_API, default "callbacks")."""
    source = os.environ.get(ENV_API, "callbacks")
    if source not in API_SOURCES:
        raise RlscopeError(f"{ENV_API}={source!r}: use one of {', '.join(API_SOURCES)}")
    return source


def parse_gpu_layers(value: bool | str | None) -> frozenset[str]:
    """What to trace on the GPU side: ``True``/``"1"``/None the default (runtime, driver,
    kernels), ``"all"`` also the query calls, ``False``/``"0"`` nothing, or a comma-separated
    subset of runtime, driver, kernels, sync, queries (e.g. "runtime,kernels")."""
    if value is None or value is True or value == "1":
        return DEFAULT_GPU_LAYERS
    if value == "all":
        return frozenset(GPU_LAYERS)
    if value is False or value in ("0", ""):
        return frozenset()
    layers = frozenset(v.strip() for v in str(value).split(",") if v.strip())
    unknown = sorted(layers - set(GPU_LAYERS))
    if unknown:
        raise RlscopeError(f"GPU tracing {value!r}: unknown layer(s) {', '.join(unknown)}; use 0, 1, or a comma-"
                           f"separated subset of {', '.join(GPU_LAYERS)}, or all (in {ENV_GPU} or profile(gpu=...))")
    return layers


class GpuCollectorError(RlscopeError):
    """CUPTI refused to trace for a reason the user can fix."""


class GpuUnavailableWarning(UserWarning):
    """No GPU collection in this process (no GPU, no driver, no libcupti); CPU profiling goes on."""


def nvidia_library_candidates(stem: str, wheel_dirs: tuple[str, ...], toolkit_dirs: tuple[str, ...]) -> list[str]:
    """Where the NVIDIA library ``stem`` (``libcupti``, ``libcudart``) may be, best first: the
    nvidia-* wheels on ``sys.path`` (the copies torch and jax load), the CUDA toolkit, then the
    loader's search path."""
    paths: list[str] = []
    for entry in sys.path:
        base = Path(entry or ".") / "nvidia"
        for sub in wheel_dirs:
            paths += sorted(str(p) for p in (base / sub).glob(f"{stem}.so*"))
    for home in filter(None, (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda")):
        for sub in toolkit_dirs:
            paths += sorted(str(p) for p in (Path(home) / sub).glob(f"{stem}.so.*"))
    paths += [f"{stem}.so.13", f"{stem}.so.12", f"{stem}.so"]
    return list(dict.fromkeys(paths))


def libcupti_candidates() -> list[str]:
    """Where libcupti may be, best first: $RLSCOPE_LIBCUPTI, then ``nvidia_library_candidates``
    (the nvidia-cuda-cupti wheel, the CUDA toolkit, the loader's search path)."""
    found = nvidia_library_candidates("libcupti", ("cu13/lib", "cuda_cupti/lib"),
                                      ("lib64", "extras/CUPTI/lib64", "lib"))
    return list(dict.fromkeys(filter(None, [os.environ.get(ENV_LIBCUPTI), *found])))


def gpu_unavailable_reason() -> str | None:
    """Why this process cannot have GPU activity, or None if a GPU and driver are there.

    Asks NVML, not CUDA: initialising CUDA here would break workloads that fork after
    profiling starts and use the GPU only in the children.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver (libcuda.so.1 not found)"
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None  # a driver without NVML (unusual): let CUPTI decide
    count = ctypes.c_uint(0)
    if nvml.nvmlInit_v2() != 0:
        return "the NVIDIA driver did not initialise (nvmlInit failed)"
    try:
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0 or count.value == 0:
            return "no NVIDIA GPU found"
    finally:
        nvml.nvmlShutdown()
    return None


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


class GpuCollector:
    """One process's CUPTI tracer; ``start`` returns False (with a warning) when there is no GPU."""

    def __init__(self, directory: Path, layers: frozenset[str] = DEFAULT_GPU_LAYERS) -> None:
        self.directory = directory
        self.layers = layers
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
        tracer = _cupti.Tracer(str(self.directory / GPU_ROWS_FILE), str(self.directory / GPU_NAMES_FILE), dump_dir=dump)
        result = tracer.start(runtime="runtime" in self.layers, driver="driver" in self.layers,
                              gpu="kernels" in self.layers, sync="sync" in self.layers,
                              untraced_apis=[] if "queries" in self.layers else list(QUERY_APIS),
                              api_callbacks=source == "callbacks")
        if not result["ok"]:
            self._fail(result)
            return False
        self._tracer, self._ops = tracer, operations
        operations.set_correlation_hooks(tracer.hooks())
        clock = "CLOCK_MONOTONIC" if result["own_clock"] else "CUPTI's, offset onto CLOCK_MONOTONIC at start"
        self.meta.update(status="on", libcupti=self.library, cupti_version=_cupti.version(),
                         layers=sorted(self.layers), api_source=source, clock=clock, rows=GPU_ROWS_FILE,
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
        windows); recording neither turns every activity kind off and keeps CUPTI attached,
        since detaching it at every switch crashed JAX processes. Only the layers started with
        come back."""
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
