"""Alternating windows: layers switched at step() boundaries, recorded per window, and the
program's annotations never broken by the switching."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import rlscope
from rlscope.calibrate.spans import measure_windows
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
    assert (saved["settled"] > 0) == hasattr(sys, "monitoring")  # only sys.monitoring's switches leave a cost
    windows = measure_windows(read_trace(tmp_path))[0]
    levels = [w[0] for w in windows]
    assert set(levels) == {0, 1, 2}
    assert all(w[2] >= 1 for w in windows)
    totals = {level: np.sum([w[3:] for w in windows if w[0] == level], axis=0) for level in (0, 1, 2)}
    assert totals[0][1] == 0 and (totals[0][0] == 0 or inner_step)  # an op open at a switch stays recorded
    assert totals[1][1] == 0 and totals[1][0] > 0
    assert totals[2][1] > 0 and totals[2][0] > 0
    ops = process.events[process.events["kind"] == int(Kind.OPERATION)]
    assert (ops["end_ns"] >= ops["start_ns"]).all() and len(ops) < 600  # off windows recorded none


def test_after_a_switch_that_leaves_a_cost_the_next_window_only_settles(tmp_path, monkeypatch):
    """On Python 3.12+ taking the hooks out or putting them back makes the code that runs next
    pay for re-instrumentation; forced here on any version. No recorded window may hold a
    switch, and the recorded ones still follow the palindrome."""
    import time

    from rlscope.collect.python import TransitionCollector

    switches: list[int] = []

    def timed(switch):
        def switch_and_note(self: TransitionCollector) -> None:
            switch(self)
            switches.append(time.perf_counter_ns())

        return switch_and_note

    for name in ("suspend", "resume"):
        monkeypatch.setattr(TransitionCollector, name, timed(getattr(TransitionCollector, name)))
    monkeypatch.setattr(TransitionCollector, "switch_leaves_cost", property(lambda self: True))
    monkeypatch.setenv("RLSCOPE_WINDOWS", "0.0001:off,annotations,transitions")
    with rlscope.profile(tmp_path, process="loop", gpu=False):
        _loop(600)
    (process,) = read_trace(tmp_path)
    saved = json.loads((process.directory / WINDOWS_FILE).read_text())
    windows = saved["windows"]
    assert len(windows) > 30 and saved["settled"] >= len(switches) - 1 > 10  # close() switches once more
    assert not [w for w in windows if any(w[1] <= t <= w[2] for t in switches)]
    cycle = [0, 1, 2, 2, 1, 0]
    assert [w[0] for w in windows] == (cycle * len(windows))[:len(windows)]


def test_a_loop_inside_an_operation_keeps_annotations_on(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSCOPE_WINDOWS", "0.0001:off,annotations,transitions")
    with rlscope.profile(tmp_path, process="loop", gpu=False):
        with rlscope.operation("learn"):
            _loop(300)
    (process,) = read_trace(tmp_path)
    assert json.loads((process.directory / WINDOWS_FILE).read_text())["annotations_switched"] is False
    windows = measure_windows(read_trace(tmp_path))[0]
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
    assert {w[0] for w in measure_windows(read_trace(tmp_path))[0]} == {1, 2}


class _FakeGpu:
    """Stands in for the CUPTI collector: remembers when recording was switched and to what."""

    def __init__(self) -> None:
        import time

        self.switches = [(time.perf_counter_ns(), True, True)]

    def record(self, api: bool, gpu: bool) -> None:
        import time

        self.switches.append((time.perf_counter_ns(), api, gpu))

    def stop(self) -> dict:
        return {}


def _windows_with_a_fake_gpu(tmp_path, monkeypatch, iterations: int) -> tuple[dict, _FakeGpu]:
    """Every level alternated at every step() with a stand-in for CUPTI: windows.json and it."""
    from rlscope import recorder

    monkeypatch.setenv("RLSCOPE_WINDOWS", "0.0001:off,annotations,transitions,cuda_api,gpu_activities")
    fake = _FakeGpu()
    with rlscope.profile(tmp_path, process="loop", gpu=False):
        recorder.bound()._gpu = fake
        _loop(iterations)
    (process,) = read_trace(tmp_path)
    return json.loads((process.directory / WINDOWS_FILE).read_text()), fake


def test_gpu_layers_are_recorded_exactly_in_their_windows(tmp_path, monkeypatch):
    saved, fake = _windows_with_a_fake_gpu(tmp_path, monkeypatch, 400)
    windows = saved["windows"]
    assert {w[0] for w in windows} == {0, 1, 2, 3, 4}
    times = [t for t, _, _ in fake.switches]
    for level, start, _, _ in windows:
        _, api_on, gpu_on = fake.switches[np.searchsorted(times, start, side="right") - 1]
        assert (api_on, gpu_on) == (level >= 3, level >= 4)
    assert fake.switches[-1][1:] == (True, True)  # everything back on at the end
    assert len(fake.switches) < len(windows)  # switched only where a GPU layer changes


def test_after_a_switch_of_cuptis_recording_the_next_window_only_settles(tmp_path, monkeypatch):
    """Switching CUPTI's recording off leaves the next PPO-on-CUDA iterations slower, on the
    H100 by 4-8%; timed, those would lower the level below and hide cost from calibration."""
    saved, fake = _windows_with_a_fake_gpu(tmp_path, monkeypatch, 600)
    gpu_switches = len(fake.switches) - 2  # less the start and close()'s switch back on
    assert gpu_switches > 20 and saved["settled"] >= gpu_switches - 1  # the loop may end in the last
    cycle = [0, 1, 2, 3, 4, 4, 3, 2, 1, 0]
    assert [w[0] for w in saved["windows"]] == (cycle * len(saved["windows"]))[:len(saved["windows"])]


def test_cuda_api_calls_and_kernels_count_in_the_window_of_their_launch(tmp_path):
    import pandas as pd

    (tmp_path / WINDOWS_FILE).write_text(json.dumps({"windows": [[3, 0, 100, 1], [4, 100, 200, 1]]}))
    api_, kernel = int(Kind.CUDA_API), int(Kind.GPU_KERNEL)
    rows = [  # kind, tid, start, end, correlation
        (api_, 1, 10, 50, 1), (api_, 1, 20, 40, 2),  # a runtime call and the driver call inside it
        (kernel, 1, 120, 130, 1),  # runs in window 1, launched in window 0
        (api_, 1, 110, 150, 3), (kernel, 1, 160, 170, 3),
        (kernel, 1, 180, 190, 99),  # its launch was not recorded: counted where it ran
    ]
    events = pd.DataFrame(rows, columns=["kind", "tid", "start_ns", "end_ns", "correlation"]).assign(category=0)
    events.loc[len(events)] = [int(Kind.PROFILER_WRITE), 1, 60, 70, 0, 0]  # a trace write: not window time
    process = type("Process", (), {"directory": tmp_path, "events": events, "meta": {"main_tid": 1}})()
    (windows,) = measure_windows([process])
    assert [w[5:] for w in windows] == [[1, 1], [1, 2]]
    assert [w[1] for w in windows] == [90, 100]
