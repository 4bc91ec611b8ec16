"""rlscope: where deep-RL training time goes, across Python, ML backends, CUDA and the GPU."""

from rlscope._version import __version__
from rlscope.api import enabled, operation, profile, set_phase, step

__all__ = ["__version__", "enabled", "operation", "profile", "set_phase", "step"]
