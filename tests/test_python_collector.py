"""Python -> native call interception: what counts as a target, and real calls recorded."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import rlscope
from rlscope.collect.python import DEFAULT_TARGETS, TransitionCollector, _is_native, classify_module
from rlscope.errors import RlscopeError
from rlscope.trace import Category, Kind, read_trace


def test_module_prefixes_match_on_dotted_boundaries() -> None:
    assert classify_module("torch._C._nn", DEFAULT_TARGETS) == Category.BACKEND
    assert classify_module("numpy", DEFAULT_TARGETS) == Category.BACKEND
    assert classify_module("torchvision_like", DEFAULT_TARGETS) is None
    assert classify_module("rlscope._cartpole_cpu", DEFAULT_TARGETS) == Category.SIMULATOR
    assert classify_module("rlscope.api", DEFAULT_TARGETS) is None


def test_only_native_callables_are_targets() -> None:
    assert _is_native(np.cos) and _is_native(torch.tanh) and _is_native(math.sqrt)
    assert _is_native(torch.Tensor.argmax)  # a method descriptor of a C type
    assert not _is_native(torch.nn.Linear(2, 2))  # a Python class instance with a Python __call__
    assert not _is_native(lambda: None) and not _is_native(torch.nn.Linear)


def calls(directory: Path) -> dict[str, int]:
    (proc,) = read_trace(directory)
    ev = proc.events[proc.events["kind"] == int(Kind.CPU_CALL)]
    sizes = ev.groupby(["category", "name"], observed=True).size()
    return {f"{Category(c).name}:{n}": int(k) for (c, n), k in sizes.items()}


def test_records_backend_and_simulator_calls(tmp_path: Path) -> None:
    from rlscope import _cartpole_cpu

    env = _cartpole_cpu.CartPoleF32(4, 1, 0)
    layer = torch.nn.Linear(4, 2)
    x = torch.zeros(4)
    with rlscope.profile(tmp_path):
        for _ in range(5):
            with rlscope.operation("inference"):
                layer(x).argmax()
            with rlscope.operation("simulation"):
                env.step(np.zeros(4, dtype=np.int64))
            math.sqrt(2.0)  # builtins: not a target
    got = calls(tmp_path)
    assert [v for k, v in got.items() if k.startswith("BACKEND:") and k.endswith(".argmax")] == [5]
    assert got.get("BACKEND:linear") == 5
    simulator = sum(v for k, v in got.items() if k.startswith("SIMULATOR:"))
    # sys.setprofile (3.11) reports only PyCFunction calls, not nanobind functions or ufuncs.
    assert simulator == (5 if hasattr(sys, "monitoring") else 0)
    assert not any("sqrt" in k for k in got)


def test_exceptions_in_native_calls_close_the_interval(tmp_path: Path) -> None:
    with rlscope.profile(tmp_path):
        with rlscope.operation("bad"):
            for _ in range(3):
                with pytest.raises(ValueError):
                    np.zeros(-1)
    assert calls(tmp_path) == {"BACKEND:zeros": 3}


def test_second_session_sees_call_sites_again(tmp_path: Path) -> None:
    def work() -> None:
        np.ones(2).sum()

    for i in range(2):
        with rlscope.profile(tmp_path / str(i)):
            work()
    assert calls(tmp_path / "0") == calls(tmp_path / "1")


def test_refuses_to_displace_another_profiler(tmp_path: Path) -> None:
    from rlscope.trace import TraceWriter

    collector = TransitionCollector(TraceWriter(tmp_path / "e.arrows"))
    if hasattr(sys, "monitoring"):
        sys.monitoring.use_tool_id(sys.monitoring.PROFILER_ID, "other-tool")
        try:
            with pytest.raises(RlscopeError, match="held by 'other-tool'"):
                collector.start()
        finally:
            sys.monitoring.free_tool_id(sys.monitoring.PROFILER_ID)
    else:
        sys.setprofile(lambda *a: None)
        try:
            with pytest.raises(RlscopeError, match="another profiler is installed"):
                collector.start()
        finally:
            sys.setprofile(None)


def _collected(directory: Path, native: bool, workload: Callable[[], None], **writer_options: int) -> pd.DataFrame:
    """The events of ``workload`` run under a bare TransitionCollector (native, or its Python twin)."""
    from rlscope.trace import TraceWriter
    from rlscope.trace.reader import read_process

    directory.mkdir()
    writer = TraceWriter(directory / "events.arrows", **writer_options)
    collector = TransitionCollector(writer, native=native)
    collector.start()
    try:
        workload()
    finally:
        collector.stop()
        writer.close()
    (directory / "meta.json").write_text(
        '{"schema_version": 1, "process": "p", "pid": 1, "start_ns": 0, "complete": true}')
    return read_process(directory).events


def _recorded_calls(directory: Path, native: bool, workload: Callable[[], None]) -> dict[str, int]:
    """``workload``'s calls per ``CATEGORY:name`` under a bare TransitionCollector."""
    events = _collected(directory, native, workload)
    sizes = events[events["kind"] == int(Kind.CPU_CALL)].groupby(["category", "name"], observed=True).size()
    return {f"{Category(c).name}:{n}": int(k) for (c, n), k in sizes.items()}


def test_native_and_python_collectors_agree(tmp_path: Path) -> None:
    layer = torch.nn.Linear(4, 2)
    x = torch.zeros(4)

    def workload() -> None:
        for _ in range(20):
            layer(x).argmax()
            np.zeros(3).sum()
            with pytest.raises(ValueError):
                np.zeros(-1)

    counts = []
    for native in (True, False):
        # small chunks: exercises mid-run flushes
        ev = _collected(tmp_path / str(native), native, workload, chunk_events=16)
        assert (ev["end_ns"] >= ev["start_ns"]).all()
        counts.append(ev.groupby(["category", "name"], observed=True).size().to_dict())
    assert counts[0] == counts[1] and sum(counts[0].values()) >= 80


def test_parse_targets_and_errors() -> None:
    from rlscope.collect.python import parse_targets

    assert parse_targets("mysim=simulator, fastlib=Backend") == {"mysim": Category.SIMULATOR,
                                                                 "fastlib": Category.BACKEND}
    assert parse_targets("") == {}
    with pytest.raises(RlscopeError, match="expected MODULE=backend or MODULE=simulator"):
        parse_targets("mysim=gpu")


def test_extra_targets_reclassify_a_module(tmp_path: Path) -> None:
    with rlscope.profile(tmp_path, targets={"numpy": "simulator"}):
        np.zeros(2)
    assert calls(tmp_path) == {"SIMULATOR:zeros": 1}


def _written_fraction(array: np.ndarray, nbytes: int) -> float:
    """The share of the pages under ``nbytes`` from ``array``'s data that this process has
    written (present or swapped out, from /proc/self/pagemap): a property of that buffer alone,
    whatever else the process allocates or the machine reclaims meanwhile."""
    page = os.sysconf("SC_PAGE_SIZE")
    first, end = array.ctypes.data // page, -(-(array.ctypes.data + nbytes) // page)
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(first * 8)
        entries = np.frombuffer(pagemap.read((end - first) * 8), dtype=np.uint64)
    return float(((entries >> np.uint64(62)) != 0).mean())  # bit 63 present, bit 62 swapped


def _faults_of(action) -> int:
    """Page faults this thread took while doing ``action()`` (no other thread's count)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    action()
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before


@pytest.mark.skipif(not Path("/proc/self/pagemap").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("recorder", ["Operations", "Collector"])
def test_native_buffers_are_resident_from_the_start(recorder: str) -> None:
    """A fresh session's events cost what calibration measured in a long run's: its buffer is
    allocated whole and written at creation, not grown (copied) and page-faulted while recording;
    a session's last drain prepares no buffer it would throw away."""
    from rlscope import _hotpath

    rows = 1 << 20  # 72 MiB: a fresh mapping, resident only once written
    if recorder == "Operations":
        buffer = _hotpath.Operations(lambda name: 0, lambda: None, rows)
    else:
        buffer = _hotpath.Collector(lambda func: None, None, lambda: None, rows)
    size = rows * 9 * 8  # a chunk of rows of 9 int64
    assert buffer.pending() == 0
    drained: list[np.ndarray] = []  # each drain hands over the buffer it took, its pages still mapped
    refilling = _faults_of(lambda: drained.append(buffer.drain()))  # the next buffer is prepared as the first was
    last = _faults_of(lambda: drained.append(buffer.drain(refill=False)))
    first, second = drained
    assert len(first) == len(second) == 0 and first.ctypes.data != second.ctypes.data
    assert _written_fraction(first, size) == _written_fraction(second, size) == 1.0  # written before any row
    # The last drain leaves nothing behind: it touches none of the pages a refill writes (one
    # fault per 2 MiB page at the least, where transparent huge pages are always on).
    assert refilling >= size // (2 << 20) and last < refilling / 4, (refilling, last)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.11's profile hook sees builtins only")
def test_a_callable_the_program_drops_dies_while_its_calls_are_recorded(tmp_path: Path) -> None:
    """Classifications are cached per callable, weakly: keeping the program's callables alive would
    change the program (TorchDynamo's compilation failed its global-state check when it did)."""
    import functools
    import gc
    import weakref

    with rlscope.profile(tmp_path, transitions=True, gpu=False):
        square = functools.lru_cache(lambda v: v * v)  # a C callable with a name: cached by address
        assert square(3) == 9
        alive = weakref.ref(square)
        del square
        gc.collect()
        assert alive() is None
        again = functools.lru_cache(lambda v: v + 1)  # may take the address the last one had
        assert again(3) == 4


@pytest.mark.skipif(sys.version_info < (3, 12), reason="the failure was in sys.monitoring's collector (3.12+)")
def test_torch_compile_traces_a_grad_mode_block_while_transitions_are_recorded(tmp_path: Path) -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.set_grad_enabled(False):
                x = x * 2
            return self.layer(x)

    net = Net()
    net.compile()
    with rlscope.profile(tmp_path, transitions=True, gpu=False), torch.no_grad():
        assert net(torch.zeros(3, 4)).shape == (3, 2)


def _operations() -> object:
    from rlscope import _hotpath

    return _hotpath.Operations(lambda name: 0, lambda: None, 1000)


def test_cache_modes_say_what_a_classification_depends_on() -> None:
    import functools
    import operator

    from rlscope.collect.python import CACHE_CALLABLE, CACHE_FUNCTION_AND_TYPE, CACHE_NOT, CACHE_TYPE, cache_mode

    assert cache_mode(len) == cache_mode(np.cos) == CACHE_CALLABLE  # definitions
    assert cache_mode(operator.itemgetter(1)) == CACHE_TYPE  # a C instance: all it has is its type's
    assert cache_mode(_operations().pending) == CACHE_FUNCTION_AND_TYPE  # nanobind's bound method
    assert cache_mode(functools.partial(print)) == CACHE_NOT  # an instance with a __dict__ of its own


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.11's profile hook sees builtins only")
def test_callable_instances_and_new_bound_methods_are_classified_once(tmp_path: Path, monkeypatch) -> None:
    """jaxlib calls callable instances (StrongLRUCache) and nanobind methods bound anew at every
    call; each call the native cache missed was classified in Python, twice (call and return)."""
    import collections
    import operator

    classified: collections.Counter[str] = collections.Counter()
    original = TransitionCollector._classify_for_native

    def counting(self: TransitionCollector, func: object, arg0: object = None) -> tuple[int, int, int]:
        classified[type(func).__name__] += 1
        return original(self, func, arg0)

    monkeypatch.setattr(TransitionCollector, "_classify_for_native", counting)
    operations, first = _operations(), operator.itemgetter(0)
    with rlscope.profile(tmp_path, gpu=False, targets={"operator": "backend", "rlscope._hotpath": "simulator"}):
        for i in range(200):
            operator.itemgetter(i % 3)((1, 2, 3))  # a new instance each time, as jaxlib's caches are not
            first((1,))
            pending = operations.pending  # a bound method made here, as `with` makes __exit__'s
            pending()
    recorded = calls(tmp_path)
    # itemgetter: 200 constructions (the type is called) and 400 calls of instances
    assert recorded["BACKEND:itemgetter"] == 600 and recorded["SIMULATOR:Operations.pending"] == 200
    assert classified["itemgetter"] == 1 and classified["nb_bound_method"] == 1


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.11's profile hook does not report nanobind calls")
@pytest.mark.parametrize("native", [True, False])
def test_a_nanobind_method_called_on_an_instance_is_its_class_s_call(tmp_path: Path, native: bool) -> None:
    """``x.block_until_ready()`` on a jax array: 3.12+ reports jaxlib's unbound nanobind method,
    which names no module, class or name of its own, with ``x`` as the first argument. It is how
    a JAX program waits for XLA's result, so missing it counted that wait as Python."""
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.ones(3)

    def workload() -> None:
        for _ in range(5):
            x.block_until_ready()

    recorded = _recorded_calls(tmp_path / str(native), native, workload)
    assert recorded.get("BACKEND:ArrayImpl.block_until_ready") == 5, recorded


def test_a_bound_method_that_names_nothing_is_named_after_its_class() -> None:
    """jaxlib's bound methods (nanobind's ``nb_bound_method``) have no name of their own: the
    call is named after the class that defines the method, found from the bound instance."""
    from rlscope.collect.python import _name_of, _owner_attribute

    jnp = pytest.importorskip("jax.numpy")
    x = jnp.ones(3)
    method = x.block_until_ready
    assert _name_of(method) == "ArrayImpl.block_until_ready"
    owner, attribute = _owner_attribute(method.__func__, x)
    assert attribute == "block_until_ready" and owner.__module__.startswith("jaxlib")
    assert _owner_attribute(method.__func__, 3) is None  # not an attribute of int's classes


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.11's profile hook does not report nanobind calls")
@pytest.mark.parametrize("native", [True, False])
def test_bound_nanobind_methods_keep_their_own_names(tmp_path: Path, native: bool) -> None:
    """jaxlib's bound methods are all named "": two of them are two calls, each under its own
    name, in the native collector and its Python twin alike."""
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.ones(3)

    def workload() -> None:
        wait, deleted = x.block_until_ready, x.is_deleted
        for _ in range(3):
            wait()
        for _ in range(2):
            deleted()

    recorded = _recorded_calls(tmp_path / str(native), native, workload)
    assert recorded.get("BACKEND:ArrayImpl.block_until_ready") == 3, recorded
    assert recorded.get("BACKEND:ArrayImpl.is_deleted") == 2, recorded


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.11's profile hook does not report nanobind calls")
@pytest.mark.parametrize("native", [True, False])
def test_a_nanobind_method_called_on_a_stranger_once_is_still_seen_on_its_own_objects(tmp_path: Path,
                                                                                     native: bool) -> None:
    """The method called on an object that does not hold it (a TypeError) says nothing of whose it
    is: that miss is not remembered, so its calls on arrays are recorded afterwards."""
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.ones(3)

    def workload() -> None:
        with pytest.raises(TypeError):
            type(x).block_until_ready(1)
        for _ in range(4):
            x.block_until_ready()

    recorded = _recorded_calls(tmp_path / str(native), native, workload)
    assert recorded.get("BACKEND:ArrayImpl.block_until_ready") == 4, recorded
