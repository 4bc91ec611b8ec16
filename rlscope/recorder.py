"""The seam between the annotation API and the collectors, below both.

The API (``rlscope.api``) keeps the session that annotations report to in its own module globals,
so that ``operation()`` costs one global read when profiling is off. Collectors must switch that
binding too: a session started by ``rlscope prof`` at interpreter start, alternating windows that
turn annotations off for stretches of a run, a calibration start-up run that ends at its first
step. They do it through this module, which the API fills in when it is imported (importing any
``rlscope`` module imports the API first), so that nothing in ``rlscope.collect`` imports the API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

__all__ = ["Recorder", "install", "bind", "annotate_into", "bound", "stop_at_exit"]


class Recorder(Protocol):
    """What the API asks of a profiling session (``rlscope.collect.session.Session``)."""

    def enter(self, name: str) -> None:
        """An operation starts."""

    def exit(self, name: str) -> str | None:
        """An operation ends; the name of the operation open instead, if it was not ``name``."""

    def nesting_error(self, name: str, top: str) -> None:
        """Raise for an operation that ended while ``top`` was still open inside it."""

    def set_phase(self, name: str) -> None:
        """Start a training phase."""

    def rename(self, process: str) -> None:
        """Name the process in results."""

    def bind_step(self) -> None:
        """Make ``rlscope.step()`` record this session's iterations."""

    def stop(self, check_nesting: bool = True) -> None:
        """Finish the trace."""

    def abandon_after_fork(self) -> None:
        """In a forked child: start trace files of its own."""


_bind: Callable[[Recorder | None], None] | None = None
_annotate_into: Callable[[Recorder | None], None] | None = None
_bound: Callable[[], Recorder | None] | None = None


def install(bind_: Callable[[Recorder | None], None], annotate_into_: Callable[[Recorder | None], None],
            bound_: Callable[[], Recorder | None]) -> None:
    """Called once by ``rlscope.api`` at import: how to switch and read its binding."""
    global _bind, _annotate_into, _bound
    _bind, _annotate_into, _bound = bind_, annotate_into_, bound_


def bind(recorder: Recorder | None) -> None:
    """Make ``recorder`` (or, with None, nothing) the session annotations and ``step()`` report to."""
    assert _bind is not None, "rlscope.api installs the binding at import"
    _bind(recorder)


def annotate_into(recorder: Recorder | None) -> None:
    """Send annotations to ``recorder``, or with None make them no-ops; ``step()`` stays as it is."""
    assert _annotate_into is not None, "rlscope.api installs the binding at import"
    _annotate_into(recorder)


def bound() -> Recorder | None:
    """The session of this process, whether or not annotations are on just now."""
    assert _bound is not None, "rlscope.api installs the binding at import"
    return _bound()


def stop_at_exit() -> None:
    """Unbind and stop this process's session, if any (at exit, or in a multiprocessing child)."""
    session = bound()
    bind(None)
    if session is not None:
        session.stop()
