"""Python -> native transitions: the intervals Python spends inside calls into target C modules.

Targets are module prefixes mapped to a category (Backend or Simulator). Nothing in the
frameworks is patched: on Python 3.12+ the collector is a ``sys.monitoring`` tool listening to
CALL / C_RETURN / C_RAISE that returns ``DISABLE`` at every call site whose callee is not a
target, so after warm-up only target call sites cost anything; on 3.11 it is a profile function
(``sys.setprofile`` and ``threading.setprofile``) that reacts to ``c_call`` / ``c_return`` /
``c_exception`` only.

A call site whose callee changes between calls is classified by its first callee on 3.12+.
"""

from __future__ import annotations

import sys
import threading
import time
import types
import warnings
from collections.abc import Mapping
from typing import Any

from rlscope.errors import RlscopeError
from rlscope.trace.schema import Category, Kind
from rlscope.trace.writer import TraceWriter

__all__ = ["DEFAULT_TARGETS", "TransitionCollector", "classify_module", "parse_targets"]

DEFAULT_TARGETS: dict[str, Category] = {
    "torch": Category.BACKEND,
    "jax": Category.BACKEND,
    "jaxlib": Category.BACKEND,
    "numpy": Category.BACKEND,
    "tensorflow": Category.BACKEND,
    "cupy": Category.BACKEND,
    "mujoco": Category.SIMULATOR,
    "ale_py": Category.SIMULATOR,
    "pybullet": Category.SIMULATOR,
    "Box2D": Category.SIMULATOR,
    "rlscope._cartpole_cpu": Category.SIMULATOR,
}

_PY_CALLABLES = (types.FunctionType, types.MethodType, types.CodeType)


def parse_targets(spec: str) -> dict[str, Category]:
    """Parse ``"module=category,..."`` (category: backend or simulator) into a target mapping.

    This is how ``rlscope prof --target`` and $RLSCOPE_TARGETS add modules to (or re-classify
    modules of) the default targets.
    """
    targets: dict[str, Category] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        module, _, category = item.partition("=")
        try:
            targets[module.strip()] = Category[category.strip().upper()]
        except KeyError:
            raise RlscopeError(f"target {item!r}: expected MODULE=backend or MODULE=simulator "
                               f"(e.g. mujoco=simulator)") from None
        if not module.strip() or category.strip().upper() == "NONE":
            raise RlscopeError(f"target {item!r}: expected MODULE=backend or MODULE=simulator")
    return targets
_CPU_CALL = int(Kind.CPU_CALL)


def classify_module(module: str | None, targets: Mapping[str, Category]) -> Category | None:
    """The category of the longest target prefix matching ``module`` on a dotted boundary."""
    if not module:
        return None
    best, best_len = None, -1
    for prefix, category in targets.items():
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
            best, best_len = category, len(prefix)
    return best


def _is_native(func: Any) -> bool:
    """True for callables implemented in C/C++ (builtins, descriptors, ufuncs, extension types)."""
    if isinstance(func, _PY_CALLABLES):
        return False
    if isinstance(func, type):
        return not any(isinstance(vars(k).get(m), (types.FunctionType, staticmethod))
                       for k in func.__mro__ for m in ("__init__", "__new__"))
    return not isinstance(getattr(type(func), "__call__", None), types.FunctionType)


def _module_of(func: Any) -> str | None:
    if isinstance(func, type):
        return func.__module__
    owner = getattr(func, "__objclass__", None)
    if owner is not None:
        return owner.__module__
    module = getattr(func, "__module__", None)
    if isinstance(module, str):
        return module
    bound = getattr(func, "__self__", None)
    if isinstance(bound, types.ModuleType):
        return bound.__name__
    if bound is not None:
        return type(bound).__module__
    return type(func).__module__


def _name_of(func: Any) -> str:
    qualname = getattr(func, "__qualname__", None)
    if qualname and "pybind11" not in qualname:  # pybind11 qualnames name its internals
        return qualname
    name = getattr(func, "__name__", None)
    if name:
        return name
    bound = getattr(func, "__self__", None)
    owner = _owner_attribute(getattr(func, "__func__", None), bound) if bound is not None else None
    return f"{owner[0].__qualname__}.{owner[1]}" if owner else type(func).__name__


def _owner_attribute(descriptor: Any, instance: Any) -> tuple[type, str] | None:
    """The class of ``instance``'s MRO that holds ``descriptor`` as an attribute, and its name.

    A nanobind method (all of jaxlib's ArrayImpl methods) carries no module, name or class of
    its own: on 3.12+ ``x.block_until_ready()`` reports the unbound ``nb_method`` with ``x`` as
    the first argument, and a bound one is an ``nb_bound_method`` named after nothing. The class
    that defines it is found from the instance; a descriptor belongs to one class, so the
    answer can be cached per descriptor."""
    if descriptor is None:
        return None
    for cls in type(instance).__mro__:
        for attribute, value in vars(cls).items():
            if value is descriptor:
                return cls, attribute
    return None


def _unsettled(func: Any, arg0: Any) -> bool:
    """Whether a callable that classified as no target might be one when called on another
    instance: a native method that names nothing of its own, called on something that does not
    hold it (``type(x).method(1)``). Such a miss is not remembered."""
    return _is_native(func) and _anonymous_descriptor(func) and (arg0 is None or _owner_attribute(func, arg0) is None)


def _anonymous_descriptor(func: Any) -> bool:
    """A native callable that names no module, owner or bound object: only the instance it is
    called on tells what it belongs to."""
    return (not isinstance(getattr(func, "__module__", None), str) and getattr(func, "__objclass__", None) is None
            and getattr(func, "__self__", None) is None and not isinstance(func, type))


class TransitionCollector:
    """Records one CPU_CALL event per call from Python into a target native module.

    The event handlers run natively (``rlscope._hotpath``); ``native=False`` selects their
    pure-Python twin, which records the same events and is kept as the reference.
    """

    def __init__(self, writer: TraceWriter, targets: Mapping[str, Category] | None = None,
                 native: bool = True) -> None:
        self.writer = writer
        self.targets = dict(DEFAULT_TARGETS if targets is None else targets)
        self.native = native
        # Keyed by the callable, or for a builtin bound to an instance (a new object per call)
        # by (type of the instance, name).
        self._cache: dict[Any, tuple[int, int] | None] = {}
        self._stacks: dict[int, list[int]] = {}
        self._tool_id: int | None = None
        self._impl: Any = None
        self._active = False
        self.paused = False
        self._ignored: int | None = None  # a thread whose calls are not recorded (ignore_thread)
        self.unclassified = 0  # calls to callables whose module or name could not be read: not recorded
        self.first_unclassified = ""

    # Classification -------------------------------------------------------------------------
    def _classify(self, func: Any, arg0: Any = None) -> tuple[int, int] | None:
        """(category, name id) for a target native callable, else None; cached per callable (a
        method bound to an instance: per type of the instance and function bound; a callable
        instance: not cached). ``arg0`` is the call's first argument where the event gives it
        (3.12+)."""
        if _cacheable(func):
            key = func
        elif hasattr(func, "__self__"):
            # nanobind's bound methods all have the name "": keyed by the function they bind
            key = (type(func.__self__), getattr(func, "__func__", None) or getattr(func, "__name__", None))
        else:
            return self._compute(func, arg0)
        try:
            return self._cache[key]
        except KeyError:
            pass
        except TypeError:  # unhashable callable
            return self._compute(func, arg0)
        info = self._compute(func, arg0)
        if info is not None or not _unsettled(func, arg0):
            self._cache[key] = info
        return info

    def _classify_for_native(self, func: Any, arg0: Any = None) -> tuple[int, int, int]:
        """(category, name id, cache mode) for the native collector; category 0: not a target.
        The mode (``cache_mode``) tells it how to reuse the answer, also for a non-target: a
        call the native cache misses comes here, about a microsecond each way."""
        try:
            info = self._compute(func, arg0)
            mode = CACHE_NEVER if info is None and _unsettled(func, arg0) else cache_mode(func)
        except Exception as err:  # an odd callable must never break the profiled program: counted, said at stop
            self.unclassified += 1
            self.first_unclassified = self.first_unclassified or f"{type(func).__name__}: {type(err).__name__}: {err}"
            return 0, 0, CACHE_NOT
        return (0, 0, mode) if info is None else (info[0], info[1], mode)

    def _compute(self, func: Any, arg0: Any = None) -> tuple[int, int] | None:
        if not _is_native(func):
            return None
        category = classify_module(_module_of(func), self.targets)
        if category is None:  # a target's callable object named after what it wraps (jax.jit's PjitFunction)
            category = classify_module(type(func).__module__, self.targets)
        if category is None and arg0 is not None and _anonymous_descriptor(func):
            owner = _owner_attribute(func, arg0)  # a nanobind method called on an instance (x.method())
            if owner is not None and (category := classify_module(owner[0].__module__, self.targets)) is not None:
                return int(category), self.writer.symbol(f"{owner[0].__qualname__}.{owner[1]}")
        if category is None:
            return None
        return int(category), self.writer.symbol(_name_of(func))

    # Pure-Python event handlers (the reference twin of csrc/python/transitions.hpp) ----------
    def _enter(self) -> None:
        tid = threading.get_ident()
        stack = self._stacks.get(tid)
        if stack is None:
            stack = self._stacks[tid] = []
        stack.append(time.perf_counter_ns())

    def _leave(self, info: tuple[int, int]) -> None:
        end = time.perf_counter_ns()
        tid = threading.get_ident()
        stack = self._stacks.get(tid)
        if not stack:  # the call started before the collector did
            return
        start = stack.pop()
        self.writer.rows.append((_CPU_CALL, info[0], tid, len(stack), start, end, info[1], 0, -1))
        # Callbacks raise no monitoring events, so a flush's own numpy/pyarrow calls are not
        # recorded as the workload's.
        self.writer.maybe_flush()

    def _on_call(self, code: Any, offset: int, func: Any, arg0: Any) -> Any:
        if self.paused or threading.get_ident() == self._ignored:
            return None
        if self._classify(func, arg0) is None:
            return sys.monitoring.DISABLE
        self._enter()
        return None

    def _on_c_return(self, code: Any, offset: int, func: Any, arg0: Any) -> None:
        if self.paused or threading.get_ident() == self._ignored:
            return
        info = self._classify(func, arg0)
        if info is not None:
            self._leave(info)

    def _on_profile(self, frame: Any, event: str, arg: Any) -> None:
        if self.paused or threading.get_ident() == self._ignored:
            return
        if event == "c_call":
            if self._classify(arg) is not None:
                self._enter()
        elif event == "c_return" or event == "c_exception":
            info = self._classify(arg)
            if info is not None:
                self._leave(info)

    # Flushing ---------------------------------------------------------------------------------
    def flush_writer(self, started_ns: int | None = None) -> None:
        """Flush the writer from ordinary code, with recording paused meanwhile; ``started_ns``
        as for ``TraceWriter.flush``."""
        if self._impl is not None:
            self._drain(started_ns)
            return
        with self.writer.lock:
            self.paused = True
            try:
                self.writer.flush(started_ns)
            finally:
                self.paused = False

    def _drain(self, started_ns: int | None = None, last: bool = False) -> None:
        """Move natively buffered rows into the writer and write them out. The drain is part of
        the timed write: it prepares the next buffer's memory (``reserve_touched``), except
        the ``last`` one."""
        started = time.perf_counter_ns() if started_ns is None else started_ns
        impl = self._impl
        # Under the writer's lock: two recording threads writing at once would otherwise each
        # restore the other's pause, and recording could stay paused for the rest of the session.
        with self.writer.lock:
            paused, impl.paused = impl.paused, True
            try:
                self.writer.append_block(impl.drain(refill=not last))
                self.writer.flush(started)
            finally:
                impl.paused = paused

    def drain_to_writer(self) -> None:
        """Hand natively buffered rows to the writer, copied out (a time-bound write of a few
        rows, which the session's flusher thread makes: ``ignore_thread``)."""
        if self._impl is not None:
            self.writer.append_block(self._impl.drain(copy=True))

    def ignore_thread(self, ident: int) -> None:
        """Record nothing on thread ``ident``: the session's flusher, whose numpy and pyarrow
        calls are not the workload's, writes while the workload's threads go on being recorded
        (pausing, as a recording thread's own write does, would leave them unrecorded)."""
        self._ignored = ident
        if self._impl is not None:
            self._impl.ignore_thread(ident)

    def _install_in_new_thread(self, frame: Any, event: str, arg: Any) -> None:
        """threading.setprofile hook: hand each new thread over to the native profile function."""
        if self._impl is not None:
            self._impl.install_profile()

    # Lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        if self._active:
            return
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None:
            holder = monitoring.get_tool(monitoring.PROFILER_ID)
            if holder is not None:
                raise RlscopeError(f"cannot intercept Python->native calls: sys.monitoring's profiler slot is held "
                                   f"by {holder!r}; stop that profiler, or profile with --no-transitions")
        elif sys.getprofile() is not None:
            raise RlscopeError("cannot intercept Python->native calls: another profiler is installed "
                               "(sys.getprofile() is set); stop it, or profile with --no-transitions")
        if self.native:
            from rlscope import _hotpath

            disable = monitoring.DISABLE if monitoring is not None else None
            self._impl = _hotpath.Collector(self._classify_for_native, disable, self._drain,
                                                self.writer.chunk_events)
            self._impl.ignore_thread(self._ignored or 0)
        if monitoring is not None:
            tool = self._tool_id = monitoring.PROFILER_ID
            monitoring.use_tool_id(tool, "rlscope")
            on_call, on_return = self._impl.monitoring_callbacks() if self.native else (self._on_call,
                                                                                         self._on_c_return)
            monitoring.register_callback(tool, monitoring.events.CALL, on_call)
            monitoring.register_callback(tool, monitoring.events.C_RETURN, on_return)
            monitoring.register_callback(tool, monitoring.events.C_RAISE, on_return)
            monitoring.set_events(tool, monitoring.events.CALL | monitoring.events.C_RETURN
                                  | monitoring.events.C_RAISE)
            monitoring.restart_events()  # re-enable call sites an earlier session returned DISABLE for
        elif self.native:
            self._impl.install_profile()
            threading.setprofile(self._install_in_new_thread)
        else:
            sys.setprofile(self._on_profile)
            threading.setprofile(self._on_profile)
        self._active = True

    @property
    def switch_leaves_cost(self) -> bool:
        """Whether taking the hooks out or putting them back costs the code that runs next: on
        Python 3.12+ every change of a tool's events makes CPython re-instrument each code object
        when it next runs, and putting CALL back re-arms the call sites returned ``DISABLE``;
        3.11's profile function is swapped at no such cost."""
        return self._tool_id is not None

    def suspend(self) -> None:
        """Take the hooks out until resume(): unlike ``paused``, nothing of the collector runs
        meanwhile, so the interpreter runs as unprofiled (calibration's uninstrumented windows).
        On 3.11 this affects the calling thread only."""
        if self._tool_id is not None:
            sys.monitoring.set_events(self._tool_id, sys.monitoring.events.NO_EVENTS)
        elif self.native:
            self._impl.uninstall_profile()
        else:
            sys.setprofile(None)

    def resume(self) -> None:
        """Put the hooks back after suspend(); call sites found not to be targets stay disabled."""
        if self._tool_id is not None:
            monitoring = sys.monitoring
            monitoring.set_events(self._tool_id, monitoring.events.CALL | monitoring.events.C_RETURN
                                  | monitoring.events.C_RAISE)
        elif self.native:
            self._impl.install_profile()
        else:
            sys.setprofile(self._on_profile)

    def stop(self) -> None:
        """Stop recording and hand every buffered row to the writer."""
        if not self._active:
            return
        if self._tool_id is not None:
            monitoring = sys.monitoring
            monitoring.set_events(self._tool_id, monitoring.events.NO_EVENTS)
            for event in (monitoring.events.CALL, monitoring.events.C_RETURN, monitoring.events.C_RAISE):
                monitoring.register_callback(self._tool_id, event, None)
            monitoring.free_tool_id(self._tool_id)
            self._tool_id = None
        elif self.native:
            self._impl.uninstall_profile()
            threading.setprofile(None)  # type: ignore[arg-type]
        else:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
        if self._impl is not None:
            self._drain(last=True)
            self._impl = None
        self._active = False
        self._stacks.clear()
        if self.unclassified:
            warnings.warn(f"rlscope: {self.unclassified} call(s) to callables whose module or name could not be read "
                          f"were not recorded as transitions (first: {self.first_unclassified})", RuntimeWarning,
                          stacklevel=2)


# How the native collector may reuse a callable's classification (csrc/python/transitions.hpp):
# CACHE_NOT still remembers a non-target (weakly, per callable); CACHE_NEVER remembers nothing.
CACHE_NOT, CACHE_CALLABLE, CACHE_TYPE, CACHE_FUNCTION_AND_TYPE, CACHE_NEVER = 0, 1, 2, 3, 4


def cache_mode(func: Any) -> int:
    """How a callable's classification can be reused: per callable (a definition,
    ``_cacheable``); per type, for a callable instance whose attributes all come from its type
    (no ``__dict__``, no name of its own, not bound: e.g. jaxlib's ``StrongLRUCache``, called
    for every ``jnp`` operation); per underlying function and type of the bound object, for a
    bound method made anew at every call (nanobind's ``nb_bound_method``, all of jaxlib's
    methods); else not at all (``functools.partial`` and other instances with a ``__dict__``).
    Classification reads ``__objclass__``, ``__module__``, ``__self__``, ``__qualname__`` and
    ``__name__``, so these keys decide it; and for a native method that names none of them
    (nanobind's, called as ``x.method()``), the class of the call's first argument that holds it:
    one class per method object, so per callable still decides it. A miss that another first
    argument could turn into a target is not remembered at all (``_unsettled``: CACHE_NEVER)."""
    if _cacheable(func):
        return CACHE_CALLABLE
    bound = getattr(func, "__self__", None)
    if bound is not None:
        return CACHE_FUNCTION_AND_TYPE if hasattr(func, "__func__") else CACHE_NOT
    if hasattr(func, "__dict__") or hasattr(func, "__name__") or hasattr(func, "__qualname__"):
        return CACHE_NOT
    return CACHE_TYPE


def _cacheable(func: Any) -> bool:
    """Whether a callable's classification is cached. Definitions are (functions, builtins,
    types, ufuncs: what has a ``__name__``), unless bound to an instance; callable instances are
    not (partials, weak references, modules, context managers): the pure-Python collector's cache
    keeps its keys alive, and keeping the program's short-lived objects alive changes the program
    (TorchDynamo's tracing failed its global-state check). The native cache holds weak references."""
    if not isinstance(getattr(func, "__name__", None), str):
        return False
    bound = getattr(func, "__self__", None)
    return bound is None or isinstance(bound, (types.ModuleType, type))
