"""CartPole backends behind one interface, and the registry the workloads make them from.

Each backend is a module of its own that imports its framework (torch, JAX, CuPy...) only when
used, so the registry names each one as ``module:Class``, as Python's entry points do, and imports
only the backend asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

from experiments.datacollection.backends.base import CartPoleBackend, Transition

__all__ = ["REGISTRY", "NAMES", "CartPoleBackend", "Transition", "backend_class", "make_backend"]

REGISTRY: dict[str, str] = {
    "cpp": "cpp:CppThreads",
    "cuda": "cuda:CudaKernels",
    "cuda_fused_policy": "cuda_fused_policy:CudaFusedPolicy",
    "gymnasium": "gymnasium_loop:GymnasiumLoop",
    "jax": "jax_vec:JaxVectorized",
    "numpy": "numpy_vec:NumpyVectorized",
    "torch": "torch_vec:TorchVectorized",
    "torch_graph": "torch_graph:TorchCudaGraph",
}
NAMES = sorted(REGISTRY)


def backend_class(name: str) -> type[CartPoleBackend]:
    """The backend registered as ``name``; unknown names list the known ones."""
    try:
        module, _, cls = REGISTRY[name].partition(":")
    except KeyError:
        raise ValueError(f"unknown CartPole backend {name!r}; known: {', '.join(NAMES)}") from None
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def make_backend(name: str, num_envs: int, seed: int = 0, **options: Any) -> CartPoleBackend:
    """Create the backend registered as ``name``."""
    return backend_class(name)(num_envs, seed, **options)
