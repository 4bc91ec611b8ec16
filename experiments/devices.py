"""The device a workload runs on, shared by every workload of the experiments."""

from __future__ import annotations

from rlscope.errors import SkipRun

__all__ = ["resolve_device"]


def resolve_device(device: str) -> str:
    """``auto`` picks CUDA when present; asking for CUDA without it skips the run with the reason."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SkipRun("needs a CUDA GPU; none is visible on this machine")
    return device
