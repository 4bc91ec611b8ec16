"""The GPU collector's CPU-side parts: decoding recorded CUPTI buffers, joining GPU rows with the
process's events, GPU tables, and what a user sees when there is no GPU or CUPTI refuses."""

from __future__ import annotations

import ctypes
import json
import struct
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rlscope
from rlscope.analyze import analyze_trace
from rlscope.analyze.gpu import gpu_by_operation, utilisation_timeline
from rlscope import nvidia
from rlscope.collect import cupti, gpu_layers
from rlscope.errors import RlscopeError
from rlscope.analyze.attribution import attribute_gpu, read_attributed
from rlscope.trace.reader import TraceWarning, read_process
from rlscope.trace.schema import GPU_NAMES_FILE, GPU_ROWS_FILE, META_FILE, SCHEMA_VERSION, UTILISATION_FILE, Kind
from rlscope.trace.writer import TraceWriter

FIXTURES = Path(__file__).parent / "fixtures" / "cupti"  # recorded on an H100 by bench/gpu_collector.py fixtures


def _load_cupti():
    native = pytest.importorskip("rlscope._cupti", reason="built without CUDA headers")
    try:
        native.load(nvidia.libcupti_candidates())
    except RuntimeError as err:
        pytest.skip(f"no libcupti on this machine: {err}")
    return native


def test_recorded_buffers_decode_to_the_rows_the_live_tracer_wrote():
    native = _load_cupti()
    buffers = [(FIXTURES / f"buffer{i}.bin").read_bytes() for i in (1, 2)]
    kernels = [n for i in (1, 2) for n in (FIXTURES / f"buffer{i}.kernels").read_text().split("\n")[:-1]]
    rows, names, stats = native.decode(buffers, kernels)
    trace = FIXTURES / "trace" / "fixture.1"
    live = np.fromfile(trace / GPU_ROWS_FILE, dtype=np.int64).reshape(-1, 9)
    np.testing.assert_array_equal(rows, live)
    assert names == (trace / GPU_NAMES_FILE).read_text().split("\n")[:-1]
    assert stats["incomplete"] == 0 and stats["records"] > len(kernels)
    kinds = set(rows[:, 0].tolist())
    assert {int(Kind.CUDA_API), int(Kind.GPU_KERNEL), int(Kind.GPU_MEMCPY), int(Kind.CORRELATION)} <= kinds
    # Runtime API names lose their version suffix.
    assert "cudaLaunchKernel" in names and not any(n.startswith("cudaLaunchKernel_v") for n in names)


def test_nvtx_ranges_decode_to_one_row_per_closed_range():
    """CUPTI's marker records (CUpti_ActivityMarker2, 56 bytes: kind, flags, timestamp, id, object
    kind and id, name, domain), built here: a start carries the name, its end only the id; an end
    without its start is incomplete, a range still open at the end is not written."""
    native = _load_cupti()
    names = [ctypes.create_string_buffer(n) for n in (b"Thunk:#hlo_op=fusion.1#", b"XlaModule:#hlo_module=m#",
                                                      b"never closed")]

    def marker(flags: int, at: int, range_id: int, name: ctypes.Array | None = None) -> bytes:
        pointer = ctypes.addressof(name) if name is not None else 0
        # kind 12 (MARKER), flags, timestamp, id, object kind 2 (thread): process 7, thread 99, pad, name, domain
        return struct.pack("<IIQIIIIIIQQ", 12, flags, at, range_id, 2, 7, 99, 0, 0, pointer, 0)

    start, end = 2, 4  # CUPTI_ACTIVITY_FLAG_MARKER_START / _END
    buffer = b"".join((marker(start, 100, 1, names[1]), marker(start, 110, 2, names[0]), marker(end, 150, 2),
                       marker(end, 200, 1), marker(end, 300, 9), marker(start, 400, 3, names[2])))
    rows, decoded, stats = native.decode([buffer], [])
    assert rows[:, 0].tolist() == [int(Kind.NVTX_RANGE)] * 2
    assert [decoded[n] for n in rows[:, 6]] == ["Thunk:#hlo_op=fusion.1#", "XlaModule:#hlo_module=m#"]
    assert rows[:, 4].tolist() == [110, 100] and rows[:, 5].tolist() == [150, 200] and set(rows[:, 2]) == {99}
    assert stats["incomplete"] == 1 and stats["records"] == 6


def test_recorded_trace_charges_gpu_work_to_the_launching_operation():
    (proc,) = read_attributed(FIXTURES / "trace")
    ev = proc.events
    names = ev["name"].cat.categories
    assert not (ev["kind"] == int(Kind.CORRELATION)).any()  # consumed by the join
    gpu = ev[ev["kind"].isin([int(Kind.GPU_KERNEL), int(Kind.GPU_MEMCPY)])]
    charged = gpu.groupby("kind")["operation"].agg(lambda o: sorted({names[i] for i in o}))
    assert charged[int(Kind.GPU_KERNEL)] == ["compute"]  # (x * 2).sum() and zero_(): three kernels
    assert charged[int(Kind.GPU_MEMCPY)] == ["copy"]  # .item() and .cpu()
    assert (gpu["tid"] == proc.meta["main_tid"]).all()
    api = ev[ev["kind"] == int(Kind.CUDA_API)]
    assert (api["tid"] == proc.meta["main_tid"]).all()  # CUPTI's 32-bit thread ids mapped back
    table = gpu_by_operation(proc).set_index(["operation", "activity"])
    assert table.loc[("compute", "kernels"), "count"] == 3
    assert table.loc[("copy", "memcpy"), "count"] == 2


def test_recorded_trace_exports_gpu_tracks_with_their_operation(tmp_path):
    from rlscope.trace.perfetto import export_perfetto

    out = export_perfetto(read_attributed(FIXTURES / "trace"), tmp_path / "trace.json")
    events = json.loads(out.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(kernels) == 3 and {e["args"]["operation"] for e in kernels} == {"compute"}
    assert {e.get("cat") for e in events} >= {"cuda_runtime", "gpu_memcpy", "overhead", "ac2g"}


def test_a_trace_read_without_attribution_is_refused_by_the_export_and_attributed_by_the_analysis():
    from rlscope.analyze import analyze_processes, analyze_trace
    from rlscope.errors import TraceError
    from rlscope.trace.perfetto import to_chrome_trace
    from rlscope.trace.reader import read_trace

    raw = read_trace(FIXTURES / "trace")
    assert raw[0].gpu is not None
    with pytest.raises(TraceError, match="not attributed"):
        to_chrome_trace(raw)
    assert analyze_processes(raw)["gpu"].equals(analyze_trace(FIXTURES / "trace")["gpu"])


MAIN_TID = 0x7F00_1234_5678  # like pthread_self(): wider than CUPTI's 32-bit thread ids


def _write_trace(directory: Path, gpu_rows: list[tuple], gpu_names: str, utilisation: str | None = None) -> Path:
    """A process with operations a [100, 200) and b [300, 400) on the main thread, plus GPU rows."""
    proc_dir = directory / "p.1"
    proc_dir.mkdir(parents=True)
    writer = TraceWriter(proc_dir / "events.arrows")
    writer.record(int(Kind.OPERATION), 100, 200, "a", tid=MAIN_TID)
    writer.record(int(Kind.OPERATION), 300, 400, "b", tid=MAIN_TID)
    writer.record(int(Kind.PHASE), 0, 1000, "default", tid=MAIN_TID)
    writer.close()
    meta = {"schema_version": SCHEMA_VERSION, "process": "p", "pid": 1, "main_tid": MAIN_TID, "start_ns": 0,
            "end_ns": 1000, "complete": True}
    (proc_dir / META_FILE).write_text(json.dumps(meta))
    np.array(gpu_rows, dtype=np.int64).tofile(proc_dir / GPU_ROWS_FILE)
    (proc_dir / GPU_NAMES_FILE).write_text(gpu_names)
    if utilisation is not None:
        (proc_dir / UTILISATION_FILE).write_text(utilisation)
    return proc_dir


API, KERNEL, CORR = int(Kind.CUDA_API), int(Kind.GPU_KERNEL), int(Kind.CORRELATION)
LOW = MAIN_TID & 0xFFFFFFFF


def test_join_uses_external_correlation_then_falls_back_to_launch_time(tmp_path):
    rows = [
        # correlation 1: launched on the main thread inside "a", external id = symbol of "a" (0)
        (API, 0, LOW, 0, 110, 120, 0, 1, -1),
        (CORR, 0, 0, 0, 0, 0, -1, 1, 0),
        (KERNEL, 0, 0, 7, 150, 450, 1, 1, -1),  # runs long after "a" ended: still a's
        # correlation 2: launched by a framework thread (no operations) while "b" is open
        (API, 1, 4242, 0, 310, 320, 2, 2, -1),
        (KERNEL, 0, 0, 7, 500, 520, 1, 2, -1),
    ]
    proc_dir = _write_trace(tmp_path, rows, "cudaLaunchKernel\nmy_kernel\ncuLaunchKernel\n")
    proc = attribute_gpu(read_process(proc_dir))
    ev = proc.events
    names = ev["name"].cat.categories
    kernels = ev[ev["kind"] == KERNEL].sort_values("start_ns")
    assert [names[o] for o in kernels["operation"]] == ["a", "b"]
    assert (kernels["tid"] == MAIN_TID).all()
    assert list(kernels["name"]) == ["my_kernel", "my_kernel"]
    api = ev[ev["kind"] == API].sort_values("start_ns")
    assert list(api["tid"]) == [MAIN_TID, 4242]  # a thread rlscope never saw keeps CUPTI's id
    assert list(api["name"]) == ["cudaLaunchKernel", "cuLaunchKernel"]

    tables = analyze_trace(tmp_path)
    breakdown = tables["breakdown"]
    gpu_time = breakdown[breakdown["gpu"]].groupby("operation")["time_ns"].sum()
    assert gpu_time["a"] == 300 and gpu_time["b"] == 20  # charged in full, wherever the CPU was
    calls = tables["gpu"].query("activity == 'CUDA API calls'").set_index("operation")["count"]
    assert calls.to_dict() == {"a": 1, "b": 1}  # the framework thread's call goes to the main thread's "b"


def test_torn_gpu_files_keep_what_is_whole(tmp_path):
    rows = [(API, 0, LOW, 0, 110, 120, 0, 1, -1), (KERNEL, 0, 0, 7, 150, 160, 1, 1, -1)]
    proc_dir = _write_trace(tmp_path, rows, "cudaLaunchKernel\nmy_ker")  # the second name was cut off
    with (proc_dir / GPU_ROWS_FILE).open("ab") as f:
        f.write(b"\x01\x02\x03")  # and a row was being written
    with pytest.warns(TraceWarning, match="torn last row"):
        ev = attribute_gpu(read_process(proc_dir)).events
    assert list(ev[ev["kind"] == KERNEL]["name"]) == ["(unknown)"]
    assert list(ev[ev["kind"] == API]["name"]) == ["cudaLaunchKernel"]


def test_a_runtime_call_and_the_driver_call_inside_it_are_one_transition(tmp_path):
    rows = [
        (API, 0, LOW, 0, 110, 130, 0, 1, -1),  # cudaLaunchKernel ...
        (API, 1, LOW, 0, 115, 125, 1, 1, -1),  # ... calls cuLaunchKernel
        (API, 1, LOW, 0, 140, 150, 1, 2, -1),  # a driver call of its own
    ]
    _write_trace(tmp_path, rows, "cudaLaunchKernel\ncuLaunchKernel\n")
    tables = analyze_trace(tmp_path)
    cuda = tables["transitions"].query("transition == 'Backend->CUDA'").set_index("operation")["count"]
    assert cuda["a"] == 2
    gpu = tables["gpu"].set_index(["operation", "activity"])
    assert gpu.loc[("a", "CUDA API calls"), "count"] == 2
    assert gpu.loc[("a", "CUDA API calls"), "time_ns"] == 30  # union: 110-130 and 140-150
    main = tables["breakdown"].query("thread == 'main' and operation == 'a'").set_index("cpu")["time_ns"]
    assert main["CUDA API"] == 30 and main["Python"] == 70


def test_utilisation_timeline_sets_nvml_against_kernel_union(tmp_path):
    rows = [(API, 0, LOW, 0, 110, 120, 0, 1, -1), (CORR, 0, 0, 0, 0, 0, -1, 1, 0),
            (KERNEL, 0, 0, 7, 100, 300, 1, 1, -1), (KERNEL, 0, 0, 8, 200, 350, 1, 1, -1)]
    util = "time_ns,device,gpu_util_pct,sm_util_pct\n400,0,90,\n600,0,70,3.5\n"
    _write_trace(tmp_path, rows, "cudaLaunchKernel\nk\n", util)
    (proc,) = read_attributed(tmp_path)
    table = utilisation_timeline(proc, bin_s=500e-9)  # two bins of 500 ns over [0, 1000)
    pivot = table.pivot_table(index="time_s", columns="measure", values="percent")
    busy = pivot["GPU-bound (kernels+copies)"]
    assert busy.iloc[0] == pytest.approx(100 * 250 / 500) and busy.iloc[1] == 0
    assert pivot["nvidia-smi utilization.gpu"].tolist() == [90, 70]
    assert pivot["SM utilisation (GPM)"].dropna().tolist() == [3.5]

    from rlscope.analyze import ANALYSIS_DIR, analyze_trace, write_tables
    from rlscope.plot.render import draw_profile

    write_tables(analyze_trace(tmp_path), tmp_path / ANALYSIS_DIR)
    written = draw_profile(tmp_path, tmp_path / "figures")
    assert (tmp_path / "figures" / "gpu_utilisation.pdf") in written


@pytest.mark.parametrize(("value", "expected"), [
    (None, {"runtime", "driver", "kernels"}), (True, {"runtime", "driver", "kernels"}), ("0", set()), (False, set()),
    ("runtime,kernels", {"runtime", "kernels"}), ("all", set(gpu_layers.GPU_LAYERS)),
])
def test_gpu_layers(value, expected):
    assert gpu_layers.parse_gpu_layers(value) == expected


def test_unknown_gpu_layer_is_named():
    with pytest.raises(RlscopeError, match=r"unknown layer\(s\) kernel;.*runtime, driver, kernels"):
        gpu_layers.parse_gpu_layers("runtime,kernel")


def test_another_cupti_client_is_named(monkeypatch):
    collector = cupti.GpuCollector(Path("."))
    monkeypatch.setenv("CUDA_INJECTION64_PATH", "/opt/nsys/libToolsInjection64.so")
    with pytest.raises(cupti.GpuCollectorError, match=r"Nsight Systems.*RLSCOPE_GPU=0 / --no-gpu"):
        collector._fail({"code": 39, "error": "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED",
                         "step": "cuptiSubscribe", "subscriber": "CUPTI for <not provided>"})
    with pytest.raises(cupti.GpuCollectorError, match="in use by CUPTI for nsys"):
        collector._fail({"code": 39, "error": "", "step": "cuptiSubscribe", "subscriber": "CUPTI for nsys"})


def test_insufficient_privileges_gives_the_fix():
    with pytest.raises(cupti.GpuCollectorError, match="NVreg_RestrictProfilingToAdminUsers=0"):
        cupti.GpuCollector(Path("."))._fail({"code": 35, "error": "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES",
                                             "step": "cuptiActivityEnable", "subscriber": ""})


def test_other_cupti_failures_fall_back_to_cpu_only():
    collector = cupti.GpuCollector(Path("."))
    with pytest.warns(cupti.GpuUnavailableWarning, match="CUPTI could not start"):
        collector._fail({"code": 15, "error": "CUPTI_ERROR_NOT_INITIALIZED", "step": "cuptiSubscribe",
                         "subscriber": ""})
    assert collector.meta["status"] == "unavailable"


@pytest.mark.skipif(nvidia.gpu_unavailable_reason() is None, reason="this machine has a GPU")
def test_without_a_gpu_profiling_goes_on_cpu_only_with_one_warning(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with rlscope.profile(tmp_path / "on"):
            with rlscope.operation("work"):
                sum(range(100))
    gpu_warnings = [w for w in caught if issubclass(w.category, cupti.GpuUnavailableWarning)]
    assert len(gpu_warnings) == 1
    (proc,) = read_attributed(tmp_path / "on")
    assert proc.meta["gpu"]["status"] == "unavailable" and proc.meta["gpu"]["reason"]
    assert not (proc.directory / GPU_ROWS_FILE).exists()


def test_gpu_off_is_silent(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSCOPE_GPU", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error", cupti.GpuUnavailableWarning)
        with rlscope.profile(tmp_path):
            pass
    (proc,) = read_attributed(tmp_path)
    assert proc.meta["gpu"]["status"] == "off"


def test_an_install_without_cuda_headers_still_profiles(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "rlscope._cupti", None)  # what `import` sees when it was not built
    with pytest.warns(cupti.GpuUnavailableWarning, match="built without the CUPTI collector"):
        with rlscope.profile(tmp_path):
            pass
    (proc,) = read_attributed(tmp_path)
    assert proc.meta["complete"]


def test_the_activity_buffer_size_is_the_sessions_unless_the_environment_sets_one(monkeypatch, tmp_path):
    from rlscope.collect.session import Session
    from rlscope.collect.sampling import parse_sample

    monkeypatch.delenv(cupti.ENV_BUFFER_KIB, raising=False)
    assert Session(tmp_path).buffer_bytes == cupti.FULL_BUFFER_BYTES
    assert Session(tmp_path, sample=parse_sample(True)).buffer_bytes == cupti.SAMPLED_BUFFER_BYTES
    monkeypatch.setenv(cupti.ENV_BUFFER_KIB, "1024")
    assert Session(tmp_path, sample=parse_sample(True)).buffer_bytes == 1 << 20


@pytest.mark.parametrize("value", ["big", "0", "-4", "2.5", str(2 << 20)])
def test_a_bad_activity_buffer_size_is_one_clear_error(monkeypatch, tmp_path, value):
    monkeypatch.setenv(cupti.ENV_BUFFER_KIB, value)
    with pytest.raises(RlscopeError, match=f"RLSCOPE_CUPTI_BUFFER_KIB={value!r}: expected .* in KiB"):
        with rlscope.profile(tmp_path / "trace", gpu=False):
            pass
    assert not (tmp_path / "trace").exists()  # refused before anything was written


def test_rlscope_prof_refuses_a_bad_activity_buffer_size_before_running(tmp_path):
    import subprocess

    done = subprocess.run([sys.executable, "-m", "rlscope.cli", "prof", "--output", str(tmp_path / "t"), "--",
                           sys.executable, "-c", "open('ran', 'w')"], cwd=tmp_path, capture_output=True, text=True,
                          env={**__import__("os").environ, cupti.ENV_BUFFER_KIB: "lots"})
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "RLSCOPE_CUPTI_BUFFER_KIB='lots'" in done.stderr and not (tmp_path / "ran").exists()
    assert not (tmp_path / "t").exists()


def test_hidden_gpus_are_reported(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "hides every GPU" in nvidia.gpu_unavailable_reason()


def test_nvml_indices_follow_cuda_visible_devices(monkeypatch):
    class FakeNvml:
        def nvmlDeviceGetCount(self):
            return 3

        def nvmlDeviceGetHandleByIndex(self, i):
            return i

        def nvmlDeviceGetUUID(self, handle):
            return f"GPU-{handle}aaaa"

    from rlscope.collect.nvml import visible_nvml_indices

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-0a")
    assert visible_nvml_indices(FakeNvml()) == [2, 0]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_nvml_indices(FakeNvml()) == [0, 1, 2]


def test_utilisation_csv_is_read(tmp_path):
    rows = [(API, 0, LOW, 0, 110, 120, 0, 1, -1)]
    proc_dir = _write_trace(tmp_path, rows, "cudaLaunchKernel\n", "time_ns,device,gpu_util_pct,sm_util_pct\n5,0,1,\n")
    util = read_process(proc_dir).utilisation
    assert isinstance(util, pd.DataFrame) and util["gpu_util_pct"].tolist() == [1]


@pytest.mark.parametrize("module", ["_cupti", "_hotpath", "_cartpole_cpu"])
def test_each_native_modules_stub_names_what_it_has(module):
    """The ``.pyi`` beside a native module lists exactly its public functions and classes (and their methods)."""
    import ast
    import importlib

    native = pytest.importorskip(f"rlscope.{module}")
    stub = ast.parse((Path(rlscope.__file__).parent / f"{module}.pyi").read_text())
    declared = {node.name: node for node in stub.body
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_")}
    public = {name for name in dir(importlib.import_module(f"rlscope.{module}")) if not name.startswith("_")}
    assert set(declared) == public
    classes = {node.name: node for node in stub.body if isinstance(node, ast.ClassDef)}

    def members(node: ast.ClassDef) -> set[str]:  # its own and its stub bases' (attributes too)
        own = {m.name for m in node.body if isinstance(m, ast.FunctionDef)}
        own |= {m.target.id for m in node.body if isinstance(m, ast.AnnAssign)}
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                own |= members(classes[base.id])
        return {m for m in own if not m.startswith("_")}

    for name, node in declared.items():
        if isinstance(node, ast.ClassDef):
            assert members(node) == {m for m in dir(getattr(native, name)) if not m.startswith("_")}, name
