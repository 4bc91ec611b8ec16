"""rlscope: where deep-RL training time goes, across Python, ML backends, CUDA and the GPU."""

from rlscope._version import __version__
from rlscope.api import enabled, operation, profile, set_phase, step

__all__ = ["__version__", "enabled", "operation", "profile", "set_phase", "step"]


def __getattr__(name: str) -> object:
    """``rlscope.integrations`` on first use, as the README writes it (``rlscope.integrations.sb3``),
    without importing any framework for a script that never asks."""
    if name == "integrations":
        import importlib

        return importlib.import_module("rlscope.integrations")
    raise AttributeError(f"module 'rlscope' has no attribute {name!r}")
