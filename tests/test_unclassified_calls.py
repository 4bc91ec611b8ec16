"""A callable whose module or name cannot be read is not recorded, and that is said, not hidden."""

from __future__ import annotations

import warnings
from pathlib import Path

from rlscope.collect.python import TransitionCollector
from rlscope.trace import TraceWriter


class _Unreadable:
    """A callable whose attributes raise, as a broken extension type's might."""

    def __getattribute__(self, name: str) -> object:
        if name in ("__class__", "__call__"):
            return object.__getattribute__(self, name)
        raise RuntimeError(f"cannot read {name}")

    def __call__(self) -> None:
        return None


def test_an_unreadable_callable_is_counted_and_said_at_stop(tmp_path: Path) -> None:
    collector = TransitionCollector(TraceWriter(tmp_path / "events.arrows"))
    collector.start()
    try:
        assert collector._classify_for_native(_Unreadable())[0] == 0  # not a target: the program goes on
        assert collector._classify_for_native(len)[0] == 0  # a readable non-target is not counted
    finally:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            collector.stop()
    assert collector.unclassified == 1 and "RuntimeError: cannot read" in collector.first_unclassified
    assert any("1 call(s) to callables whose module or name could not be read" in str(w.message) for w in caught)
