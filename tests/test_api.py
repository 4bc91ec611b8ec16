"""The annotation API: nesting rules, no-op when off, phases and iterations, files written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import rlscope
from rlscope.errors import NestingError
from rlscope.trace import Kind, read_trace


def ops_of(directory: Path) -> list[tuple[str, int]]:
    (proc,) = read_trace(directory)
    ev = proc.events[proc.events["kind"] == int(Kind.OPERATION)]
    return sorted(zip(ev["name"].astype(str), ev["depth"].astype(int)))


def test_operations_are_recorded_with_nesting_depth(tmp_path: Path) -> None:
    with rlscope.profile(tmp_path, process="p", transitions=False):
        with rlscope.operation("outer"):
            with rlscope.operation("inner"):
                pass
    assert ops_of(tmp_path) == [("inner", 1), ("outer", 0)]
    (meta_path,) = tmp_path.glob("p.*/meta.json")
    meta = json.loads(meta_path.read_text())
    assert meta["complete"] and meta["process"] == "p" and meta["end_ns"] >= meta["start_ns"]


def test_decorator_form(tmp_path: Path) -> None:
    @rlscope.operation("work")
    def work(x: int) -> int:
        return x + 1

    assert work(1) == 2  # profiling off: plain call
    with rlscope.profile(tmp_path, transitions=False):
        assert work(2) == 3
    assert ops_of(tmp_path) == [("work", 0)]


def test_disabled_calls_are_no_ops(tmp_path: Path) -> None:
    assert not rlscope.enabled()
    with rlscope.operation("x"):
        rlscope.step()
        rlscope.set_phase("p")
    with rlscope.profile():  # no directory and no `rlscope prof`: nothing is recorded
        assert not rlscope.enabled()
    assert list(tmp_path.iterdir()) == []


def test_crossed_nesting_names_both_operations(tmp_path: Path) -> None:
    with pytest.raises(NestingError, match="'a' ended while 'b'"):
        with rlscope.profile(tmp_path, transitions=False):
            a, b = rlscope.operation("a"), rlscope.operation("b")
            a.__enter__()
            b.__enter__()
            a.__exit__(None, None, None)


@pytest.mark.parametrize("form", ["with", "decorator"])
@pytest.mark.parametrize("error", [KeyboardInterrupt, ValueError, None])
def test_a_mismatch_found_while_an_error_unwinds_leaves_the_error_reported(
        tmp_path: Path, form: str, error: type[BaseException] | None) -> None:
    """An operation that ends with another still open inside it is a nesting error, unless it
    ends because an error (a Ctrl-C, say) unwinds the stack: then that error is what the user
    must see, as rlscope.profile() does for operations left open."""
    def body() -> None:
        rlscope.operation("b").__enter__()
        if error is not None:
            raise error

    with pytest.raises(error or NestingError, match=None if error else "'a' ended while 'b'"):
        with rlscope.profile(tmp_path, transitions=False):
            if form == "with":
                with rlscope.operation("a"):
                    body()
            else:
                rlscope.operation("a")(body)()
    assert not rlscope.enabled()


def test_unclosed_operation_is_reported_at_the_end(tmp_path: Path) -> None:
    with pytest.raises(NestingError, match="'left-open' were still open"):
        with rlscope.profile(tmp_path, transitions=False):
            rlscope.operation("left-open").__enter__()
    (meta_path,) = tmp_path.glob("*/meta.json")
    assert json.loads(meta_path.read_text())["complete"], "the trace is still closed and readable"


def test_phases_and_steps(tmp_path: Path) -> None:
    with rlscope.profile(tmp_path, phase="collect", transitions=False):
        for _ in range(3):
            rlscope.step()
        rlscope.set_phase("train")
        for _ in range(2):
            rlscope.step()
    (proc,) = read_trace(tmp_path)
    ev = proc.events
    phases = ev[ev["kind"] == int(Kind.PHASE)]["name"].astype(str).tolist()
    steps = ev[ev["kind"] == int(Kind.STEP)]["name"].astype(str).tolist()
    assert phases == ["collect", "train"]
    assert steps == ["collect"] * 3 + ["train"] * 2


def test_nested_profile_only_renames(tmp_path: Path) -> None:
    with rlscope.profile(tmp_path, process="outer", transitions=False):
        with rlscope.profile(tmp_path / "ignored", process="renamed", phase="p2"):
            with rlscope.operation("x"):
                pass
    assert not (tmp_path / "ignored").exists()
    (proc,) = read_trace(tmp_path)
    assert proc.meta["process"] == "renamed"  # results name it as the inner profile() asked
    assert proc.directory.name.startswith("outer.")  # the directory keeps the name it started with


def _child_work() -> None:
    with rlscope.operation("child"):
        pass


def test_forked_child_does_not_touch_the_parents_trace(tmp_path: Path) -> None:
    import multiprocessing
    import os
    import warnings

    with rlscope.profile(tmp_path, process="parent", transitions=True):
        with rlscope.operation("before-fork"):
            sum(range(10))
        child = multiprocessing.get_context("fork").Process(target=_child_work)
        child.start()
        child.join()
        with rlscope.operation("after-fork"):
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn or unfinished trace would warn
        traces = {t.meta["pid"]: t for t in read_trace(tmp_path)}
    parent = traces[os.getpid()]
    names = lambda t: set(t.events["name"].astype(str))  # noqa: E731
    assert {"before-fork", "after-fork"} <= names(parent) and "child" not in names(parent)
    (child_trace,) = [t for t in traces.values() if t is not parent]
    assert "child" in names(child_trace) and "before-fork" not in names(child_trace)


def test_the_readme_names_integrations_after_importing_rlscope_alone() -> None:
    code = ("import sys, rlscope; assert 'stable_baselines3' not in sys.modules; "
            "print(rlscope.integrations.sb3.Annotate.__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Annotate"
