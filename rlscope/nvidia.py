"""The NVIDIA driver and libraries, looked up one way for every layer: whether this process can use
a GPU at all, NVML (nvidia-ml-py, optional: ``rlscope[gpu]``) opened and closed, the GPUs' names
and driver, and where CUDA's shared libraries are.

Nothing here initialises CUDA: a workload that forks after profiling starts must still be able to
use the GPU in its children.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["NvmlUnavailable", "gpu_unavailable_reason", "open_nvml", "nvml", "gpu_names_and_driver",
           "nvidia_library_candidates", "libcupti_candidates", "ENV_LIBCUPTI"]

ENV_LIBCUPTI = "RLSCOPE_LIBCUPTI"  # path of the libcupti to use


class NvmlUnavailable(Exception):
    """NVML cannot be used here; the message says why. ``installed``: whether nvidia-ml-py is."""

    def __init__(self, reason: str, installed: bool = True) -> None:
        super().__init__(reason)
        self.installed = installed


def gpu_unavailable_reason() -> str | None:
    """Why this process cannot have GPU activity, or None if a GPU and driver are there.

    Asks the driver's NVML library through ctypes (so it needs no Python package), not CUDA.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver (libcuda.so.1 not found)"
    try:
        library = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None  # a driver without NVML (unusual): let CUPTI decide
    count = ctypes.c_uint(0)
    if library.nvmlInit_v2() != 0:
        return "the NVIDIA driver did not initialise (nvmlInit failed)"
    try:
        if library.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0 or count.value == 0:
            return "no NVIDIA GPU found"
    finally:
        library.nvmlShutdown()
    return None


def open_nvml() -> Any:
    """The ``pynvml`` module, initialised; the caller calls ``nvmlShutdown()`` when done.
    Raises NvmlUnavailable (not installed, or no driver to initialise)."""
    try:
        import pynvml
    except ImportError as err:
        raise NvmlUnavailable("nvidia-ml-py not installed (pip install 'rlscope[gpu]')", installed=False) from err
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise NvmlUnavailable(f"NVML: {err}") from err
    return pynvml


@contextlib.contextmanager
def nvml() -> Iterator[Any]:
    """``pynvml`` initialised for the block; an NVML error inside it is NvmlUnavailable too."""
    pynvml = open_nvml()
    try:
        yield pynvml
    except pynvml.NVMLError as err:
        raise NvmlUnavailable(f"NVML: {err}") from err
    finally:
        pynvml.nvmlShutdown()


def gpu_names_and_driver() -> tuple[list[str], str]:
    """Every GPU's name (as NVML counts them, all of them) and the driver's version."""
    with nvml() as pynvml:
        names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                 for i in range(pynvml.nvmlDeviceGetCount())]
        driver = pynvml.nvmlSystemGetDriverVersion()
    return [_text(n) for n in names], _text(driver)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value  # older nvidia-ml-py returns bytes


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
