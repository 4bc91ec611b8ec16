"""How `rlscope prof` and `rlscope calibrate` tell the processes they start what to record: the
environment variables a child process reads at interpreter start (``bootstrap/sitecustomize``);
and one way to read a number a user sets in the environment, with one clear error for a bad one.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from rlscope.errors import RlscopeError

__all__ = ["number_from_env",
           "ENV_DIRECTORY", "ENV_TRANSITIONS", "ENV_PROCESS", "ENV_TARGETS", "ENV_GPU", "ENV_WALL_ONLY",
           "ENV_UNTIL_FIRST_STEP", "ENV_WINDOWS", "ENV_SAMPLE", "ENV_JAX_SCOPES"]

ENV_DIRECTORY = "RLSCOPE_DIR"  # every Python process under it profiles itself into this directory
ENV_TRANSITIONS = "RLSCOPE_TRANSITIONS"  # "0": no Python->native transitions
ENV_PROCESS = "RLSCOPE_PROCESS"  # the process's name in results
ENV_TARGETS = "RLSCOPE_TARGETS"  # extra "module=backend|simulator,..." targets
ENV_GPU = "RLSCOPE_GPU"  # "0": no GPU collection (CUPTI, NVML); or a subset "runtime,driver,kernels"
ENV_WALL_ONLY = "RLSCOPE_WALL_ONLY"  # "1": record only this process's wall time (an uninstrumented baseline)
ENV_UNTIL_FIRST_STEP = "RLSCOPE_UNTIL_FIRST_STEP"  # "1": exit at the first rlscope.step() (a start-up run)
ENV_WINDOWS = "RLSCOPE_WINDOWS"  # "MS:LEVEL,...": switch layers on and off as the run goes (windows.py)
ENV_SAMPLE = "RLSCOPE_SAMPLE"  # "window=20,block=500,...": sampled windows for long runs (sampling.py)
ENV_JAX_SCOPES = "RLSCOPE_JAX_SCOPES"  # "default" or "precise": see inside jax.jit (jax_scopes.py)


def number_from_env(name: str, parse: Callable[[str], float], valid: Callable[[float], bool],
                    expected: str) -> float | None:
    """The number environment variable ``name`` holds (None: unset or blank); one that ``parse``
    cannot read or ``valid`` refuses is a ``RlscopeError`` that says what was ``expected``."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = parse(text)
    except ValueError:
        value = None
    if value is None or not valid(value):
        raise RlscopeError(f"{name}={text!r}: expected {expected}")
    return value
