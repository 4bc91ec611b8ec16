"""Profile a whole process from interpreter start, as the environment of `rlscope prof` asks
(called by ``bootstrap/sitecustomize``)."""

from __future__ import annotations

import atexit
import os
from pathlib import Path

from rlscope import _hotpath, recorder
from rlscope.collect.environment import ENV_DIRECTORY, ENV_PROCESS, ENV_UNTIL_FIRST_STEP, ENV_WALL_ONLY
from rlscope.collect.session import WallClock, start_session

__all__ = ["start_from_environment"]


def start_from_environment() -> None:
    """Profile this whole process into $RLSCOPE_DIR, unless it is profiled already."""
    directory = os.environ.get(ENV_DIRECTORY)
    if not directory or recorder.bound() is not None:
        return
    if os.environ.get(ENV_WALL_ONLY) == "1":  # uninstrumented: annotations stay no-ops
        clock = WallClock(Path(directory), os.environ.get(ENV_PROCESS),
                          until_first_step=os.environ.get(ENV_UNTIL_FIRST_STEP) == "1")
        _hotpath.bind_step(callback=clock.first_step)
        atexit.register(clock.stop)
        return
    recorder.bind(start_session(Path(directory)))
    atexit.register(recorder.stop_at_exit)
