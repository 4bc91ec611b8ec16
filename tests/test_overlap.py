"""Overlap analysis: hand-worked timelines, and properties that must hold for any timeline."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlscope.analyze.overlap import UNANNOTATED, breakdown, transitions
from rlscope.trace.reader import ProcessTrace
from tests.synthetic import API, BACKEND, CALL, KERNEL, OP, SIMULATOR, STEP, make_trace


def times(trace: ProcessTrace) -> dict[tuple[str, str], int]:
    frame = breakdown(trace)
    return {(r.operation, r.resources): r.time_ns for r in frame.itertuples()}


def test_nested_operations_charge_the_innermost() -> None:
    trace = make_trace([
        (OP, 10, 90, "A"),
        (OP, 20, 40, "B", 0, 1),
        (CALL, 25, 35, "linear", BACKEND),
        (CALL, 50, 60, "step", SIMULATOR),
    ])
    assert times(trace) == {
        (UNANNOTATED, "Python"): 20,
        ("A", "Python"): 50, ("A", "Simulator"): 10,
        ("B", "Python"): 10, ("B", "Backend"): 10,
    }


def test_gaps_between_operations_are_unannotated() -> None:
    trace = make_trace([(OP, 0, 10, "A"), (OP, 20, 30, "A")], end=40)
    assert times(trace) == {("A", "Python"): 20, (UNANNOTATED, "Python"): 20}


def test_cuda_api_inside_backend_inside_python() -> None:
    trace = make_trace([(OP, 0, 100, "A"), (CALL, 10, 60, "mm", BACKEND), (API, 20, 30, "cudaLaunchKernel")])
    assert times(trace) == {("A", "Python"): 50, ("A", "Backend"): 40, ("A", "CUDA API"): 10}


def test_trace_writes_are_their_own_layer() -> None:
    from rlscope.trace.schema import Kind

    trace = make_trace([(OP, 0, 100, "A"), (CALL, 10, 30, "mm", BACKEND),
                        (Kind.PROFILER_WRITE, 40, 70, "rlscope: trace write")])
    assert times(trace) == {("A", "Python"): 50, ("A", "Backend"): 20, ("A", "Profiler"): 30}


def test_gpu_work_is_charged_to_the_operation_that_launched_it() -> None:
    trace = make_trace([
        (OP, 0, 50, "A"),
        (KERNEL, 40, 70, "gemm", 0, 0, 1, "A"),  # runs past the end of A
    ])
    assert times(trace) == {
        ("A", "Python"): 40, ("A", "Python+GPU"): 10, ("A", "GPU"): 20,
        (UNANNOTATED, "Python"): 50,
    }


def test_overlapping_kernels_count_once() -> None:
    trace = make_trace([(OP, 0, 100, "A"), (KERNEL, 10, 30, "k1", 0, 0, 1, "A"), (KERNEL, 20, 40, "k2", 0, 1, 1, "A")])
    assert times(trace) == {("A", "Python"): 70, ("A", "Python+GPU"): 30}


def test_phases_split_an_operation_crossing_them() -> None:
    trace = make_trace([(OP, 40, 60, "A")], phases=[("collect", 0, 50), ("train", 50, 100)])
    frame = breakdown(trace)
    got = {(r.phase, r.operation): r.time_ns for r in frame.itertuples()}
    assert got == {("collect", UNANNOTATED): 40, ("collect", "A"): 10, ("train", "A"): 10,
                   ("train", UNANNOTATED): 40}


def test_other_threads_report_only_their_operations() -> None:
    trace = make_trace([(OP, 0, 100, "A"), (OP, 30, 40, "loader", 0, 0, 2), (CALL, 32, 34, "x", BACKEND, 0, 2)])
    frame = breakdown(trace)
    other = frame[frame["thread"] == "2"]
    assert {(r.operation, r.resources): r.time_ns for r in other.itertuples()} == {("loader", "Python"): 8,
                                                                                  ("loader", "Backend"): 2}
    assert frame[frame["thread"] == "main"]["time_ns"].sum() == 100


def test_transitions_per_operation_and_iteration() -> None:
    trace = make_trace([
        (STEP, 0, 50, "default"), (STEP, 50, 100, "default"),
        (OP, 0, 40, "inference"), (CALL, 1, 2, "a", BACKEND), (CALL, 3, 4, "b", BACKEND), (API, 3, 4, "launch"),
        (KERNEL, 5, 6, "k", 0, 0, 1, "inference"),
        (OP, 40, 100, "simulation"), (CALL, 41, 42, "s", SIMULATOR),
    ], start=-1)  # the phase starts before the first operation, as profiling does
    frame = transitions(trace)
    got = {(r.operation, r.transition): (r.count, r.per_iteration) for r in frame.itertuples()}
    assert got == {
        ("inference", "Annotations"): (1, 0.5),
        ("simulation", "Annotations"): (1, 0.5),
        ("inference", "Python->Backend"): (2, 1.0),
        ("inference", "Backend->CUDA"): (1, 0.5),
        ("inference", "GPU kernels"): (1, 0.5),
        ("simulation", "Python->Simulator"): (1, 0.5),
    }


# Properties ---------------------------------------------------------------------------------

@st.composite
def nested_timeline(draw: st.DrawFn) -> list[tuple]:
    """Well-nested operations with calls inside, on [0, 10_000]."""
    rows: list[tuple] = []

    def fill(lo: int, hi: int, depth: int, call_depth: int) -> None:
        cursor = lo
        for _ in range(draw(st.integers(0, 3))):
            if hi - cursor < 4:
                return
            s = draw(st.integers(cursor, hi - 2))
            e = draw(st.integers(s + 1, hi))
            if depth < 3 and draw(st.booleans()):
                rows.append((OP, s, e, f"op{draw(st.integers(0, 3))}", 0, depth))
                fill(s, e, depth + 1, call_depth)
            else:
                rows.append((CALL, s, e, "f", draw(st.sampled_from([BACKEND, SIMULATOR])), call_depth))
                if draw(st.booleans()):
                    fill(s, e, depth, call_depth + 1)
            cursor = e

    fill(0, 10_000, 0, 0)
    for _ in range(draw(st.integers(0, 4))):
        s = draw(st.integers(0, 9_990))
        rows.append((KERNEL, s, draw(st.integers(s + 1, 10_000)), "k", 0, 0, 1, None))
    return rows


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nested_timeline())
def test_cpu_side_sums_exactly_to_wall_time(rows: list[tuple]) -> None:
    frame = breakdown(make_trace(rows, 0, 10_000))
    assert frame.loc[frame["cpu"] != "none", "time_ns"].sum() == 10_000
    assert (frame["time_ns"] > 0).all()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nested_timeline(), st.randoms(use_true_random=False))
def test_breakdown_does_not_depend_on_event_order(rows: list[tuple], rnd) -> None:
    trace = make_trace(rows, 0, 10_000)
    shuffled = trace.events.sample(frac=1.0, random_state=rnd.randint(0, 2**31)).reset_index(drop=True)
    other = ProcessTrace(trace.directory, trace.meta, shuffled)
    key = ["phase", "operation", "resources"]
    a = breakdown(trace).sort_values(key).reset_index(drop=True)
    b = breakdown(other).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)


def test_empty_trace_is_all_unannotated_python() -> None:
    frame = breakdown(make_trace([], 5, 25))
    assert frame[["operation", "resources", "time_ns"]].values.tolist() == [[UNANNOTATED, "Python", 20]]
    assert np.isclose(frame["time_s"].sum(), 20e-9)
