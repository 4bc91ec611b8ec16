"""The scale-up case study: true GPU-bound time across processes (arithmetic on synthetic rows),
and the actor/learner workload on the CPU with M = 2: a trace and a breakdown per process, and a
crashing actor that fails the run without taking the other traces with it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from rlscope.analyze.gpu import GPU_BOUND, gpu_use_across
from rlscope.harness.manifest import load_manifest
from tests.synthetic import KERNEL, make_trace

REPO = Path(__file__).resolve().parents[1]
SMI, GPM = "nvidia-smi utilization.gpu", "SM utilisation (GPM)"


def _gpu(rows: list[tuple], samples: list[tuple] | None = None):
    """A process with kernels (start, end, device) and NVML samples (time, device, gpu %, sm %)."""
    trace = make_trace([(KERNEL, s, e, "k", device) for s, e, device in rows], start=0, end=1000)
    if samples is not None:
        samples = pd.DataFrame(samples, columns=["time_ns", "device", "gpu_util_pct", "sm_util_pct"])
        trace = dataclasses.replace(trace, utilisation=samples)
    return trace


def _percent(table: pd.DataFrame, measure: str, device: int = 0) -> float:
    (value,) = table.loc[(table["measure"] == measure) & (table["device"] == device), "percent"]
    return value


def test_gpu_bound_time_is_the_union_over_processes_clipped_to_the_window():
    a = _gpu([(100, 200, 0), (150, 250, 0), (900, 1000, 0)])  # [100, 250) and, outside the window, [900, 1000)
    b = _gpu([(200, 300, 0), (500, 520, 0), (50, 120, 1)])  # overlaps a's [200, 250); device 1 apart
    table = gpu_use_across([a, b], start_ns=80, end_ns=880)
    assert _percent(table, GPU_BOUND) == pytest.approx(100 * (200 + 20) / 800)  # [100, 300) + [500, 520)
    assert _percent(table, GPU_BOUND, device=1) == pytest.approx(100 * 40 / 800)  # [80, 120)
    assert set(table["measure"]) == {GPU_BOUND}  # no NVML samples: no reported utilisation
    with pytest.raises(ValueError, match="empty window"):
        gpu_use_across([a], 500, 500)


def test_nvml_measures_count_each_sample_once_from_the_process_that_saw_the_whole_window():
    whole = _gpu([], [(t, 0, 90.0, 10.0) for t in (100, 300, 500, 700)] + [(950, 0, 0.0, 0.0)])
    late = _gpu([], [(t + 1, 0, 90.0, 10.0) for t in (500, 700)])  # the same driver samples, seen later
    table = gpu_use_across([late, whole], start_ns=0, end_ns=900)
    assert _percent(table, SMI) == 90.0 and _percent(table, GPM) == 10.0
    assert int(table.loc[table["measure"] == SMI, "samples"].iloc[0]) == 4


def _running(process) -> tuple[int, int] | None:
    """When a process's ``running`` phase began and ended (None: it had none, as a helper process)."""
    from experiments.casestudies.scale_up import RUNNING
    from rlscope.trace.schema import Kind

    ev = process.events
    phases = ev[(ev["kind"] == int(Kind.PHASE)) & (ev["name"] == RUNNING)]
    return None if phases.empty else (int(phases["start_ns"].min()), int(phases["end_ns"].max()))


def test_two_actors_and_a_learner_on_the_cpu_give_a_trace_and_a_breakdown_per_process(monkeypatch):
    import experiments.casestudies.profiled_scale_up as scale_up

    read: list[list] = []  # the processes' traces, as the rows were made from them
    rows_of = scale_up.scale_up_rows
    monkeypatch.setattr(scale_up, "scale_up_rows", lambda processes: read.append(processes) or rows_of(processes))
    result = scale_up.profiled_scale_up(2, 2.0, device="cpu", timeout_s=300)
    assert result["gpu_skipped"] == "GPU measures need a GPU (device cpu)"
    assert not [r for r in result["rows"] if r["table"] == "gpu"]
    rows = pd.DataFrame([r for r in result["rows"] if r["table"] == "breakdown"])
    assert set(rows["process"]) == {"learner", "worker0", "worker1"}
    per_process = rows.groupby("process")["operation"].agg(set)
    for worker in ("worker0", "worker1"):
        assert {"inference", "simulation"} <= per_process[worker]
    assert "backpropagation" in per_process["learner"]
    # Each process ran from after the launcher's window opened until after it closed (it stops at
    # its next check of the stop event: later on a loaded machine), and its breakdown covers its
    # own running phase exactly, none of it twice.
    (processes,) = read
    running = {p.meta["process"]: span for p in processes if (span := _running(p)) is not None}
    start, end = running["launcher"]
    assert result["window_s"] == pytest.approx((end - start) / 1e9)
    seconds = rows.groupby("process")["seconds"].sum()
    for name in ("learner", "worker0", "worker1"):
        began, ended = running[name]
        assert start < began < end < ended, (name, running)
        assert seconds[name] == pytest.approx((ended - began) / 1e9, rel=1e-6), (name, seconds[name], running)
    assert result["worker_steps_per_s"] > 0 and result["learner_updates_per_s"] > 0


def test_a_crashing_actor_fails_the_run_naming_its_log_and_the_other_traces_stay_readable(tmp_path, monkeypatch):
    from experiments.casestudies.profiled_scale_up import profiled_scale_up
    from rlscope.analyze.attribution import read_attributed

    monkeypatch.setenv("RLSCOPE_RUN_DIR", str(tmp_path))
    with pytest.raises(RuntimeError, match=r"worker1 \(exit 1\): .*failed-scale-up/logs/worker1\.log") as failure:
        profiled_scale_up(2, 30.0, device="cpu", timeout_s=300, crash_worker=1)
    kept = tmp_path / "failed-scale-up"
    assert "crashing on purpose" in (kept / "logs" / "worker1.log").read_text()
    assert str(kept / "trace") in str(failure.value)
    complete = {p.meta["process"] for p in read_attributed(kept / "trace") if p.meta.get("complete")}
    assert {"launcher", "learner", "worker0"} <= complete


@pytest.mark.parametrize("scale", ["quick", "full"])
def test_the_scale_up_manifest_validates(scale):
    manifest = load_manifest(REPO / "configs" / "scale_up.yaml", scale)
    assert manifest.figures == ("scale_up_gpu", "scale_up_breakdown")
    workers = [p.params["workers"] for p in manifest.points()]
    assert workers == ([1, 2, 4] if scale == "quick" else [1, 2, 4, 8, 16])
