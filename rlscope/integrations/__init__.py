"""Annotate RL frameworks with rlscope's operations through their own extension points
(callbacks, environment wrappers, module hooks), without forking them: ``rlscope.integrations.sb3``."""

import importlib

INTEGRATIONS = ("sb3",)
# The phases an integration's training is split into; a workload annotated by hand (the jitted PPO)
# uses the same names, so that results read them alike. Here, where no framework is imported.
DATA_COLLECTION, TRAINING = "data_collection", "training"


def __getattr__(name: str) -> object:
    """Each integration is imported when first named: it imports its framework (SB3 imports torch)."""
    if name in INTEGRATIONS:
        return importlib.import_module(f"rlscope.integrations.{name}")
    raise AttributeError(f"module 'rlscope.integrations' has no attribute {name!r}; integrations: "
                         f"{', '.join(INTEGRATIONS)}")
