"""`rlscope doctor`: what rlscope can use on this machine, checked before a long run.

Each check says what it found, and for a failure, the fix. A check belongs to a scale: ``quick``
needs only the CPU side (Python, the native modules, the CartPole and RL packages); ``full`` also
needs the GPU side (driver, libcupti, CUPTI allowed to trace, NVML). Optional pieces (a simulator,
CuPy, JAX on the GPU) are reported but never fail the doctor: the runs that need them are
recorded as skipped, with the same fix.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import platform
import subprocess
import sys
from collections.abc import Callable

from rlscope.nvidia import NvmlUnavailable, gpu_names_and_driver, nvml

__all__ = ["Check", "run_checks", "failures", "SCALES"]

SCALES = ("quick", "full")


@dataclasses.dataclass(frozen=True)
class Check:
    """One finding: ``ok`` None for optional pieces that are missing (a warning, not a failure)."""

    name: str
    ok: bool | None
    detail: str
    fix: str = ""
    scale: str = "quick"  # the scale that needs it; "optional": none does


def _module(name: str, fix: str, scale: str = "quick", label: str | None = None) -> Check:
    label = label or name
    if importlib.util.find_spec(name) is None:
        return Check(label, False if scale != "optional" else None, "not installed", fix, scale)
    try:
        module = importlib.import_module(name)
    except Exception as err:  # a broken install is a finding, whatever it raises
        return Check(label, False if scale != "optional" else None, f"fails to import: {err}", fix, scale)
    return Check(label, True, getattr(module, "__version__", "importable"), "", scale)


def _python() -> list[Check]:
    version = platform.python_version()
    if sys.version_info < (3, 11):
        return [Check("Python", False, version, "rlscope needs Python 3.11 or newer")]
    hook = ("sys.monitoring: every call into native code is seen" if sys.version_info >= (3, 12) else
            "setprofile: calls into nanobind, ufunc and Cython callables (jaxlib, numpy's ufuncs, ale-py) are "
            "not seen, and the tables mark the rows this falsifies; Python 3.12+ sees them")
    return [Check("Python", True, f"{version} ({sys.executable}); transitions via {hook}")]


def _native() -> list[Check]:
    rebuild = "reinstall rlscope (`make install`, or `pip install -e .`) with a C++17 compiler and CMake"
    checks = [_module(f"rlscope.{name}", rebuild, label=f"native module {name}")
              for name in ("_hotpath", "_cartpole_cpu")]
    cupti = _module("rlscope._cupti", "install the CUDA headers (a CUDA toolkit, or pip's with 'rlscope[gpu]') "
                    "and reinstall rlscope", scale="full", label="native module _cupti")
    return [*checks, cupti]


def _packages() -> list[Check]:
    return [
        _module("torch", "pip install 'rlscope[rl]'"),
        _module("gymnasium", "pip install 'rlscope[rl]'"),
        _module("stable_baselines3", "pip install 'rlscope[rl]'"),
        _module("jax", "pip install 'rlscope[jax]'"),
        _module("mujoco", "pip install 'rlscope[sims]'", scale="optional", label="mujoco (simulator)"),
        _module("ale_py", "pip install 'rlscope[sims]'", scale="optional", label="ale-py (simulator)"),
        _module("cupy", "pip install 'rlscope[gpu]' (CUDA CartPole kernels)", scale="optional"),
    ]


_PROBE = """
import json, sys, tempfile, warnings
import rlscope
from rlscope.errors import RlscopeError
out = {}
with tempfile.TemporaryDirectory() as d, warnings.catch_warnings(record=True):
    warnings.simplefilter("always")
    try:
        with rlscope.profile(d, process="doctor", gpu=True):
            pass
        import pathlib
        meta = json.loads(next(pathlib.Path(d).glob("*/meta.json")).read_text())
        out = meta.get("gpu", {})
    except RlscopeError as err:
        out = {"status": "error", "reason": str(err)}
print(json.dumps(out, default=str))
"""


def _gpu(probe: Callable[[], dict]) -> list[Check]:
    from rlscope.nvidia import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is not None:
        return [Check("GPU and driver", False, reason, "full scale needs an NVIDIA GPU and driver; quick runs on the "
                      "CPU", scale="full")]
    checks = [Check("GPU and driver", True, _gpu_names(), scale="full")]
    result = probe()
    traced = result.get("status") == "on"
    detail = (f"permitted; libcupti {result.get('libcupti')} (CUPTI {result.get('cupti_version')})" if traced
              else str(result.get("reason", result)))
    checks.append(Check("CUPTI tracing (libcupti found, one session subscribed)", traced, detail,
                        "" if traced else "the message above says what to do", "full"))
    checks.append(_nvml())
    checks.append(_jax_gpu())
    return checks


def _gpu_names() -> str:
    try:
        names, driver = gpu_names_and_driver()
    except NvmlUnavailable:  # names are a nicety; the driver was found either way
        return "present"
    return f"{', '.join(names)}; driver {driver}"


def _nvml() -> Check:
    try:
        with nvml() as pynvml:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            try:
                gpm = bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
            except (pynvml.NVMLError, AttributeError):  # GPM needs Hopper or later and a recent driver
                gpm = False
    except NvmlUnavailable as why:
        fix = "pip install 'rlscope[gpu]'" if not why.installed else "check the NVIDIA driver"
        return Check("NVML (utilisation)", False, str(why), fix, "full")
    return Check("NVML (utilisation)", True, "GPM SM activity " + ("available" if gpm else "not supported here"),
                 scale="full")


def _jax_gpu() -> Check:
    try:
        import jax

        devices = [d for d in jax.devices() if d.platform == "gpu"]
    except Exception as err:  # no jax, or no GPU plugin: optional either way
        return Check("JAX on the GPU", None, f"no ({err})", "pip install 'jax[cuda13]'", "optional")
    return Check("JAX on the GPU", bool(devices) or None, f"{len(devices)} GPU device(s)",
                 "" if devices else "pip install 'jax[cuda13]'", "optional")


_PROBE_TIMEOUT_S = 120


def _probe_cupti() -> dict:
    """Subscribe once, in a process of its own: CUPTI must not stay attached to the doctor."""
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"status": "error", "reason": f"the probe hung for {_PROBE_TIMEOUT_S} s (a driver or CUPTI call "
                                             f"that never returned); check `nvidia-smi` answers"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"status": "error", "reason": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"status": "error", "reason": f"the probe printed {lines[-1][:120]!r}, not its JSON verdict"}


def run_checks(scale: str = "quick", probe: Callable[[], dict] = _probe_cupti) -> list[Check]:
    """Every check; the GPU ones too at ``full`` scale, or wherever a GPU is visible."""
    from rlscope.nvidia import gpu_unavailable_reason

    checks = [*_python(), *_native(), *_packages()]
    if scale == "full" or gpu_unavailable_reason() is None:
        checks += _gpu(probe)
    return checks


def failures(checks: list[Check], scale: str) -> list[Check]:
    """The checks that fail what ``scale`` needs (optional pieces and larger scales' never count)."""
    needed = SCALES[:SCALES.index(scale) + 1]
    return [c for c in checks if c.ok is False and c.scale in needed]
