"""rlscope: where deep-RL training time goes, across Python, ML backends, CUDA and the GPU."""

from rlscope.api import enabled, operation, profile, set_phase, step

__version__ = "0.1.0"

__all__ = ["__version__", "enabled", "operation", "profile", "set_phase", "step"]
