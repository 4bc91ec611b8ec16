"""Join recorded GPU kernels to the instructions of the compiled XLA module that launched them.

XLA names each kernel after its instruction (``rlscope.analyze.hlo.kernel_name``), so most
kernels match exactly. Three things make a name say less than that, and each is reported as what
it is rather than guessed: XLA reuses one kernel for identical fused computations under the
first fusion's name (an *alias*, *ambiguous* when the fusions sharing it lie in different scopes);
a fusion can merge several scopes' work into one kernel (*across-scopes*); and cuBLAS/cuDNN custom
calls run the library's own kernels, named after the library, not the instruction (*library*).
Pass the kernels of one module's executions: the reuse cache and the names are per module.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

import numpy as np
import pandas as pd

from rlscope.analyze.hlo import HloModule, fingerprint, kernel_name
from rlscope.analyze.hlo_scopes import FUSED_ACROSS, instruction_scopes
from rlscope.errors import TraceError

__all__ = ["ModuleSites", "attribute_kernels", "scope_totals", "unknown_kernel", "MATCH_KINDS", "LIBRARY", "UNMATCHED",
           "AMBIGUOUS"]

MATCH_KINDS = ("exact", "alias", "ambiguous", "across-scopes", "library", "unmatched")
LIBRARY = "library (unattributed)"
UNMATCHED = "unmatched"
AMBIGUOUS = "ambiguous (reused kernel)"

# Kernels of the libraries XLA calls (cuBLAS, cuBLASLt, cuDNN, CUTLASS, CUB, cuSOLVER), mangled or
# not: sm90_xmma_gemm_..., ampere_sgemm_..., nvjet_tst_..., cutlass::Kernel2<...>, gemv2T_kernel...,
# and the solvers' (seen on an H100 in MJX's step, JAX 0.11.2): cuSOLVER's potrf_cta_lower_batch,
# cuBLAS's triangular solve, and the batch-pointer kernels XLA (stream_executor) and jaxlib launch
# before a batched solve.
_SOLVER_NAME = r"potrf|getrf|geqrf|syevj|syevd|gesvd|trsm|MakeBatchPointers|cusolver"
_LIBRARY_NAME = re.compile(
    r"^(void\s+)?(sm\d+|ampere|hopper|volta|turing|maxwell|blackwell)_"
    r"|nvjet|cutlass|cublas|cudnn|xmma|cub::|_ZN3cub|DeviceRadixSort|DeviceSegmentedRadixSort"
    r"|gemv\w*_kernel|gemmSN\w*_kernel|gemmk1_kernel|splitKreduce_kernel|" + _SOLVER_NAME, re.IGNORECASE)
# Which library a kernel's name says it is from, and what an instruction calling that library
# looks like in the HLO (its opcode, custom-call target and fused root's opcode): CUB's sorts
# behind a sort or a CUB custom call ("__cub$...", "xla.gpu.ext.cub_sort_..."); cuDNN's kernels
# behind "__cudnn$..."; GEMM-like kernels (xmma, cutlass, nvjet, ...) behind cuBLAS
# ("__cublas$gemm", "__cublas$lt$matmul") or cuDNN, whose convolutions run implicit-GEMM kernels too;
# a solver's kernels behind a solver's call ("cusolver_potrf_ffi", "__cublas$triangularSolve", a
# triangular-solve or cholesky instruction). Solvers first: cuBLAS's trsm kernels also name cublas.
_LIBRARY_FAMILIES = (
    (re.compile(_SOLVER_NAME, re.IGNORECASE),
     re.compile(r"cusolver|triangular.?solve|cholesky|potrf|getrf|geqrf|syevd|gesvd", re.IGNORECASE)),
    (re.compile(r"cub::|_ZN3cub|DeviceRadixSort|DeviceSegmented|DeviceScan|DeviceReduce", re.IGNORECASE),
     re.compile(r"(^|\s)sort(\s|$)|cub[$_]", re.IGNORECASE)),
    (re.compile(r"cudnn", re.IGNORECASE), re.compile(r"cudnn", re.IGNORECASE)),
    (re.compile(r"gemm|gemv|xmma|nvjet|cutlass|cublas|splitKreduce", re.IGNORECASE),
     re.compile(r"cublas|cudnn|gemm|matmul", re.IGNORECASE)),
)
# NameUniquer's suffix for a second instruction whose name sanitises the same (hlo.kernel_name).
_UNIQUER_SUFFIX = re.compile(r"(.+)__\d+")


def unknown_kernel(name: str) -> tuple[str, str, str, str]:
    """(instruction, scope, match, scopes) of a kernel no instruction is named after: a library's, or unmatched."""
    return ("", LIBRARY, "library", "") if _LIBRARY_NAME.search(name) else ("", UNMATCHED, "unmatched", "")


class ModuleSites:
    """The module's kernel-launching instructions, indexed the ways a kernel name can point at them.

    ``recorded``: the kernel names recorded in this module's runs, which tells a fusion that made
    its own kernel from one that may run under another's name (``set_recorded`` replaces them)."""

    def __init__(self, module: HloModule, names: Iterable[str], recorded: set[str]):
        self.module = module
        self.table = instruction_scopes(module, names)
        memo: dict[str, str] = {}
        prints = [fingerprint(module, c, memo) if c else "" for c in self.table["fused_computation"]]
        self.by_name: dict[str, list[int]] = defaultdict(list)
        self._by_print: dict[str, list[int]] = defaultdict(list)
        for row, (kernel, fp) in enumerate(zip(self.table["kernel_name"], prints)):
            self.by_name[kernel].append(row)
            if fp:
                self._by_print[fp].append(row)
        # Some emitters name the kernel after the fused body's root, not the fusion: a sort's
        # kernels are named after the sort instruction (``sort.0.1`` -> sort_0_1), seen on an H100.
        for row, (inst, root) in enumerate(zip(self.table["instruction"], self.table["root"])):
            if root != inst and kernel_name(root) not in self.by_name:
                self.by_name[kernel_name(root)].append(row)
        self.set_recorded(recorded)

    def set_recorded(self, recorded: set[str]) -> None:
        """Link each fusion to those that may run under its kernel, for these recorded names: a
        fusion whose own kernel name was recorded made its own kernel; any other fusion with the
        same fused computation (or naming it in its deduplicated_name) may run under a first one's."""
        self.recorded = recorded
        self.reusers: dict[int, set[int]] = defaultdict(set)
        if hasattr(self, "_unnamed"):
            del self._unnamed
        may_reuse = [kernel not in recorded for kernel in self.table["kernel_name"]]
        for rows in self._by_print.values():
            for row in rows:
                self.reusers[row].update(r for r in rows if r != row and may_reuse[r])
        for row, dedup in enumerate(self.table["deduplicated_name"]):
            if dedup and may_reuse[row]:
                for first in self.by_name.get(kernel_name(dedup), []):
                    self.reusers[first].add(row)

    def _rows(self, name: str) -> tuple[list[int] | None, bool]:
        rows = self.by_name.get(name)
        if rows is None and (m := _UNIQUER_SUFFIX.fullmatch(name)) is not None and m.group(1) in self.by_name:
            return self.by_name[m.group(1)], True
        return rows, False

    def candidates(self, name: str) -> list[int]:
        """Rows of ``table`` whose kernel may run under ``name`` (itself and the fusions that may reuse it)."""
        rows, _ = self._rows(name)
        return sorted(set(rows).union(*(self.reusers[r] for r in rows))) if rows is not None else []

    def schedule(self) -> list[int]:
        """Each row's position in the module's schedule, flattened: a computation's instructions in
        text order (XLA prints a scheduled module in execution order), a while's condition and
        body (a conditional's branches, a call's callee) in place of the instruction calling them."""
        if hasattr(self, "_schedule"):
            return self._schedule
        rows = {name: row for row, name in enumerate(self.table["instruction"])}
        order: dict[int, int] = {}

        def walk(computation: str, seen: frozenset[str]) -> None:
            for inst in self.module.computations.get(computation, ()):
                if inst.name in rows and rows[inst.name] not in order:
                    order[rows[inst.name]] = len(order)
                if inst.is_fusion:
                    continue
                for role, names in inst.called.items():
                    if role == "to_apply" and inst.opcode != "call":
                        continue
                    for name in sorted(names, key=lambda n: role != "condition"):  # a while's condition first
                        if name not in seen:
                            walk(name, seen | {name})

        walk(self.module.entry, frozenset({self.module.entry}))
        self._schedule = [order.get(row, len(order) + row) for row in range(len(self.table))]
        return self._schedule

    def unnamed_rows(self) -> list[int]:
        """Rows no recorded kernel is named after (by the instruction or its fused root): where
        kernels named after a library (cuBLAS, CUB, cuSOLVER) come from."""
        if not hasattr(self, "_unnamed"):
            names = zip(self.table["kernel_name"], self.table["root"])
            self._unnamed = [row for row, (kernel, root) in enumerate(names)
                             if kernel not in self.recorded and kernel_name(root) not in self.recorded]
        return self._unnamed

    def library_callers(self, kernel: str, rows: list[int]) -> list[int]:
        """Those of ``rows`` that call the library a kernel named ``kernel`` is from (a solver's
        kernel: a solver call; a CUB kernel: a sort or a CUB custom call; cuDNN's: a cuDNN call; a
        GEMM-like one: a cuBLAS or cuDNN call); all of ``rows`` for a kernel no family names."""
        if not hasattr(self, "_callers"):
            sites = {inst.name: inst for inst in self.module.launch_sites()}
            self._callers = {}
            for row, inst in enumerate(self.table["instruction"]):
                site = sites.get(inst)
                fused_root = self.module.root(site.fused_computation).opcode if site is not None and site.is_fusion \
                    else ""
                self._callers[row] = " ".join((site.opcode, site.custom_call_target, fused_root)) if site else ""
        for kernel_pattern, caller_pattern in _LIBRARY_FAMILIES:
            if kernel_pattern.search(kernel):
                return [r for r in rows if caller_pattern.search(self._callers[r])]
        return rows

    def computations(self) -> np.ndarray:
        """Each row's computation (a while body, ENTRY, ...)."""
        if not hasattr(self, "_computations"):
            self._computations = self.table["computation"].to_numpy()
        return self._computations

    def row_of(self, instruction: str) -> int | None:
        """The row of ``table`` of an instruction that launches kernels, by its name."""
        if not hasattr(self, "_by_instruction"):
            self._by_instruction = {name: row for row, name in enumerate(self.table["instruction"])}
        return self._by_instruction.get(instruction)

    def knows(self, name: str) -> bool:
        """Whether an instruction of this module is named after the kernel ``name``."""
        return self._rows(name)[0] is not None

    def resolve(self, name: str) -> tuple[str, str, str, str]:
        """(instruction, scope, match, scopes) for one kernel name."""
        rows, suffixed = self._rows(name)
        if rows is None:
            return unknown_kernel(name)
        candidates = set(rows).union(*(self.reusers[r] for r in rows))
        picked = self.table.iloc[sorted(candidates)]
        labels = sorted(set(picked["scope"]))
        instruction = ";".join(self.table["instruction"].iloc[rows])
        if len(labels) > 1:
            return instruction, AMBIGUOUS, "ambiguous", ";".join(labels)
        if labels[0] == FUSED_ACROSS:
            body = sorted({s for scopes in picked["body_scopes"] for s in scopes.split(";") if s})
            return instruction, FUSED_ACROSS, "across-scopes", ";".join(body)
        exact = len(candidates) == 1 and not suffixed
        return instruction, labels[0], "exact" if exact else "alias", labels[0]


def attribute_kernels(kernels: pd.DataFrame, module: HloModule, names: Iterable[str]) -> pd.DataFrame:
    """Each kernel's scope in ``module``, from its name.

    ``kernels`` needs ``name`` and ``duration_ns`` (more columns are kept); ``names`` are the
    user's ``jax.named_scope`` names. Added columns: ``instruction`` (``;``-joined when the
    name sanitises from several), ``scope`` (a path such as ``rollout/inference``, or NO_SCOPE,
    FUSED_ACROSS, AMBIGUOUS, LIBRARY, UNMATCHED), ``match`` (one of MATCH_KINDS), ``scopes`` (the
    scopes the kernel's work may belong to). Example rows::

        name                  duration_ns  instruction           scope                  match
        multiply_add_fusion   2048         multiply_add_fusion   rollout/env            exact
        ynn_fusion            1024         ynn_fusion            ambiguous (reused ...) ambiguous
        sm90_xmma_gemm_f32    4096                               library (unattributed) library
    """
    missing = sorted({"name", "duration_ns"} - set(kernels.columns))
    if missing:
        raise TraceError(f"the kernel table lacks columns {missing}; it needs one row per kernel with its name "
                         "and duration_ns")
    sites = ModuleSites(module, names, set(kernels["name"]))
    resolved = {name: sites.resolve(name) for name in pd.unique(kernels["name"])}
    out = kernels.copy()
    for i, column in enumerate(("instruction", "scope", "match", "scopes")):
        out[column] = [resolved[name][i] for name in kernels["name"]]
    return out


def scope_totals(attributed: pd.DataFrame) -> pd.DataFrame:
    """GPU kernel time per scope, largest first, with how each scope's kernels were matched.

    Columns: ``scope``, ``kernels``, ``duration_ns``, ``share`` (of all kernel time given), and
    one count column per match kind (MATCH_KINDS), so a reader sees how much of a share rests on
    aliases, and how much time is left as library, ambiguous, across-scopes or unmatched.
    """
    groups = attributed.groupby("scope", sort=False)
    totals = pd.DataFrame({"kernels": groups.size(), "duration_ns": groups["duration_ns"].sum()})
    whole = totals["duration_ns"].sum()
    totals["share"] = totals["duration_ns"] / whole if whole else 0.0
    counts = pd.crosstab(attributed["scope"], attributed["match"]).reindex(columns=list(MATCH_KINDS), fill_value=0)
    totals = totals.join(counts).fillna(0)
    totals[list(MATCH_KINDS)] = totals[list(MATCH_KINDS)].astype(int)
    return (totals.sort_values(["duration_ns", "kernels"], ascending=False, kind="stable")
            .rename_axis("scope").reset_index())
