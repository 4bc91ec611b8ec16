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
from collections.abc import Mapping
from typing import Any

from rlscope.errors import RlscopeError
from rlscope.trace.schema import ROW_FIELDS, Category, Kind
from rlscope.trace.writer import TraceWriter

__all__ = ["DEFAULT_TARGETS", "TransitionCollector", "classify_module"]

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
    return getattr(func, "__name__", None) or type(func).__name__


class TransitionCollector:
    """Records one CPU_CALL event per call from Python into a target native module."""

    def __init__(self, writer: TraceWriter, targets: Mapping[str, Category] | None = None) -> None:
        self.writer = writer
        self.targets = dict(DEFAULT_TARGETS if targets is None else targets)
        self._cache: dict[Any, tuple[int, int] | None] = {}
        self._stacks: dict[int, list[int]] = {}
        self._tool_id: int | None = None
        self._active = False
        self._flush_at = writer.chunk_events * len(ROW_FIELDS)

    # Classification -------------------------------------------------------------------------
    def _classify(self, func: Any) -> tuple[int, int] | None:
        """(category, name id) for a target native callable, else None; cached per callable."""
        try:
            return self._cache[func]
        except KeyError:
            pass
        except TypeError:  # unhashable callable
            return self._compute(func)
        info = self._compute(func)
        bound = getattr(func, "__self__", None)
        if bound is None or isinstance(bound, (types.ModuleType, type)):
            self._cache[func] = info  # bound to an instance: caching would keep the instance alive
        return info

    def _compute(self, func: Any) -> tuple[int, int] | None:
        if not _is_native(func):
            return None
        category = classify_module(_module_of(func), self.targets)
        if category is None:
            return None
        return int(category), self.writer.symbol(_name_of(func))

    # Event handlers (hot) ---------------------------------------------------------------------
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
        rows = self.writer.rows
        rows.extend((_CPU_CALL, info[0], tid, len(stack), start, end, info[1], 0, -1))
        if len(rows) >= self._flush_at:
            # Callbacks raise no monitoring events, so the writer's own numpy/pyarrow calls
            # are not recorded as the workload's.
            self.writer.flush()

    # sys.monitoring (3.12+)
    def _on_call(self, code: Any, offset: int, func: Any, arg0: Any) -> Any:
        if self._classify(func) is None:
            return sys.monitoring.DISABLE
        self._enter()
        return None

    def _on_c_return(self, code: Any, offset: int, func: Any, arg0: Any) -> None:
        info = self._classify(func)
        if info is not None:
            self._leave(info)

    # sys.setprofile (3.11)
    def _on_profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            if self._classify(arg) is not None:
                self._enter()
        elif event == "c_return" or event == "c_exception":
            info = self._classify(arg)
            if info is not None:
                self._leave(info)

    # Lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        if self._active:
            return
        if hasattr(sys, "monitoring"):
            mon = sys.monitoring
            tool = mon.PROFILER_ID
            holder = mon.get_tool(tool)
            if holder is not None:
                raise RlscopeError(f"cannot intercept Python->native calls: sys.monitoring's profiler slot is held "
                                   f"by {holder!r}; stop that profiler, or profile with --no-transitions")
            mon.use_tool_id(tool, "rlscope")
            mon.register_callback(tool, mon.events.CALL, self._on_call)
            mon.register_callback(tool, mon.events.C_RETURN, self._on_c_return)
            mon.register_callback(tool, mon.events.C_RAISE, self._on_c_return)
            mon.set_events(tool, mon.events.CALL | mon.events.C_RETURN | mon.events.C_RAISE)
            mon.restart_events()  # re-enable call sites an earlier session returned DISABLE for
            self._tool_id = tool
        else:
            if sys.getprofile() is not None:
                raise RlscopeError("cannot intercept Python->native calls: another profiler is installed "
                                   "(sys.getprofile() is set); stop it, or profile with --no-transitions")
            sys.setprofile(self._on_profile)
            threading.setprofile(self._on_profile)
        self._active = True

    def stop(self) -> None:
        if not self._active:
            return
        if self._tool_id is not None:
            mon = sys.monitoring
            mon.set_events(self._tool_id, mon.events.NO_EVENTS)
            for event in (mon.events.CALL, mon.events.C_RETURN, mon.events.C_RAISE):
                mon.register_callback(self._tool_id, event, None)
            mon.free_tool_id(self._tool_id)
            self._tool_id = None
        else:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
        self._active = False
        self._stacks.clear()
