"""rlscope: where deep-RL training time goes, across Python, ML backends, CUDA and the GPU."""

__version__ = "0.1.0"

__all__ = ["__version__"]
