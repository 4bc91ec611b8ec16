"""The annotation API: three lines in a training script.

    import rlscope
    with rlscope.profile("traces/ppo", process="trainer", phase="training"):
        for it in range(n):
            rlscope.step()
            with rlscope.operation("inference"):
                action = policy(obs)
            with rlscope.operation("simulation"):
                obs = env.step(action)

Operations nest; time is charged to the innermost one. With profiling off (no ``profile()``
and no ``rlscope prof``) every call is a cheap no-op, so annotations can stay in the code.
This module imports nothing heavy (step() lives in a small native module, so that it costs
one C call even under profiling): the session machinery loads only when profiling starts.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from rlscope import _hotpath, recorder
from rlscope.collect.environment import ENV_DIRECTORY
from rlscope.recorder import Recorder

__all__ = ["profile", "operation", "set_phase", "step", "enabled", "ENV_DIRECTORY"]


F = TypeVar("F", bound=Callable[..., Any])

_session: Recorder | None = None  # what annotations report to while profiling, else None
# step() is native (``rlscope._hotpath.step``) and reports to what ``_bind`` binds it to, apart
# from ``_session``: alternating windows switch annotations off for stretches of a run (``_session``
# None, exactly as unprofiled) while iterations must still be counted.
_bound: Recorder | None = None  # the session of this process, whether or not annotations are on just now


class _Operation:
    """A named operation: a context manager and a decorator (made by :func:`operation`)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> _Operation:
        session = _session
        if session is not None:
            session.enter(self.name)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        session = _session
        if session is not None:
            top = session.exit(self.name)
            if top is not None and exc_type is None:  # while unwinding, the error itself is the one to report
                session.nesting_error(self.name, top)

    def __call__(self, func: F) -> F:
        name = self.name

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            session = _session
            if session is None:
                return func(*args, **kwargs)
            session.enter(name)
            try:
                result = func(*args, **kwargs)
            except BaseException:
                session.exit(name)  # as in __exit__: the error itself is the one to report
                raise
            top = session.exit(name)
            if top is not None:
                session.nesting_error(name, top)
            return result

        return wrapper  # type: ignore[return-value]


_operations: dict[str, _Operation] = {}
_MAX_CACHED_NAMES = 4096


def operation(name: str) -> _Operation:
    """Charge the time inside to the operation ``name``: ``with rlscope.operation("inference"):``
    or ``@rlscope.operation("inference")``.

    Objects are reused per name (they hold nothing but the name), so an annotation costs no
    allocation; that keeps it cheap enough to leave in code that runs unprofiled.
    """
    op = _operations.get(name)
    if op is None:
        op = _Operation(name)
        if len(_operations) < _MAX_CACHED_NAMES:
            _operations[name] = op
    return op


def set_phase(name: str) -> None:
    """Start a new training phase (e.g. "data_collection", "training"); results are split by phase."""
    if _bound is not None:
        _bound.set_phase(name)


step = _hotpath.step  # Mark an iteration boundary, so results can be given per iteration.


def enabled() -> bool:
    """Whether this process is being profiled now."""
    return _bound is not None


@contextlib.contextmanager
def profile(directory: str | os.PathLike[str] | None = None, *, process: str | None = None,
            phase: str | None = None, transitions: bool | None = None,
            targets: dict[str, str] | None = None, gpu: bool | str | None = None,
            sample: bool | str | dict[str, int] | None = None,
            jax_scopes: bool | str | None = None) -> Iterator[None]:
    """Profile the block into ``directory``.

    ``targets`` adds modules whose calls count as transitions, e.g. ``{"mysim": "simulator"}``
    (prefix match on the module name; categories ``backend`` or ``simulator``). ``gpu=False``
    skips GPU collection (CUPTI and NVML); by default it runs wherever a GPU is visible, and
    ``gpu="runtime,kernels"`` traces a subset of runtime API, driver API and kernels/copies.
    ``sample=True`` (or ``"window=20,block=500,warmup=50,settle=2,budget=100,seed=1"``, or a dict of those)
    records everything only in windows of ``window`` iterations at random places (between them,
    how many iterations ran in what time), on average one per ``block``, from the first ``rlscope.step()``
    on: for long runs (``rlscope.collect.sampling``; ``rlscope analyze`` then estimates the
    shares with intervals).
    ``jax_scopes=True`` (or ``"precise"``) records what the analysis needs to split the GPU time of
    ``jax.jit`` calls by ``jax.named_scope`` (``rlscope.collect.jax_scopes``); profiling must then
    start before the process's first JAX computation.

    Under ``rlscope prof`` the process is already being profiled into the directory it chose:
    then this only names the process and phase. Without a directory and outside ``rlscope prof``
    the block runs unprofiled.
    """
    if _bound is not None:  # already profiled (rlscope prof, or an outer profile())
        for asked, option in ((sample, "sample"), (jax_scopes, "jax-scopes")):
            if asked:
                import warnings

                warnings.warn(f"rlscope.profile({option.replace('-', '_')}=...): this process is already profiled "
                              f"(rlscope prof, or an outer profile()), which decides that; use rlscope prof --{option}",
                              stacklevel=3)
        if process:
            _bound.rename(process)
        if phase:
            _bound.set_phase(phase)
        yield
        return
    directory = directory or os.environ.get(ENV_DIRECTORY)
    if directory is None:
        yield
        return
    from rlscope.collect.session import start_session

    spec = ",".join(f"{module}={category}" for module, category in (targets or {}).items())
    session = start_session(Path(directory), process, phase, transitions, spec, gpu, sample, jax_scopes)
    _bind(session)
    try:
        yield
    except BaseException:
        _bind(None)
        session.stop(check_nesting=False)  # the block's own error is the one to report
        raise
    _bind(None)
    session.stop()


def _bind(session: Recorder | None) -> None:
    """Make ``session`` (or nothing) the one that annotations and step() report to."""
    global _session, _bound
    _session = _bound = session
    if session is None:
        _hotpath.bind_step()
    else:
        session.bind_step()


def _annotate_into(session: Recorder | None) -> None:
    """Send annotations to ``session``, or with None make them no-ops, leaving step() as it is."""
    global _session
    _session = session


recorder.install(_bind, _annotate_into, lambda: _bound)


def _restart_in_child() -> None:
    """A forked child gets its own trace files.

    multiprocessing's fork children leave through os._exit (no atexit) after clearing the
    finalizers inherited from the parent, so the session is closed by a finalizer registered
    from multiprocessing's own after-fork hook.
    """
    session = _bound
    if session is None:
        return
    session.abandon_after_fork()
    _bind(session)  # the fork may have come while alternating windows had annotations off
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        mp_util.register_after_fork(session, _close_with_multiprocessing)


def _close_with_multiprocessing(session: Recorder) -> None:
    sys.modules["multiprocessing.util"].Finalize(None, recorder.stop_at_exit, exitpriority=-100)


os.register_at_fork(after_in_child=_restart_in_child)
