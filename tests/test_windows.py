"""Alternating windows: layers switched at step() boundaries, recorded per window, and the
program's annotations never broken by the switching."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import rlscope
from rlscope.collect.calibrate import measure_windows
from rlscope.collect.windows import WINDOWS_FILE, parse_windows
from rlscope.errors import RlscopeError
from rlscope.trace.reader import read_trace
from rlscope.trace.schema import Kind


def _loop(iterations: int, inner_step: bool = False) -> None:
    for i in range(iterations):
        rlscope.step()
        with rlscope.operation("work"):
            np.zeros(2)
            if inner_step and i % 7 == 0:
                rlscope.step()  # an iteration boundary inside an operation


@pytest.mark.parametrize("inner_step", [False, True])
def test_levels_alternate_and_events_fall_only_in_windows_that_record_them(tmp_path, monkeypatch, inner_step):
    monkeypatch.setenv("RLSCOPE_WINDOWS", "0.0001:off,annotations,transitions")  # switch at every step()
    with rlscope.profile(tmp_path, process="loop", gpu=False):
        _loop(600, inner_step)
    assert sys.getprofile() is None and not rlscope.enabled()
    (process,) = read_trace(tmp_path)
    saved = json.loads((process.directory / WINDOWS_FILE).read_text())
    assert saved["annotations_switched"] is True
    windows = measure_windows(tmp_path)[0]
    levels = [w[0] for w in windows]
    assert set(levels) == {0, 1, 2}
    assert all(w[2] >= 1 for w in windows)
    totals = {level: np.sum([w[3:] for w in windows if w[0] == level], axis=0) for level in (0, 1, 2)}
    assert totals[0][1] == 0 and (totals[0][0] == 0 or inner_step)  # an op open at a switch stays recorded
    assert totals[1][1] == 0 and totals[1][0] > 0
    assert totals[2][1] > 0 and totals[2][0] > 0
    ops = process.events[process.events["kind"] == int(Kind.OPERATION)]
    assert (ops["end_ns"] >= ops["start_ns"]).all() and len(ops) < 600  # off windows recorded none


def test_a_loop_inside_an_operation_keeps_annotations_on(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSCOPE_WINDOWS", "0.0001:off,annotations,transitions")
    with rlscope.profile(tmp_path, process="loop", gpu=False):
        with rlscope.operation("learn"):
            _loop(300)
    (process,) = read_trace(tmp_path)
    assert json.loads((process.directory / WINDOWS_FILE).read_text())["annotations_switched"] is False
    windows = measure_windows(tmp_path)[0]
    assert {w[0] for w in windows} == {1, 2}
    assert (process.events["kind"] == int(Kind.OPERATION)).sum() == 301  # every one recorded


def test_bad_window_spec_is_one_clear_error():
    with pytest.raises(RlscopeError, match="MILLISECONDS:LEVEL"):
        parse_windows("fast:off,transitions")
    with pytest.raises(RlscopeError, match="two different levels"):
        parse_windows("10:off")
    assert parse_windows("5:off,transitions") == (5.0, [0, 2])


def test_validation_levels_inside_an_operation_become_annotations_and_transitions(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSCOPE_WINDOWS", "0.0001:off,transitions")
    with rlscope.profile(tmp_path, process="loop", gpu=False):
        with rlscope.operation("learn"):
            _loop(100)
    assert {w[0] for w in measure_windows(tmp_path)[0]} == {1, 2}
