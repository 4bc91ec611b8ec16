"""The CUPTI collector on a real GPU (run on the lent GPU machine; skipped elsewhere)."""

from __future__ import annotations

import json

import pytest

import rlscope
from rlscope.analyze import analyze_trace
from rlscope.analyze.attribution import read_attributed
from rlscope.trace.schema import Kind

pytestmark = pytest.mark.gpu


def test_kernels_are_recorded_and_charged_to_their_operation(tmp_path):
    torch = pytest.importorskip("torch")
    x = torch.ones(1 << 16, device="cuda")
    torch.cuda.synchronize()
    with rlscope.profile(tmp_path, process="gpu"):
        for _ in range(10):
            rlscope.step()
            with rlscope.operation("compute"):
                for _ in range(5):
                    x.mul_(1.0001)
            with rlscope.operation("readback"):
                x.sum().item()
    (proc,) = read_attributed(tmp_path)
    assert proc.meta["gpu"]["status"] == "on", proc.meta["gpu"]
    assert proc.meta["gpu"]["dropped"] == 0
    ev = proc.events
    kernels = ev[ev["kind"] == int(Kind.GPU_KERNEL)]
    names = list(ev["name"].cat.categories)
    ops = kernels["operation"].map(lambda o: names[o] if o >= 0 else None)
    assert (ops == "compute").sum() == 50  # mul_ launches exactly one kernel each
    assert (ops == "readback").sum() >= 10
    assert (ev["kind"] == int(Kind.GPU_MEMCPY)).sum() >= 10  # .item() copies back
    api = ev[ev["kind"] == int(Kind.CUDA_API)]
    assert api["tid"].isin([proc.meta["main_tid"]]).all()
    # One clock: every kernel starts after the API call that launched it.
    launch = api.set_index("correlation")["start_ns"]
    launch = launch[~launch.index.duplicated()]
    assert (kernels["start_ns"].to_numpy() >= launch.reindex(kernels["correlation"]).to_numpy()).all()

    tables = analyze_trace(tmp_path)
    gpu = tables["gpu"].set_index(["operation", "activity"])
    assert gpu.loc[("compute", "kernels"), "count"] == 50
    assert (tables["breakdown"]["gpu"]).any()
    cuda = tables["transitions"][tables["transitions"]["transition"] == "Backend->CUDA"]
    assert cuda.set_index("operation").loc["compute", "count"] >= 50


def test_utilisation_is_sampled(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("pynvml")
    import time

    x = torch.ones(1 << 20, device="cuda")
    with rlscope.profile(tmp_path, process="util"):
        t_end = time.perf_counter() + 0.6  # the driver samples at its own rate, a few times a second
        while time.perf_counter() < t_end:
            x.mul_(1.0)
        torch.cuda.synchronize()
    read_after = time.perf_counter_ns()  # every sample was taken, and fetched, before this
    (proc,) = read_attributed(tmp_path)
    assert proc.meta["utilisation"]["status"] == "on", json.dumps(proc.meta["utilisation"])
    assert proc.utilisation is not None
    # the driver's own samples (several a second), on the trace's clock: within the profile
    util_rows = proc.utilisation.dropna(subset=["gpu_util_pct"])
    start, end = proc.meta["start_ns"], proc.meta["end_ns"]
    inside = util_rows["time_ns"].between(start, end)
    assert inside.sum() >= 3, (json.dumps(proc.meta["utilisation"]), util_rows.to_dict("list"), start, end)
    # on the trace's clock, in order, within one profile's length of it: the conversion from the
    # driver's clock errs by at most the time one NVML call took while profiling; the wrong clock
    # or unit would put them years or 1000x away
    span = read_after - start
    assert util_rows.groupby("device")["time_ns"].agg(lambda t: t.is_monotonic_increasing).all()
    assert util_rows["time_ns"].between(start - span, read_after + span).all(), (util_rows["time_ns"].tolist(),
                                                                                start, read_after)
    util = analyze_trace(tmp_path)["utilisation"]
    assert {"GPU-bound (kernels+copies)", "nvidia-smi utilization.gpu"} <= set(util["measure"])


def test_alternating_windows_switch_cuda_api_and_kernel_recording(tmp_path, monkeypatch):
    from rlscope.calibrate.spans import measure_windows
    from rlscope.collect.gpu_layers import QUERY_APIS

    torch = pytest.importorskip("torch")
    x = torch.ones(1 << 16, device="cuda")
    torch.cuda.synchronize()
    monkeypatch.setenv("RLSCOPE_WINDOWS", "1:off,annotations,transitions,cuda_api,gpu_activities")
    with rlscope.profile(tmp_path, process="gpu"):
        for _ in range(3000):
            rlscope.step()
            with rlscope.operation("compute"):
                x.mul_(1.0001)
                torch.cuda.synchronize()
    (proc,) = read_attributed(tmp_path)
    assert proc.meta["gpu"]["status"] == "on", proc.meta["gpu"]
    windows = measure_windows([proc])[0]
    per_level = {level: [w for w in windows if w[0] == level] for level in range(5)}
    assert all(per_level.values())
    for level, rows in per_level.items():
        apis, kernels = sum(w[5] for w in rows), sum(w[6] for w in rows)
        iterations = sum(w[2] for w in rows)
        # A window's last kernel may still be finishing as the next window begins: allow one.
        assert (apis >= iterations) if level >= 3 else apis <= len(rows), (level, apis, iterations)
        assert (kernels >= iterations) if level >= 4 else kernels <= len(rows), (level, kernels, iterations)
    # CUPTI stayed attached through the windows (detaching at every switch crashed JAX), so
    # every API call keeps its own correlation id.
    api = proc.events[proc.events["kind"] == int(Kind.CUDA_API)]
    assert not api["correlation"].duplicated().any()
    names = set(proc.events.loc[proc.events["kind"] == int(Kind.CUDA_API), "name"].astype(str))
    assert not {n.split("_v")[0] for n in names} & set(QUERY_APIS)  # untraced APIs stay untraced


def test_recording_nothing_leaves_no_activity_kind_on_and_keeps_cupti_attached(tmp_path):
    """Calibration's unprofiled windows must cost what an untraced process does: an activity
    kind left on there (CUPTI's overhead records cost ~90 ns per launch) is paid in every
    window and measured by none. CUPTI stays attached there: detaching at
    every switch crashed JAX processes. Only stopping detaches it, at the next API exit."""
    from rlscope import _cupti
    from rlscope.nvidia import libcupti_candidates

    torch = pytest.importorskip("torch")
    x = torch.ones(16, device="cuda")
    _cupti.load(libcupti_candidates())
    tracer = _cupti.Tracer(str(tmp_path / "rows"), str(tmp_path / "names"))
    assert tracer.start(runtime=True, driver=True, gpu=True)["ok"]
    detaches = tracer.stats()["detaches"]
    try:
        started = set(tracer.stats()["kinds_on"])
        tracer.record(api=False, gpu=False)
        x.add_(1)
        stats = tracer.stats()
        assert stats["kinds_on"] == [] and stats["cupti_attached"] and not stats["detach_pending"]
        tracer.record(api=True, gpu=False)
        api_only = set(tracer.stats()["kinds_on"])
        tracer.record(api=True, gpu=True)
        assert set(tracer.stats()["kinds_on"]) == started
        assert api_only and api_only < started  # kernels, copies and memsets off
        assert tracer.stats()["detaches"] == detaches
    finally:
        tracer.stop()
    stats = tracer.stats()  # stop() made the driver call whose exit detaches CUPTI
    assert stats["kinds_on"] == [] and not stats["detach_pending"] and not stats["cupti_attached"]
    assert stats["detaches"] == detaches + 1


def test_a_stopped_session_detaches_and_the_next_one_records_again(tmp_path):
    """Stopping lets go of CUPTI entirely (before stop returns), and a later session in the
    same process attaches again with its clock and attribution intact."""
    torch = pytest.importorskip("torch")
    x = torch.ones(1 << 16, device="cuda")
    torch.cuda.synchronize()
    for name in ("first", "second"):
        with rlscope.profile(tmp_path / name, process="gpu"):
            for _ in range(5):
                rlscope.step()
                with rlscope.operation("compute"):
                    x.mul_(1.0001)
                torch.cuda.synchronize()
        x.add_(1)  # unprofiled work between the sessions
        torch.cuda.synchronize()
    for name in ("first", "second"):
        (proc,) = read_attributed(tmp_path / name)
        gpu_meta = proc.meta["gpu"]
        assert gpu_meta["status"] == "on" and not gpu_meta["cupti_attached"], gpu_meta
        ev = proc.events
        kernels = ev[ev["kind"] == int(Kind.GPU_KERNEL)]
        operations = kernels["operation"].map(dict(enumerate(ev["name"].cat.categories)))
        assert (operations == "compute").sum() == 5, name
        api = ev[ev["kind"] == int(Kind.CUDA_API)]
        launch = api.set_index("correlation")["start_ns"]
        launch = launch[~launch.index.duplicated()]
        assert (kernels["start_ns"].to_numpy() >= launch.reindex(kernels["correlation"]).to_numpy()).all()
    from rlscope import _cupti

    probe = _cupti.Tracer(str(tmp_path / "rows"), str(tmp_path / "names"))
    assert not probe.stats()["cupti_attached"] and probe.stats()["detaches"] >= 2


def test_the_bare_cupti_floor_sees_the_records_frees_them_and_detaches(tmp_path):
    """bench/gpu_overhead.py's floor: CUPTI fills buffers for the loop's kernels, the floor hands
    them back unread, stops detached, and no rlscope session can start while it runs."""
    torch = pytest.importorskip("torch")
    from rlscope import _cupti
    from rlscope.collect.cupti import GpuCollectorError
    from rlscope.collect.gpu_layers import QUERY_APIS
    from rlscope.nvidia import libcupti_candidates

    _cupti.load(libcupti_candidates())
    x = torch.ones(1 << 16, device="cuda")
    torch.cuda.synchronize()
    for api in (False, True):
        floor = _cupti.Floor()
        assert floor.start(api=api, untraced_apis=list(QUERY_APIS))["ok"]
        with pytest.raises(GpuCollectorError, match="bare CUPTI client"):
            with rlscope.profile(tmp_path / f"refused_{api}", process="gpu"):
                pass
        for _ in range(2000):
            x.mul_(1.0001)
        torch.cuda.synchronize()
        stats = floor.stop()
        # 2,000 kernel records of at least 100 bytes each were handed over, none dropped
        assert stats["buffers"] >= 1 and stats["bytes"] >= 2000 * 100 and stats["dropped"] == 0, stats
        assert not stats["cupti_attached"], stats
    with rlscope.profile(tmp_path / "after", process="gpu"):  # the tracer attaches again afterwards
        with rlscope.operation("compute"):
            x.mul_(1.0001)
        torch.cuda.synchronize()
    (proc,) = read_attributed(tmp_path / "after")
    kernels = proc.events[proc.events["kind"] == int(Kind.GPU_KERNEL)]
    assert len(kernels) == 1


def test_api_calls_from_callbacks_match_the_activity_records(tmp_path, monkeypatch):
    """The same loop traced with API calls as activity records and through callbacks: the same
    calls (name by name), kernels, attribution, and call that launched each kernel."""
    torch = pytest.importorskip("torch")
    from rlscope.collect.gpu_layers import ENV_API

    x = torch.ones(1 << 16, device="cuda")
    torch.cuda.synchronize()
    seen = {}
    for source in ("activity", "callbacks"):
        monkeypatch.setenv(ENV_API, source)
        with rlscope.profile(tmp_path / source, process="gpu"):
            for _ in range(8):
                rlscope.step()
                with rlscope.operation("compute"):
                    for _ in range(3):
                        x.mul_(1.0001)
                with rlscope.operation("readback"):
                    x.sum().item()
        (proc,) = read_attributed(tmp_path / source)
        assert proc.meta["gpu"]["api_source"] == source
        ev = proc.events
        names = dict(enumerate(ev["name"].cat.categories))
        api = ev[ev["kind"] == int(Kind.CUDA_API)]
        kernels = ev[ev["kind"] == int(Kind.GPU_KERNEL)]
        assert (api["end_ns"] >= api["start_ns"]).all() and api["tid"].isin([proc.meta["main_tid"]]).all()
        assert not api["correlation"].duplicated().any(), source  # one call per correlation id
        launcher = api.set_index("correlation").reindex(kernels["correlation"])
        assert (kernels["start_ns"].to_numpy() >= launcher["start_ns"].to_numpy()).all(), source
        seen[source] = (api["name"].astype(str).value_counts().to_dict(),
                        kernels["operation"].map(names).value_counts().to_dict(),
                        launcher["name"].astype(str).value_counts().to_dict())
    assert seen["callbacks"] == seen["activity"]
    kernels_per_operation = seen["callbacks"][1]
    assert kernels_per_operation["compute"] == 24 and set(kernels_per_operation) == {"compute", "readback"}


def test_the_residual_probe_detaches_between_cycles_and_times_every_call():
    from rlscope.calibrate.residual import measure_residual

    result = measure_residual(cycles=6, calls=2000)  # raises unless CUPTI detached after every cycle
    assert result["cycles"] == 6 and {"driver_query", "driver_launch"} <= set(result["probes"])
    for probe in result["probes"].values():
        assert probe["detached_ns"] > 0 and probe["recorded_ns"] > 0 and probe["ci95_ns"] is not None


def test_calibration_with_a_gpu_runs_its_later_start_up_pairs_whole(tmp_path):
    import sys

    from rlscope.calibrate import calibrate, derive_calibration
    from rlscope.calibrate.model import PROFILED_STARTUP, STARTUP

    pytest.importorskip("torch")
    script = tmp_path / "loop.py"
    script.write_text("import torch, rlscope\nx = torch.ones(1 << 10, device='cuda')\n"
                      "for _ in range(30000):\n    rlscope.step()\n    x.mul_(1.0001)\n    torch.cuda.synchronize()\n")
    calibration, failures = calibrate([sys.executable, str(script)], tmp_path / "cal", repetitions=1,
                                      progress=lambda line: None, window_ms=2.0, startup_pairs=2)
    assert not failures
    whole = [r for r in calibration.runs if r["config"] == PROFILED_STARTUP]
    assert len(whole) == 1 and whole[0]["steady"]["events"]["cuda_api"] >= 30000  # ran to the end, recording
    bases = {r["pair"]: r for r in calibration.runs if r["config"] == STARTUP}
    assert "steady_ns" not in bases[0] and bases[1]["steady_ns"] > 0  # the first pair's ends at its first step
    assert calibration.blocks > 0 and "cuda_api" in calibration.costs_ns, calibration.blocks
    assert calibration.cupti_residual_ns is not None
    assert calibration.continuous_ns is not None
    windows_only = derive_calibration([r for r in calibration.runs if r["config"] != PROFILED_STARTUP],
                                      calibration.machine, calibration.command)
    assert windows_only.continuous_ns is None
    assert calibration.costs_ns["cuda_api"] == pytest.approx(windows_only.costs_ns["cuda_api"]
                                                             + calibration.continuous_ns)


_TORCH_CROSSCHECK = """
import contextlib, json, sys
import torch, rlscope
from rlscope.analyze.attribution import read_attributed
from rlscope.trace.schema import Kind
from torch.profiler import ProfilerActivity, profile

def train(steps, annotate):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(512, 64, device="cuda"), torch.randn(512, 4, device="cuda")
    for _ in range(steps):
        rlscope.step()
        with rlscope.operation("forward") if annotate else contextlib.nullcontext():
            loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    torch.cuda.synchronize()

train(10, False)  # warm-up: cuBLAS handles, lazy module loading
with rlscope.profile(sys.argv[1], process="mlp"):
    train(30, True)
(proc,) = read_attributed(sys.argv[1])
kernels = proc.events[proc.events["kind"] == int(Kind.GPU_KERNEL)]
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:  # after: it keeps CUPTI
    train(30, False)
prof.export_chrome_trace(sys.argv[2])
theirs = [e for e in json.load(open(sys.argv[2]))["traceEvents"] if e.get("cat") == "kernel"]
print(json.dumps({"ours": len(kernels), "ours_ns": int((kernels["end_ns"] - kernels["start_ns"]).sum()),
                  "theirs": len(theirs), "theirs_ns": sum(float(e["dur"]) for e in theirs) * 1e3}))
"""


def test_kernel_counts_and_times_agree_with_torch_profiler(tmp_path):
    """The same training loop under rlscope and then torch.profiler, in one process: torch.profiler
    keeps CUPTI once it has run, so it goes second, right after rlscope's session (which must
    have let go of CUPTI by then). Equal kernel counts; kernel time of the same order (how
    close is measured by `bench/gpu_collector.py torch-compare`)."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    script = tmp_path / "crosscheck.py"
    script.write_text(_TORCH_CROSSCHECK)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "trace"), str(tmp_path / "torch.json")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ours"] == result["theirs"] > 0
    # the same kernels' GPU time, in the same unit: a factor of 2 either way, not a closeness
    assert 0.5 < result["ours_ns"] / result["theirs_ns"] < 2.0, result


def test_kernel_counts_and_times_agree_with_jax_profiler(tmp_path):
    """A jitted JAX train step under rlscope, then under jax.profiler, twice in one process
    (`bench/gpu_collector.py jax-compare`, which measures how close their kernel times are):
    equal kernel counts, kernel time of the same order."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("jax")
    bench = Path(__file__).resolve().parents[1] / "bench" / "gpu_collector.py"
    done = subprocess.run([sys.executable, str(bench), "jax-compare", "100", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for round_ in result["rounds"]:
        assert round_["rlscope_kernels"] == round_["jax_kernels"] > 0, round_
        assert 0.5 < round_["rlscope_kernel_ns"] / round_["jax_kernel_ns"] < 2.0, round_
