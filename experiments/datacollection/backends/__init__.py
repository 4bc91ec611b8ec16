"""CartPole backends behind one interface, and the registry the workloads pick them from."""

from experiments.datacollection.backends.base import (
    BACKENDS,
    CartPoleBackend,
    Transition,
    make_backend,
    register,
)

__all__ = ["BACKENDS", "CartPoleBackend", "Transition", "make_backend", "register"]
