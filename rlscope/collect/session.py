"""A profiling session of one process: its trace files, operation stacks, phases and collectors.

Layout: ``DIRECTORY/<process>.<pid>/{meta.json, events.arrows}``. ``meta.json`` is written at
start with ``complete: false`` and rewritten at the end, so an analysis can tell a crashed
process from a finished one.
"""

from __future__ import annotations

import os
import platform
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlscope import _hotpath, recorder
from rlscope._version import __version__
from rlscope.collect.environment import (ENV_GPU, ENV_JAX_SCOPES, ENV_PROCESS, ENV_TARGETS, ENV_TRANSITIONS,
                                         ENV_UNTIL_FIRST_STEP, ENV_SAMPLE, ENV_WINDOWS)
from rlscope.collect.cupti import FULL_BUFFER_BYTES, SAMPLED_BUFFER_BYTES, GpuCollector, buffer_bytes_from_env
from rlscope.collect.flusher import Flusher, flush_interval_s
from rlscope.collect.gpu_layers import parse_gpu_layers
from rlscope.collect.jax_scopes import JaxScopes, parse_jax_scopes
from rlscope.collect.nvml import UtilisationSampler
from rlscope.collect.python import DEFAULT_TARGETS, TransitionCollector, parse_targets
from rlscope.collect.sampling import SampledWindows, SampleSpec, parse_sample
from rlscope.collect.unseen import UNSEEN_CALLS, unseen_targets
from rlscope.collect.windows import AlternatingWindows, parse_windows
from rlscope.errors import NestingError
from rlscope.files import write_json_atomic
from rlscope.machine import machine_identity
from rlscope.trace.schema import EVENTS_FILE, META_FILE, SCHEMA_VERSION, Category, Kind
from rlscope.trace.writer import TraceWriter

__all__ = ["Session", "WallClock", "DEFAULT_PHASE", "start_session"]

DEFAULT_PHASE = "default"


def _process_name() -> str:
    """The script's name, or the module's for `python -m pkg.module` (at interpreter start
    sys.argv[0] is still "-m" then); `python -c` and multiprocessing's helpers are just "python"."""
    script = sys.argv[0] if sys.argv else ""
    if script == "-m":
        args = list(getattr(sys, "orig_argv", []))
        module = args[args.index("-m") + 1] if "-m" in args[:-1] else ""
        return module.rpartition(".")[2] or "python"
    return Path(script).stem if script and script not in ("-c", "-") else "python"


def _end_process() -> None:
    """End a calibration start-up run at its first step, exit status 0, with its output written
    but without running the rest of the program's shutdown (its atexit handlers included)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class WallClock:
    """An uninstrumented process's trace: its wall time, in the same meta.json, and no events.

    Calibration compares the profiled configurations with this; everything else rlscope does
    stays off, so the process runs as it would without rlscope.
    """

    def __init__(self, directory: Path, process: str | None = None, until_first_step: bool = False) -> None:
        self.start_ns = time.perf_counter_ns()
        self.first_step_ns: int | None = None
        self.until_first_step = until_first_step
        self.dir = directory / f"{process or _process_name()}.{os.getpid()}"
        self.process = process or _process_name()

    def rename(self, process: str) -> None:
        """Name the process in its results (``rlscope.profile(process=...)``)."""
        self.process = process

    def first_step(self) -> None:
        """The first rlscope.step(): remembered, then step() is a no-op again. Validation compares
        runs from here on too, without the interpreter's start-up (imports, CUDA initialisation),
        whose time varies by seconds between identical runs.

        ``until_first_step``: the process ends here (its meta written, exit status 0), as
        calibration measures the uninstrumented start-up with no more of the run than that."""
        self.first_step_ns = time.perf_counter_ns()
        _hotpath.bind_step()
        if self.until_first_step:
            self.stop()
            _end_process()

    def stop(self) -> None:
        end = time.perf_counter_ns()
        self.dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.dir / META_FILE, {
            "schema_version": SCHEMA_VERSION, "rlscope_version": __version__, "process": self.process,
            "pid": os.getpid(), "host": platform.node(), "python": platform.python_version(),
            "start_ns": self.start_ns, "end_ns": end, "main_tid": threading.get_ident(), "wall_only": True,
            "first_step_ns": self.first_step_ns, "complete": True})


class Session:
    def __init__(self, directory: str | Path, process: str | None = None, phase: str | None = None,
                 transitions: bool = True, targets: Mapping[str, Category] | None = None,
                 gpu: bool | str | None = None, chunk_events: int = 1 << 16,
                 sample: SampleSpec | None = None, jax_scopes: str | None = None) -> None:
        self.root = Path(directory)
        self.process = process or _process_name()
        self.phase = phase or DEFAULT_PHASE
        self.transitions = transitions
        self.targets = {**DEFAULT_TARGETS, **(targets or {})}
        self.gpu = parse_gpu_layers(os.environ.get(ENV_GPU) if gpu is None else gpu)
        self.jax_scopes = parse_jax_scopes(jax_scopes)
        if self.jax_scopes == "precise" and self.gpu:  # XLA's per-thunk NVTX ranges, through CUPTI
            self.gpu = self.gpu | {"nvtx"}
        self._jax: JaxScopes | None = None
        self.chunk_events = chunk_events
        self._collector: TransitionCollector | None = None
        self._gpu: GpuCollector | None = None
        self._sampler: UtilisationSampler | None = None
        self.sample = sample
        self.buffer_bytes = buffer_bytes_from_env(SAMPLED_BUFFER_BYTES if sample is not None else FULL_BUFFER_BYTES)
        self._windows: AlternatingWindows | SampledWindows | None = None
        self._flusher: Flusher | None = None
        self._until_first_step = False
        self._forked = False
        self._phase_start = 0
        self.active = False

    def rename(self, process: str) -> None:
        """Name the process in its results (``rlscope.profile(process=...)`` under ``rlscope prof``,
        which started the session before the script could name it); the trace folder keeps the
        name it was created with."""
        self.process = process
        if self.active:
            self._meta["process"] = process

    # Lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        flush_interval = flush_interval_s()
        self.pid = os.getpid()
        self.dir = self.root / f"{self.process}.{self.pid}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.writer = TraceWriter(self.dir / EVENTS_FILE, self.chunk_events)
        self.start_ns = self._phase_start = time.perf_counter_ns()
        self._meta = {
            "schema_version": SCHEMA_VERSION,
            "rlscope_version": __version__,
            "process": self.process,
            "pid": self.pid,
            "ppid": os.getppid(),
            "argv": sys.argv,
            "python": platform.python_version(),
            "host": platform.node(),
            "machine": machine_identity(),  # tells apart machines of one host name (calibrations check it)
            "clock": "perf_counter_ns (CLOCK_MONOTONIC)",
            "start_ns": self.start_ns,
            "start_unix_s": time.time(),
            "main_tid": threading.get_ident(),
            "transitions": self.transitions,
            "targets": {module: category.name.lower() for module, category in self.targets.items()},
            "transition_mechanism": ("sys.monitoring" if hasattr(sys, "monitoring") else "sys.setprofile")
            if self.transitions else None,
            "complete": False,
        }
        write_json_atomic(self.dir / META_FILE, self._meta)
        self._ops = _hotpath.Operations(self.writer.symbol, self._flush, self.chunk_events)
        self.enter = self._ops.enter
        self.exit = self._ops.exit
        self.active = True
        try:
            self._start_gpu()
            if self.jax_scopes and not self._forked:  # a forked child has its parent's XLA flags and dump
                self._jax = JaxScopes(self.jax_scopes, self.dir)
                self._jax.start(self._gpu.library if self._gpu is not None else None)
        except BaseException:
            self._stop_gpu()
            self.active = False
            self._release_recorder()
            self.writer.close()
            raise
        if self.transitions:
            self._collector = TransitionCollector(self.writer, self.targets)
            self._collector.start()
        if spec := os.environ.get(ENV_WINDOWS):  # calibration: layers switched on and off as it runs
            self._windows = AlternatingWindows(self, *parse_windows(spec))
        elif self.sample is not None:  # a long run: everything only in sampled windows
            self._windows = SampledWindows(self, self.sample, self.dir)
            self._meta["sample"] = self._windows.spec.text()  # with the seed drawn, if none was given
        # calibration: the process ends at its first rlscope.step() (a profiled start-up, timed)
        self._until_first_step = os.environ.get(ENV_UNTIL_FIRST_STEP) == "1"
        if flush_interval < float("inf"):  # events written within about a second (collect.flusher)
            self._flusher = Flusher(self.writer, self._flush_on_time, flush_interval)
            flusher_thread = self._flusher.start()
            if self._collector is not None:
                self._collector.ignore_thread(flusher_thread)

    def stop(self, check_nesting: bool = True) -> None:
        if not self.active:
            return
        if self._flusher is not None:
            self._flusher.stop()
            self._flusher = None
        end = time.perf_counter_ns()
        if self._windows is not None:
            self._windows.close(self.dir)
            self._windows = None
        if self._collector is not None:
            self._collector.stop()
            if self._meta["transition_mechanism"] == "sys.setprofile":  # what 3.11 could not see, for the tables
                self._meta[UNSEEN_CALLS] = unseen_targets(self.targets)
        self._stop_gpu()
        if self._jax is not None:
            self._meta["jax_scopes"] = self._jax.stop()
            self._jax = None
        self.active = False
        self.writer.record(int(Kind.PHASE), self._phase_start, end, self.phase, tid=self._meta["main_tid"])
        self._ops.close_step(self.phase, end)
        open_ops = self._ops.open_operations()
        self.writer.append_block(self._ops.drain(refill=False))
        self._release_recorder()
        self.writer.close()
        self._meta.update(complete=True, end_ns=end, events=self.writer.events_written,
                          unclosed_operations={str(k): v for k, v in open_ops.items()})
        write_json_atomic(self.dir / META_FILE, self._meta)
        if open_ops and check_nesting:
            names = ", ".join(repr(n) for ops in open_ops.values() for n in ops)
            raise NestingError(f"profiling stopped while operation(s) {names} were still open; "
                               f"close every rlscope.operation() before leaving rlscope.profile()")

    def abandon_after_fork(self) -> None:
        """In a forked child: drop the parent's buffered events and files, then start afresh."""
        self.writer.abandon()  # first: stopping the collector below flushes into it
        if self._collector is not None:
            self._collector.stop()
        if self._gpu is not None:
            self._gpu.abandon()
        if self._jax is not None:
            self._jax.abandon_after_fork()
        self._gpu = self._sampler = self._flusher = self._jax = None  # their threads did not survive the fork
        self._forked = True
        inherited = self._ops.current_stack()  # operations this thread had open at the fork
        self._release_recorder()
        self.active = False
        self.start()
        for name, start in inherited:
            self._ops.push(name, start)

    def _start_gpu(self) -> None:
        """GPU activity and utilisation, before the transition collector so that none of this is recorded."""
        if not self.gpu:
            self._meta["gpu"] = {"status": "off", "reason": f"switched off ({ENV_GPU}=0 or gpu=False)"}
            return
        if self._forked:  # CUDA and CUPTI do not survive fork(); spawned children trace their GPU work
            self._meta["gpu"] = {"status": "off", "reason": "forked child process"}
            return
        gpu = GpuCollector(self.dir, self.gpu, buffer_bytes=self.buffer_bytes)
        if gpu.start(self._ops):
            self._gpu = gpu
            self._sampler = UtilisationSampler(self.dir)
            self._sampler.start()
            self._meta["utilisation"] = self._sampler.meta
        self._meta["gpu"] = gpu.meta

    def _stop_gpu(self) -> None:
        if self._gpu is not None:
            self._gpu.stop()
            self._gpu = None
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler = None

    # Annotations ----------------------------------------------------------------------------
    # ``enter(name)`` and ``exit(name)`` are the native recorder's methods, bound in start():
    # rlscope.operation() calls them directly. ``exit`` returns None, or the name of the
    # operation still open inside ``name``, for the caller to report with nesting_error().

    def nesting_error(self, name: str, top: str) -> None:
        if not top and self._windows is not None:
            return  # it began while calibration had annotations off
        if not top:
            raise NestingError(f"operation {name!r} ended but was never started on this thread")
        raise NestingError(f"operation {name!r} ended while {top!r}, started inside it, was still open; "
                           f"operations must nest (close {top!r} first)")

    def _release_recorder(self) -> None:
        """Break the session <-> native recorder reference cycle (native objects are not GC-tracked)."""
        del self.enter, self.exit
        self._ops = None

    def _flush(self) -> None:
        """Write out buffered rows (called by the native recorder when its buffer is full); the
        write is timed from before the drain, which prepares the next buffer's memory."""
        started = time.perf_counter_ns()
        with self.writer.lock:  # the flusher's writes wait, or this does
            self.writer.append_block(self._ops.drain())
            if self._collector is not None:
                self._collector.flush_writer(started)  # pauses recording: the flush's own calls are not the workload's
            else:
                self.writer.flush(started)

    def _flush_on_time(self) -> None:
        """The flusher thread's write (``rlscope.collect.flusher``): what the native buffers hold,
        drained and written, unless nothing is new. Nothing is paused: the transition collector
        ignores this thread."""
        with self.writer.lock:
            if not self.active:
                return
            started = time.perf_counter_ns()
            self.writer.append_block(self._ops.drain(copy=True))  # a few rows: the buffer is kept
            if self._collector is not None:
                self._collector.drain_to_writer()
            if self.writer.unwritten:
                self.writer.flush(started)

    def set_phase(self, name: str) -> None:
        now = time.perf_counter_ns()
        if name == self.phase:
            return
        self.writer.record(int(Kind.PHASE), self._phase_start, now, self.phase, tid=self._meta["main_tid"])
        self._ops.close_step(self.phase, now)
        self.phase, self._phase_start = name, now
        _hotpath.set_step_phase(name)

    def bind_step(self) -> None:
        """Make rlscope.step() record this session's iterations (and switch calibration's windows,
        or end a start-up run of calibration at its first step)."""
        windows = self._windows
        if self._until_first_step:
            _hotpath.bind_step(self._ops, self.phase, on_window=self._end_at_first_step, window_ms=0.0)
            return
        _hotpath.bind_step(self._ops, self.phase, on_window=windows.on_window if windows else None,
                           window_ms=getattr(windows, "window_ms", 0.0))  # sampled windows count steps

    def _end_at_first_step(self, start_ns: int, end_ns: int, iterations: int) -> None:
        """Stop profiling (the trace holds the start-up and a first iteration ending here) and end
        the process, exit status 0: operations still open (a loop inside one) are no error."""
        recorder.bind(None)
        self.stop(check_nesting=False)
        _end_process()


def start_session(directory: Path, process: str | None = None, phase: str | None = None,
                  transitions: bool | None = None, targets: str = "", gpu: bool | str | None = None,
                  sample: Any = None, jax_scopes: bool | str | None = None) -> Session:
    """Start profiling this process into ``directory``; what the arguments leave open comes from
    the environment `rlscope prof` sets (``ENV_PROCESS``, ``ENV_TRANSITIONS``, ``ENV_TARGETS``,
    ``ENV_SAMPLE``, ``ENV_JAX_SCOPES``). ``sample``: see ``rlscope.collect.sampling.parse_sample`` (None or
    False: no sampling); ``jax_scopes``: see ``rlscope.collect.jax_scopes.parse_jax_scopes``."""
    if transitions is None:
        transitions = os.environ.get(ENV_TRANSITIONS, "1") != "0"
    extra = parse_targets(",".join(filter(None, (os.environ.get(ENV_TARGETS, ""), targets))))
    if sample is None:
        sample = os.environ.get(ENV_SAMPLE) or None
    if jax_scopes is None:
        jax_scopes = os.environ.get(ENV_JAX_SCOPES) or None
    session = Session(directory, process=process or os.environ.get(ENV_PROCESS), phase=phase,
                      transitions=transitions, targets=extra, gpu=gpu,
                      sample=parse_sample(sample) if sample not in (None, False) else None,
                      jax_scopes=jax_scopes)
    session.start()
    return session
