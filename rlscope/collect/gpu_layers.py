"""What GPU collection traces: the layers (runtime API, driver API, GPU activity, sync waits,
state queries), the API calls left out by default, and how API calls are recorded."""

from __future__ import annotations

import os

from rlscope.collect.environment import ENV_GPU
from rlscope.errors import RlscopeError

__all__ = ["GPU_LAYERS", "DEFAULT_GPU_LAYERS", "QUERY_APIS", "API_SOURCES", "ENV_API", "api_source",
           "parse_gpu_layers"]

# How CUDA API calls are recorded: "callbacks" (CUPTI's Callback API: the default, it costs the
# traced loop less; docs/results/gpu-collector.md) or "activity" (activity records, as CUPTI's own
# tracing does: what the callbacks are checked against).
ENV_API = "RLSCOPE_CUPTI_API"
API_SOURCES = ("callbacks", "activity")

# CUDA runtime API, driver API, GPU activity (kernels, copies, memsets); not by default: the
# CPU's synchronisation waits as separate records ("sync"), API calls that only query
# state ("queries", see QUERY_APIS) and NVTX ranges ("nvtx", jax-scopes' precise mode).
GPU_LAYERS = ("runtime", "driver", "kernels", "sync", "queries", "nvtx")
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
