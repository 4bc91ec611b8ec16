"""Which targets' calls Python 3.11's profile hook cannot see: recorded in meta.json so that
every table made from the trace can say so on the rows they falsify.

3.11 reports ``c_call`` only when the callee is a builtin function or a method descriptor (a
pybind11 method too: the interpreter unwraps the bound method around its builtin). Any other
native callable runs unseen: ufuncs and numpy's array-function dispatchers, Cython functions
(numpy.random), nanobind functions and methods (all of jaxlib, ale-py, rlscope's C++ CartPole),
callable objects such as ``jax.jit``'s ``PjitFunction``. Their time counts as Python and their
calls as no transition; 3.12's ``sys.monitoring`` sees them all.

Whether a process could have made such calls is read from what it imported, at the end of
profiling: the extension modules of each target, whose callables are all native, so that a
callable's type alone decides (module-level callables, and the methods of the classes the module
defines). Python modules are not scanned: what they hold of the kind is an extension module's.
Left out, as they cannot decide anything: constructors (every extension module defines types, and
3.11 sees no constructor, native or not) and special methods (operators, which no version
reports). The scan stops at a few examples per target and reads only ``vars()``, so it costs
milliseconds, after the profiled time has ended.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
import warnings
from collections.abc import Mapping
from typing import Any

from rlscope.trace.schema import Category

__all__ = ["UNSEEN_CALLS", "unseen_targets", "invisible_to_setprofile"]

UNSEEN_CALLS = "unseen_calls"  # meta.json: {target: {"category": ..., "examples": [...]}}; only with sys.setprofile
_EXAMPLES = 3

# What 3.11 reports, with pybind11's ``instancemethod`` (``invisible_to_setprofile``).
_SEEN = (types.BuiltinFunctionType, types.MethodDescriptorType, types.ClassMethodDescriptorType)
# Not calls of native code, or not the kind that decides (see the module's docstring).
_NOT_DECIDING = (type, types.ModuleType, types.FunctionType, types.MethodType, staticmethod, classmethod, property,
                 types.WrapperDescriptorType, types.MethodWrapperType, types.GetSetDescriptorType,
                 types.MemberDescriptorType)


def invisible_to_setprofile(value: Any) -> bool:
    """Whether ``value``, found in an extension module, is a native callable whose calls 3.11's
    profile hook does not report."""
    if isinstance(value, _SEEN + _NOT_DECIDING) or not callable(value):
        return False
    kind = type(value)  # pybind11's methods: an instancemethod binds them to a method object, which 3.11 unwraps
    return not (kind.__name__ == "instancemethod" and kind.__module__ == "builtins")


def _target_of(module: str, targets: Mapping[str, Any]) -> str | None:
    """The longest target prefix of ``module`` on a dotted boundary."""
    found = None
    for prefix in targets:
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(found or ""):
            found = prefix
    return found


def _unseen_in(module: types.ModuleType, limit: int) -> list[str]:
    """Up to ``limit`` callables of ``module`` (and of the classes it defines) that 3.11 cannot see."""
    found: list[str] = []
    name = module.__name__
    for attr, value in list(vars(module).items()):
        if isinstance(value, type) and value.__module__ == name:
            for method, member in list(vars(value).items()):
                if method.startswith("__") and method.endswith("__"):
                    continue
                if isinstance(member, value) or type(member).__qualname__.startswith(value.__qualname__ + "."):
                    continue  # an enumeration's members are values, not calls
                if invisible_to_setprofile(member):
                    found.append(f"{name}.{attr}.{method} ({type(member).__name__})")
                    if len(found) >= limit:
                        return found
        elif invisible_to_setprofile(value):
            found.append(f"{name}.{attr} ({type(value).__name__})")
            if len(found) >= limit:
                return found
    return found


def unseen_targets(targets: Mapping[str, Category], modules: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Per target with an imported extension module whose callables 3.11 cannot see: its
    category (``backend`` / ``simulator``) and a few such callables. ``modules``: ``sys.modules``."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    out: dict[str, Any] = {}
    for name, module in list((sys.modules if modules is None else modules).items()):
        target = _target_of(name, targets)
        if target is None or not isinstance(module, types.ModuleType):
            continue
        if not str(getattr(module, "__file__", None) or "").endswith(suffixes):
            continue
        entry = out.get(target)
        room = _EXAMPLES - (len(entry["examples"]) if entry else 0)
        if room <= 0:
            continue
        try:
            found = _unseen_in(module, room)
        except Exception as err:  # a module whose namespace cannot be read decides nothing: said, not hidden
            warnings.warn(f"rlscope: could not read {name}'s namespace ({type(err).__name__}: {err}); whether "
                          f"Python {sys.version_info[0]}.{sys.version_info[1]} saw its calls is not recorded",
                          RuntimeWarning, stacklevel=2)
            continue
        if found:
            entry = out.setdefault(target, {"category": Category(int(targets[target])).name.lower(), "examples": []})
            entry["examples"] += found
    return dict(sorted(out.items()))
