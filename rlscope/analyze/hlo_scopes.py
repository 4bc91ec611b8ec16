"""The user's ``jax.named_scope`` of each kernel-launching instruction of a compiled XLA module.

JAX writes the scope path into each instruction's ``metadata={op_name=...}``, mixed with its own
segments (``jit(step)``, ``while/body``, ``closed_call``, ``jvp(...)``, ``transpose(...)``) that
differ across JAX versions. So scopes are found by the user's names, never by path position, and
a fused kernel's scope comes from its fused body (``fusion_scope``), since fusion can merge work
of several scopes into one kernel.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import pandas as pd

from rlscope.analyze.hlo import HloModule, Instruction, kernel_name
from rlscope.errors import RlscopeError

__all__ = ["ScopeNameError", "scope_path", "innermost_scope", "fusion_scope", "instruction_scopes", "NO_SCOPE",
           "FUSED_ACROSS", "SCOPE_COLUMNS", "inferred_scope_names"]

NO_SCOPE = "(no scope)"
FUSED_ACROSS = "fused across scopes"
SCOPE_COLUMNS = ("instruction", "kernel_name", "opcode", "fusion_kind", "computation", "op_name", "root",
                 "root_op_name", "scope", "how", "body_scopes", "fused_computation", "deduplicated_name")

# Segments JAX itself puts in op_name paths (scan/while/cond bodies, remat): never a user's scope.
_FRAMEWORK_SEGMENTS = frozenset({"while", "body", "cond", "closed_call", "checkpoint", "remat",
                                 "rematted_computation", "eval_jaxpr", "jit", "pjit", "pmap", "vmap"})
# ``name(inner)`` wrappers that name a called function rather than transform a scope: ``jit(f)``.
_CALL_WRAPPERS = frozenset({"jit", "pjit", "pmap", "xla_pmap", "shard_map", "xmap", "core_call"})
# Not work of a fused body: XLA's CSE merges equal constants and their broadcasts across scopes and
# keeps one's metadata, so these say nothing about where a kernel's work comes from.
_CONSTANT = frozenset({"constant", "iota"})
_RESHAPING = frozenset({"broadcast", "reshape", "bitcast", "convert", "copy", "transpose", "slice"})
_WRAPPED = re.compile(r"([A-Za-z_]\w*)\((.*)\)")
# Segments JAX adds that name no scope of the user's: lax.cond's branches, custom derivatives.
_INTERNAL = re.compile(r"branch_\d+_fun|custom_(jvp|vjp)_call(_jaxpr)?|remat\d*|checkpoint\d*")
# What an inferred scope name looks like; JAX also puts qualified function names
# (``make_step.<locals>.body``, under jax.random's jitted helpers) and joined transform names
# (``mul;transpose(jvp())``) in paths, which are no scopes.
_SCOPE_NAME = re.compile(r"[\w\-]+")


class ScopeNameError(RlscopeError, ValueError):
    """A scope name that cannot be told apart from JAX's own path segments."""


def _checked(names: Iterable[str]) -> frozenset[str]:
    names = frozenset([names] if isinstance(names, str) else names)  # one name, not its letters
    bad = sorted(n for n in names if not n or "/" in n or n in _FRAMEWORK_SEGMENTS)
    if bad:
        raise ScopeNameError(f"scope names {bad} cannot be found in op_name paths: a name must be non-empty, "
                             f"have no '/', and not be one of JAX's own segments {sorted(_FRAMEWORK_SEGMENTS)}; "
                             "rename the jax.named_scope")
    return names


def scope_path(op_name: str, names: Iterable[str]) -> tuple[str, ...]:
    """The user's scopes along an op_name path, outermost first.

    A scope traced under a transform is wrapped (``jvp(fwd)``, ``transpose(jvp(fwd))``) and is
    unwrapped here; ``jit(f)`` names a function, not a scope, even when ``f`` is also a scope's
    name; a scope repeated in a row (``update/transpose(jvp(update))``, JAX's rendering of a
    checkpoint under grad) counts once.
    """
    names = _checked(names)
    path: list[str] = []
    for segment in op_name.split("/"):
        core, wrapper = segment, ""
        while core not in names and (m := _WRAPPED.fullmatch(core)) is not None:
            wrapper, core = m.group(1), m.group(2)
        if core in names and wrapper not in _CALL_WRAPPERS and (not path or path[-1] != core):
            path.append(core)
    return tuple(path)


def innermost_scope(op_name: str, names: Iterable[str]) -> str | None:
    """The innermost of the user's scopes on an op_name path, or None."""
    path = scope_path(op_name, names)
    return path[-1] if path else None


def _work(body: list[Instruction]) -> list[Instruction]:
    """A fused body without its parameters, constants, and broadcasts or reshapes of constants."""
    constant, work = set(), []
    for inst in body:
        if inst.opcode in _CONSTANT or (inst.opcode in _RESHAPING and set(inst.operands) <= constant):
            constant.add(inst.name)
        elif inst.opcode != "parameter":
            work.append(inst)
    return work


def _one_line(paths: set[tuple[str, ...]]) -> bool:
    """Whether the paths all lie on one line of nesting (each a prefix of the longest)."""
    longest = max(paths, key=len)
    return all(longest[:len(p)] == p for p in paths)


def fusion_scope(module: HloModule, inst: Instruction, names: Iterable[str]) -> tuple[str, str, tuple[str, ...]]:
    """(scope, how, body scopes) of the kernel an instruction launches; a scope is a path such as
    ``rollout/inference``.

    A plain instruction has its own scope (how ``own``). A fusion has its root's (``root``) when
    its body stays on that scope's line of nesting; a root without a scope gets the body's longest
    common scope (``common``); a body that spans scopes off one line (``env`` work fused into a
    reduce of ``gae``) is ``across``, scope FUSED_ACROSS: reported, never guessed. ``none``: no
    user scope anywhere (NO_SCOPE).
    """
    names = _checked(names)
    own = scope_path(inst.op_name, names)
    if not inst.is_fusion:
        return ("/".join(own), "own", ("/".join(own),)) if own else (NO_SCOPE, "none", ())
    root = scope_path(module.root(inst.fused_computation).op_name, names)
    body = {scope_path(i.op_name, names) for i in _work(module.fusion_body(inst))}
    body = {p for p in body | {root} if p}
    listed = tuple(sorted("/".join(p) for p in body))
    if not body:
        return (NO_SCOPE, "none", ())
    if not _one_line(body):
        return (FUSED_ACROSS, "across", listed)
    if root:
        return ("/".join(root), "root", listed)
    return ("/".join(min(body, key=len)), "common", listed)


def instruction_scopes(module: HloModule, names: Iterable[str]) -> pd.DataFrame:
    """One row per instruction that can launch a kernel (``HloModule.launch_sites``).

    Columns (SCOPE_COLUMNS): ``instruction``, ``kernel_name``, ``opcode``, ``fusion_kind``,
    ``computation``, ``op_name``, ``root`` (the fused body's root, else the instruction),
    ``root_op_name``, ``scope`` (``rollout/inference``, NO_SCOPE or FUSED_ACROSS), ``how`` (own /
    root / common / across / none), ``body_scopes`` (``;``-joined), ``fused_computation`` (fusions
    only), ``deduplicated_name``. Example (a scanned rollout, CPU)::

        multiply_add_fusion  multiply_add_fusion  fusion  kLoop  region_0.4
        jit(step)/while/body/closed_call/rollout/env/add  add.2  ...  rollout/env  root  rollout/env
    """
    names = _checked(names)
    rows = []
    for inst in module.launch_sites():
        root = module.root(inst.fused_computation) if inst.is_fusion else inst
        scope, how, body = fusion_scope(module, inst, names)
        rows.append((inst.name, kernel_name(inst.name), inst.opcode, inst.fusion_kind, inst.computation,
                     inst.op_name, root.name, root.op_name, scope, how, ";".join(body), inst.fused_computation,
                     inst.deduplicated_name))
    return pd.DataFrame(rows, columns=list(SCOPE_COLUMNS))


def inferred_scope_names(modules: Iterable[HloModule]) -> frozenset[str]:
    """The user's ``jax.named_scope`` names, read off the modules' op_name paths.

    A path is ``[jit(f)/]<segments>/<primitive>``: the last segment is the primitive, ``name(...)``
    wrappers are unwrapped (``transpose(jvp(update))`` is ``update``) except call wrappers
    (``jit(g)`` names a function), and JAX's own segments (scan and cond bodies, custom
    derivatives, qualified function names) are left out. What remains are the scopes the user
    opened (or a library such as Flax opened for its modules), whatever the JAX version's
    framework segments are; names are found when made of letters, digits, ``_`` and ``-``.
    """
    found: set[str] = set()
    for module in modules:
        for instructions in module.computations.values():
            for inst in instructions:
                for segment in inst.op_name.split("/")[:-1]:
                    core, wrapper = segment, ""
                    while (m := _WRAPPED.fullmatch(core)) is not None:
                        wrapper, core = m.group(1), m.group(2)
                    if (wrapper not in _CALL_WRAPPERS and core not in _FRAMEWORK_SEGMENTS
                            and _SCOPE_NAME.fullmatch(core) and not _INTERNAL.fullmatch(core)):
                        found.add(core)
    return frozenset(found)
