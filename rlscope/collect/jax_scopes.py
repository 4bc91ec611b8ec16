"""What a process records so that the analysis can see inside ``jax.jit`` (``rlscope prof --jax-scopes``).

XLA names each kernel it generates after the HLO instruction it emits, and every instruction keeps
the ``jax.named_scope`` path it was traced under (``rlscope.analyze.hlo``). So the default mode
adds no runtime hook at all: XLA's own dump (``--xla_dump_to``) writes the optimised HLO of every
module it compiles into the trace, and a ``jax.monitoring`` listener notes when each backend
compile ran, so that kernels autotuning launches at compile time are told apart from the step's.
The dump was chosen over capturing ``Compiled.as_text()`` through a wrapper of ``jax.jit``: it
sees every module XLA compiles (nested jit, eager operations, whatever a library jits) with
nothing on the call path, and costs only files written at compile time. Its price is that XLA
reads its flags once, when JAX starts its backends, so profiling must begin before the first
JAX computation; and a module loaded from JAX's persistent compilation cache is never compiled,
so never dumped: the cache is switched off for profiled processes.

The precise mode also records XLA's per-thunk NVTX ranges (``Thunk:#name=<scope path>,
hlo_op=<instruction>#``): ``NVTX_INJECTION64_PATH`` names the libcupti in use, so that NVTX calls
reach CUPTI as marker activity, and command buffers are switched off
(``--xla_gpu_enable_command_buffer=``), so that each thunk is launched, and annotated, on its
own. That joins every kernel, cuBLAS's included, to its instruction through the launch, but it
changes how XLA runs the step: it is opt-in.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rlscope.errors import RlscopeError
from rlscope.trace.schema import XLA_COMPILES_FILE, XLA_DIR, XLA_MODULE_GLOB

__all__ = ["JAX_SCOPES_MODES", "JaxScopes", "parse_jax_scopes"]

JAX_SCOPES_MODES = ("default", "precise")
# jax.monitoring's event for XLA compiling one module (jax/_src/dispatch.py, BACKEND_COMPILE_EVENT).
_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
# XLA flags this mode sets; any the environment already had are replaced, not repeated.
_DUMP_FLAGS = ("--xla_dump_to=", "--xla_dump_hlo_as_text")
_COMMAND_BUFFER_FLAG = "--xla_gpu_enable_command_buffer="
# What start() sets for this process only, put back so that processes started later (not
# profiled, or profiled into their own folders) do not dump into this one's: XLA's flags once XLA
# has read them (by its first compile), NVTX's injection when profiling stops (NVTX reads it at
# its first call, which nothing here observes).
_READ_BY_FIRST_COMPILE = ("XLA_FLAGS", "JAX_ENABLE_COMPILATION_CACHE")
_SET = (*_READ_BY_FIRST_COMPILE, "NVTX_INJECTION64_PATH")


def parse_jax_scopes(value: bool | str | None) -> str | None:
    """The mode asked for: None (off) for None, False, "" or "0"; "default" for True, "1", "on" or
    "default"; "precise" for "precise"."""
    if value is None or value is False or value in ("", "0"):
        return None
    if value is True or value in ("1", "on", "default"):
        return "default"
    if value == "precise":
        return "precise"
    raise RlscopeError(f"jax-scopes {value!r}: use default or precise (rlscope prof --jax-scopes[=precise], or "
                       "rlscope.profile(jax_scopes=True or 'precise'))")


def _backends_started() -> bool:
    bridge = sys.modules.get("jax._src.xla_bridge")
    started = getattr(bridge, "backends_are_initialized", None)
    return bool(started()) if callable(started) else False


class JaxScopes:
    """One process's recording for jax-scopes: XLA's flags at ``start``, a compile listener, and the
    dump pruned to the optimised modules at ``stop``."""

    def __init__(self, mode: str, directory: Path) -> None:
        self.mode = mode
        self.dump = directory / XLA_DIR
        self.meta: dict[str, Any] = {"mode": mode, "dump": XLA_DIR}
        self._compiles = 0
        self._lock = threading.Lock()
        self._listening = False
        self._active = False
        self._saved: dict[str, str | None] | None = None

    def start(self, libcupti: str | None) -> None:
        """Set XLA's flags (and NVTX's injection in the precise mode) for this process, put back
        once read (``_SET``); listen for compiles once JAX is imported. ``libcupti``: the path of
        the libcupti the GPU collector loaded (None without GPU collection)."""
        if _backends_started():
            raise RlscopeError("jax-scopes: JAX has already started its backends in this process, and XLA reads "
                               "its dump flags only then; start profiling before the first JAX computation "
                               "(rlscope prof --jax-scopes starts it before the script runs)")
        self.dump.mkdir(parents=True, exist_ok=True)
        self._saved = {name: os.environ.get(name) for name in _SET}
        precise = self.mode == "precise" and libcupti is not None
        own = _DUMP_FLAGS + ((_COMMAND_BUFFER_FLAG,) if precise else ())
        flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(own)]
        flags += [f"--xla_dump_to={self.dump}", "--xla_dump_hlo_as_text"]
        if precise:
            flags.append(_COMMAND_BUFFER_FLAG)
            os.environ["NVTX_INJECTION64_PATH"] = libcupti
        elif self.mode == "precise":
            self.meta["precise"] = "off: no GPU collection, so no NVTX ranges"
        os.environ["XLA_FLAGS"] = " ".join(flags)
        os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
        self._active = True
        if not self._listening:
            import wrapt

            wrapt.when_imported("jax")(self._listen)  # now if JAX is imported already

    def _listen(self, jax: Any) -> None:
        import jax.monitoring

        jax.config.update("jax_enable_compilation_cache", False)  # JAX read the variable if imported before start()
        jax.monitoring.register_event_duration_secs_listener(self._on_event)
        self._listening = True
        self.meta["jax"] = getattr(jax, "__version__", None)

    def _restore_environment(self, names: tuple[str, ...] = _SET) -> None:
        if self._saved is None:
            return
        for name in names:
            if name not in self._saved:
                continue
            value = self._saved.pop(name)
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def _on_event(self, event: str, duration_s: float, **kwargs: Any) -> None:
        if event != _BACKEND_COMPILE:
            return
        end = time.perf_counter_ns()
        line = json.dumps({"start_ns": end - int(duration_s * 1e9), "end_ns": end, "tid": threading.get_ident(),
                           "function": str(kwargs.get("fun_name", ""))})
        with self._lock:  # stop() prunes the dump under the same lock
            if not self._active:
                return
            self._restore_environment(_READ_BY_FIRST_COMPILE)  # XLA has read its flags by its first compile
            with open(self.dump / XLA_COMPILES_FILE, "a") as compiles:  # one line a compile
                compiles.write(line + "\n")
            self._compiles += 1

    def stop(self) -> dict[str, Any]:
        """Stop noting compiles, put the environment back, and keep only the optimised HLO of each
        module (XLA also dumps LLVM IR, PTX and buffer assignments, many times larger); returns the
        meta entry. XLA keeps dumping the modules it compiles later in this process."""
        with self._lock:
            self._active = False
            self._restore_environment()
            self.meta["compiles"] = self._compiles
        if self._listening:
            import jax.monitoring

            unregister = getattr(jax.monitoring, "unregister_event_duration_listener", None)
            if unregister is not None:  # where JAX has none, the listener stays and does nothing now
                try:
                    unregister(self._on_event)
                except (AssertionError, ValueError):  # already gone (jax.monitoring.clear_event_listeners())
                    pass
            self._listening = False
        if self.dump.is_dir():
            keep = set(self.dump.glob(XLA_MODULE_GLOB)) | {self.dump / XLA_COMPILES_FILE}
            for path in self.dump.iterdir():
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                elif path not in keep:
                    path.unlink(missing_ok=True)
        self.meta["modules"] = len(list(self.dump.glob(XLA_MODULE_GLOB))) if self.dump.is_dir() else 0
        return self.meta

    def abandon_after_fork(self) -> None:
        """In a forked child: stop noting compiles, and leave the parent's dump alone."""
        with self._lock:
            self._active = False
