"""GPU time inside ``jax.jit``, per ``jax.named_scope``: the kernels of a process profiled with
``--jax-scopes`` joined to the scopes of the XLA modules it compiled.

Two joins, each reported as what it is (the ``match`` column):

- **By name** (the default mode): a kernel is named after its instruction
  (``rlscope.analyze.hlo_join``). Kernel names repeat across modules (``loop_add_fusion`` is in
  most), so a name found in several modules takes the module of the kernels launched next to it:
  a module's execution launches its kernels one after another, so the module of the last kernel
  before it (of the same operation) whose name only one module has, else of the next such
  kernel; where neither has the name the kernel is ``ambiguous``, unless every module gives it
  the same scope.
- **By NVTX range** (the precise mode): XLA opens ``XlaModule:#prefix=P,hlo_module=M,...#`` around
  each execution and ``Thunk:#name=N,hlo_op=I,...#`` around each thunk's launches
  (xla/backends/gpu/runtime/annotation.cc), N being the instruction's op_name without the
  module's prefix P. The launching API call's innermost ranges give the kernel's module and
  instruction, cuBLAS's kernels included (``nvtx``); its scope is that instruction's in the
  module's HLO, read as the default mode reads it, or N where the instruction is not found (XLA
  leaves N out where the fused body's op_names share no prefix).

Kernels launched while XLA compiled a module (``compiles.jsonl``) are autotuning candidates, not
the step's work: ``autotuning``. In the breakdown, each kernel with a scope is charged to the
operation ``<python operation>/<scope>``, so the jitted call's GPU time splits into its scopes
under the operation that made the call.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from rlscope.analyze.hlo import HloModule, parse_hlo
from rlscope.analyze.hlo_join import AMBIGUOUS, MATCH_KINDS, ModuleSites, unknown_kernel
from rlscope.analyze.hlo_scopes import NO_SCOPE, inferred_scope_names, scope_path
from rlscope.errors import TraceError
from rlscope.trace.reader import ProcessTrace
from rlscope.trace.schema import XLA_COMPILES_FILE, XLA_DIR, XLA_MODULE_GLOB, Kind

__all__ = ["DumpedModule", "read_modules", "kernel_scopes", "join_scopes", "scope_table", "AUTOTUNING",
           "JOIN_MATCHES", "SCOPE_TABLE_COLUMNS"]

AUTOTUNING = "autotuning (compile time)"
JOIN_MATCHES = (*MATCH_KINDS, "order", "nvtx", "autotuning")
SCOPE_TABLE_COLUMNS = ("process", "operation", "scope", "match", "kernels", "duration_ns", "share", "kernel_names")
# Rows whose kernels no single scope was given: their kernels' names say what they are (the
# library's that the library rule does not know, a fusion's that spans scopes), so the table
# names the largest.
NAMED_MATCHES = ("unmatched", "ambiguous", "library", "across-scopes")
NAMED_KERNELS = 3
_NAME_CHARS = 120
# module_0008.jit_step.sm_9.0_gpu_after_optimizations.txt: number, module name, platform.
_MODULE_FILE = re.compile(r"module_(\d+)\.([^.]+)\..*after_optimizations\.txt")
_THUNK = re.compile(r"Thunk:#(?:name=(?P<name>[^,#]*),)?hlo_op=(?P<op>[^,#]+)")
_MODULE_RANGE = re.compile(
    r"XlaModule:#(?:prefix=(?P<prefix>[^,#]*),)?hlo_module=(?P<module>[^,#]+)(?:,program_id=(?P<program>\d+))?")


@dataclasses.dataclass(frozen=True)
class DumpedModule:
    """One module XLA compiled in the process: its dump's number and name, parsed."""

    number: int
    name: str
    module: HloModule


def read_modules(directory: Path) -> list[DumpedModule]:
    """The optimised modules XLA dumped under ``directory`` (a process's trace folder), in dump order."""
    modules = []
    for path in (directory / XLA_DIR).glob(XLA_MODULE_GLOB):
        found = _MODULE_FILE.fullmatch(path.name)
        if found is None:
            continue
        try:
            module = parse_hlo(path.read_text())
        except (OSError, UnicodeDecodeError, TraceError) as err:
            raise TraceError(f"{path}: unreadable XLA module dump ({err}); delete the file to analyse the trace "
                             "without that module's scopes") from err
        modules.append(DumpedModule(int(found.group(1)), found.group(2), module))
    return sorted(modules, key=lambda m: m.number)


def _compile_intervals(directory: Path) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the backend compiles ``compiles.jsonl`` lists; a torn last line (a process
    killed while writing it) is left out."""
    path = directory / XLA_DIR / XLA_COMPILES_FILE
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    except OSError as err:
        raise TraceError(f"{path}: unreadable ({err}); delete it to analyse the trace without telling autotuning "
                         "kernels apart") from err
    compiles = []
    for number, line in enumerate(lines, start=1):
        try:
            compile_ = json.loads(line)
            compiles.append((int(compile_["start_ns"]), int(compile_["end_ns"])))
        except (ValueError, KeyError, TypeError) as err:
            if number < len(lines):
                raise TraceError(f"{path}:{number}: not a compile record ({err}); delete the file to analyse the "
                                 "trace without telling autotuning kernels apart") from err
    starts, ends = zip(*compiles) if compiles else ((), ())
    return np.array(starts, np.int64), np.array(ends, np.int64)


def _innermost(ranges: pd.DataFrame, tids: np.ndarray, times: np.ndarray) -> np.ndarray:
    """For each (tid, time), the row position in ``ranges`` of the innermost range open on that
    thread at that time, or -1. One sweep per thread over starts, ends and queries in time order."""
    found = np.full(len(times), -1, dtype=np.int64)
    r_tid, r_start, r_end = (ranges[c].to_numpy() for c in ("tid", "start_ns", "end_ns"))
    r_tid = np.where(r_end > r_start, r_tid, np.iinfo(np.int64).min)  # an empty range contains nothing
    for tid in np.unique(tids):
        own = np.flatnonzero(r_tid == tid)
        asked = np.flatnonzero(tids == tid)
        if len(own) == 0:
            continue
        # At one time: ends first (2 * t), then starts, then queries (2 * t + 1, by order below).
        keys = np.concatenate((r_start[own] * 2 + 1, r_end[own] * 2, times[asked] * 2 + 1))
        what = np.concatenate((own, -own - 1, np.full(len(asked), np.iinfo(np.int64).min)))
        slot = np.concatenate((np.zeros(2 * len(own), np.int64), asked))
        stack: list[int] = []
        for i in np.lexsort((what == np.iinfo(np.int64).min, keys)):
            w = what[i]
            if w == np.iinfo(np.int64).min:
                found[slot[i]] = stack[-1] if stack else -1
            elif w >= 0:
                stack.append(int(w))
            elif -w - 1 in stack:
                stack.remove(int(-w - 1))
    return found


def _by_nvtx(ranges: pd.DataFrame, tids: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(module, instruction, op_name path) of each launch from XLA's NVTX ranges ("" where no thunk
    range was open). The module is its unique id (``program_id``) where the range gives it, else its
    name; the path is the thunk's longest common op_name prefix, "" where XLA gave none."""
    labels = ranges["name"].astype(str).to_numpy()
    thunk = np.array([_THUNK.match(n) is not None for n in labels], dtype=bool)
    module = ~thunk & np.array([_MODULE_RANGE.match(n) is not None for n in labels], dtype=bool)
    at_thunk = _innermost(ranges[thunk], tids, times)
    at_module = _innermost(ranges[module], tids, times)
    thunk_labels, module_labels = labels[thunk], labels[module]
    out_module = np.full(len(times), "", dtype=object)
    out_inst, out_path = out_module.copy(), out_module.copy()
    for i in np.flatnonzero(at_thunk >= 0):
        t = _THUNK.match(thunk_labels[at_thunk[i]])
        m = _MODULE_RANGE.match(module_labels[at_module[i]]) if at_module[i] >= 0 else None
        prefix = (m.group("prefix") or "") if m else ""
        # The module's unique id, which XLA's dump puts in the file name (module_<id>.<name>...).
        out_module[i] = (m.group("program") or m.group("module")) if m else ""
        out_inst[i] = t.group("op")
        out_path[i] = "/".join(p for p in (prefix, t.group("name") or "") if p)
    return out_module, out_inst, out_path


def _recorded_per_module(names: np.ndarray, pick: np.ndarray, sure: np.ndarray, modules: int) -> list[set[str]]:
    """Per module, the kernel names recorded in its runs. ``pick``: each kernel's module (-1: none
    or several could be told apart); ``sure``: whether the pick is beyond doubt (the name is that
    module's alone, or the kernels before and after it ran in one module). A name picked without
    being sure counts for every module: a module's run that begins with a name the module run just
    before it also has is credited to that one, and must not cost its own fusions their exact match."""
    unsure = set(names[~sure | (pick < 0)])
    by_module: list[set[str]] = [set() for _ in range(modules)]
    for i in np.flatnonzero(sure & (pick >= 0)):
        by_module[pick[i]].add(names[i])
    return [own | unsure for own in by_module]


def _by_name(kernels: pd.DataFrame, modules: list[DumpedModule],
             sites: list[ModuleSites]) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Module, instruction, scope and match of each kernel from its name (the default mode), the
    index of each kernel's module in ``modules`` (-1: none or several), and whether that module is
    beyond doubt (the name is its alone, or the neighbours before and after agree)."""
    holders = {n: [i for i, s in enumerate(sites) if s.knows(n)] for n in pd.unique(kernels["name"])}
    # The module of each kernel whose name only one module has; the others take their neighbours'.
    only = kernels["name"].map(lambda n: holders[n][0] if len(holders[n]) == 1 else np.nan)
    before = only.groupby(kernels["operation"]).ffill()
    after = only.groupby(kernels["operation"]).bfill()
    resolved: dict[tuple[str, float, float], tuple[int, str, str, str, str]] = {}
    rows, sure = [], []
    for name, prev, nxt in zip(kernels["name"], before, after):
        key = (name, prev, nxt)
        sure.append(len(holders[name]) == 1 or prev == nxt)  # NaN == NaN is False: no neighbours, not sure
        if key not in resolved:
            held = holders[name]
            if not held:
                resolved[key] = (-1, "", *unknown_kernel(name)[:3])
            else:
                pick = held[0] if len(held) == 1 else next((int(c) for c in (prev, nxt) if c == c and int(c) in held),
                                                            None)
                if pick is not None:
                    resolved[key] = (pick, modules[pick].name, *sites[pick].resolve(name)[:3])
                else:
                    answers = {sites[i].resolve(name)[1:3] for i in held}
                    scope, match = answers.pop() if len(answers) == 1 else (AMBIGUOUS, "ambiguous")
                    resolved[key] = (-1, ";".join(sorted({modules[i].name for i in held})), "", scope, match)
        rows.append(resolved[key])
    frame = pd.DataFrame(rows, index=kernels.index, columns=["pick", "module", "instruction", "scope", "match"])
    return frame.drop(columns="pick"), frame["pick"].to_numpy(), np.array(sure, dtype=bool)


def _between(site: ModuleSites, candidates: list[int], low: int, high: int) -> list[int]:
    """The candidates placed between rows ``low`` and ``high`` in the module's schedule; where
    ``high`` comes earlier, a loop's body started again between them: then those in that body,
    after ``low`` or ahead of ``high``."""
    at, computation = site.schedule(), site.computations()
    if at[low] < at[high]:
        return [c for c in candidates if at[low] < at[c] < at[high]]
    if computation[low] == computation[high]:
        return [c for c in candidates if computation[c] == computation[low] and (at[c] > at[low] or at[c] < at[high])]
    return []


def _by_order(frame: pd.DataFrame, kernels: pd.DataFrame, pick: np.ndarray, sites: list[ModuleSites]) -> None:
    """Settle kernels a name does not place by where they ran in the module's schedule: a module
    runs its instructions in schedule order (``ModuleSites.schedule``), so the instruction that
    launched a kernel lies between those of the kernels launched just before and just after it.
    An ambiguous name (fusions of different scopes sharing one kernel) takes the one of its
    fusions placed there; a library's kernel (cuBLAS, CUB, cuSOLVER) the one instruction placed there that
    no recorded kernel is named after, or of several such, the one that calls its library
    (``ModuleSites.library_callers``: a custom call, a sort XLA hands to CUB). An unmatched kernel,
    named after no instruction and no library whose names are known here, is placed as a library's
    kernel is, among all the unnamed instructions between its neighbours, but only inside one
    pass through the module (between passes it may be another library's, launched outside XLA). Where several
    instructions fit and all have one scope (the sorts of one ``jax.random.permutation``, whose
    kernels interleave), the kernel takes that scope and all their names."""
    exact_row = np.full(len(frame), np.nan)
    for i in np.flatnonzero((frame["match"].to_numpy() == "exact") & (pick >= 0)):
        exact_row[i] = sites[pick[i]].row_of(frame["instruction"].iat[i].split(";")[0])
    operation = kernels["operation"].to_numpy()
    # A library kernel's module is its neighbours': the module of the last kernel placed before it.
    module = pd.Series(np.where(pick >= 0, pick, np.nan)).groupby(operation).ffill().to_numpy()
    group = [operation, np.nan_to_num(module, nan=-1).astype(int)]
    before = pd.Series(exact_row).groupby(group).ffill().to_numpy()
    after = pd.Series(exact_row).groupby(group).bfill().to_numpy()
    match = frame["match"].to_numpy()
    settled: list[tuple[int, str, str, str]] = []
    unnamed = np.isin(match, ("library", "unmatched"))
    for i in np.flatnonzero(((match == "ambiguous") & (pick >= 0)) | (unnamed & (module == module))):
        if before[i] != before[i] or after[i] != after[i]:
            continue
        site = sites[int(module[i])]
        name = kernels["name"].iat[i]
        at = site.schedule()
        if match[i] == "unmatched" and at[int(before[i])] >= at[int(after[i])]:
            continue  # between two passes of the module: it may be no kernel of the module's at all
        if match[i] == "ambiguous":
            fits = _between(site, site.candidates(name), int(before[i]), int(after[i]))
        else:  # of several unnamed instructions in the gap, the one calling the kernel's library, if known
            fits = _between(site, site.unnamed_rows(), int(before[i]), int(after[i]))
            fits = fits if len(fits) <= 1 else site.library_callers(name, fits)
        scopes = {site.table["scope"].iat[row] for row in fits}
        if len(scopes) == 1:  # one instruction, or several of one scope (a permutation's two sorts)
            instruction = ";".join(site.table["instruction"].iat[row] for row in fits)
            settled.append((i, site.module.name, instruction, scopes.pop()))
    if settled:
        at = np.array([i for i, *_ in settled])
        for k, column in enumerate(("module", "instruction", "scope"), start=1):
            frame.iloc[at, frame.columns.get_loc(column)] = np.array([row[k] for row in settled], dtype=object)
        frame.iloc[at, frame.columns.get_loc("match")] = "order"


def _by_nvtx_ranges(frame: pd.DataFrame, ranges: pd.DataFrame, tid: np.ndarray, at: np.ndarray,
                    modules: list[DumpedModule], sites: list[ModuleSites], pick: np.ndarray,
                    names: frozenset[str]) -> None:
    """The precise mode: each kernel whose launch lies in a thunk's NVTX range takes that thunk's
    instruction (``nvtx``). The instruction is XLA's own word; its scope comes from the module's
    HLO as the default mode reads it (fused bodies the same way), else from the thunk's op_name."""
    by_module = {m.name: i for i, m in enumerate(modules)}  # a name compiled twice: the last
    by_module.update({str(m.number): i for i, m in enumerate(modules)})  # the ids tell them apart
    module, inst, path = _by_nvtx(ranges, tid, at)
    seen = np.flatnonzero(inst != "")
    scopes, modules_seen = np.empty(len(seen), dtype=object), np.empty(len(seen), dtype=object)
    for j, i in enumerate(seen):
        held = by_module.get(module[i], pick[i] if pick[i] >= 0 else None)
        row = sites[held].row_of(inst[i]) if held is not None else None
        if row is not None:
            scopes[j] = sites[held].table["scope"].iat[row]
        else:
            found = scope_path(path[i] + "/_", names) if path[i] else ()
            scopes[j] = "/".join(found) if found else NO_SCOPE
        modules_seen[j] = modules[held].name if held is not None else module[i]
    for column, values in (("module", modules_seen), ("instruction", inst[seen]), ("scope", scopes),
                           ("match", np.full(len(seen), "nvtx", dtype=object))):
        frame.iloc[seen, frame.columns.get_loc(column)] = values


def kernel_scopes(process: ProcessTrace, nvtx: bool = True) -> pd.DataFrame | None:
    """Per GPU kernel of a process profiled with ``--jax-scopes`` (None for any other): ``module``,
    ``instruction``, ``scope`` (a path such as ``rollout/inference``, or NO_SCOPE, FUSED_ACROSS,
    AMBIGUOUS, LIBRARY, UNMATCHED, AUTOTUNING) and ``match`` (JOIN_MATCHES), indexed like
    ``process.events``, with the kernel's ``operation`` code and ``duration_ns``. Reads the
    events after ``rlscope.analyze.attribution`` charged GPU work to operations. ``nvtx=False``
    joins a precise-mode trace by name alone, as the default mode would: the two joins are then
    compared on the same kernels (``bench/jax_scopes.py``)."""
    if not (process.directory / XLA_DIR).is_dir():
        return None
    ev = process.events
    kind = ev["kind"].to_numpy()
    kernels = ev[kind == int(Kind.GPU_KERNEL)]
    kernels = kernels.iloc[np.lexsort((kernels["start_ns"].to_numpy(), kernels["correlation"].to_numpy()))]
    modules = read_modules(process.directory)
    names = inferred_scope_names(m.module for m in modules)
    kernels = kernels.assign(name=kernels["name"].astype(str))
    every = set(kernels["name"])
    sites = [ModuleSites(m.module, names, every) for m in modules]
    frame, pick, sure = _by_name(kernels, modules, sites)
    # Which fusions made their own kernel is told by the names recorded in their own module's runs:
    # a name another module recorded says nothing of this one (in MJX's step on an H100, the solver
    # loop's loop_add_fusion.2 ran under a twin's kernel while a small jit recorded its own
    # loop_add_fusion_2). The modules picked do not depend on it; the names resolved again may.
    recorded = _recorded_per_module(kernels["name"].to_numpy(), pick, sure, len(modules))
    if any(own != every for own in recorded):
        for site, own in zip(sites, recorded):
            site.set_recorded(own)
        frame, pick, sure = _by_name(kernels, modules, sites)
    _by_order(frame, kernels, pick, sites)

    api = ev[kind == int(Kind.CUDA_API)].drop_duplicates("correlation")
    call = pd.Index(api["correlation"]).get_indexer(kernels["correlation"])  # the launching call, -1: none recorded
    at = np.where(call >= 0, api["start_ns"].to_numpy()[call], kernels["start_ns"].to_numpy()).astype(np.int64)
    tid = np.where(call >= 0, api["tid"].to_numpy()[call], kernels["tid"].to_numpy()).astype(np.int64)

    ranges = ev[kind == int(Kind.NVTX_RANGE)]
    if nvtx and len(ranges):
        _by_nvtx_ranges(frame, ranges, tid, at, modules, sites, pick, names)

    starts, ends = _compile_intervals(process.directory)
    if len(starts):
        order = np.argsort(starts, kind="stable")
        reach = np.maximum.accumulate(ends[order])  # the latest end of the compiles started so far
        last = np.searchsorted(starts[order], at, side="right") - 1
        in_compile = (last >= 0) & (at <= reach[np.maximum(last, 0)])
        frame.loc[in_compile, ["scope", "match"]] = [AUTOTUNING, "autotuning"]
    frame["operation"] = kernels["operation"].to_numpy()
    frame["duration_ns"] = (kernels["end_ns"] - kernels["start_ns"]).to_numpy()
    return frame.sort_index()


def join_scopes(process: ProcessTrace, nvtx: bool = True) -> ProcessTrace:
    """The process with its kernel scopes kept (``ProcessTrace.scopes``); NVTX ranges, read by the
    join, leave the events. The events' kernels keep the operation that launched them, so every
    other table reads the same with and without ``--jax-scopes``: the split of that operation's
    GPU time by scope is ``scope_table``'s."""
    scopes = kernel_scopes(process, nvtx)
    ev = process.events
    ev = ev[ev["kind"].to_numpy() != int(Kind.NVTX_RANGE)]
    if scopes is not None:
        position = pd.Series(np.arange(len(ev)), index=ev.index)
        scopes.index = position.reindex(scopes.index).to_numpy()
    return dataclasses.replace(process, events=ev.reset_index(drop=True), scopes=scopes)


def _largest_kernels(process: ProcessTrace, kernels: pd.DataFrame, table: pd.DataFrame) -> list[str]:
    """Per row of ``table``: for a NAMED_MATCHES row, its NAMED_KERNELS kernel names of the most
    time ("; "-joined, each cut to _NAME_CHARS characters); "" for the others. Names are looked up
    for those rows' kernels only: a step's other kernels can number millions."""
    named = kernels[kernels["match"].isin(NAMED_MATCHES)]
    named = named.assign(kernel=process.events.loc[named.index, "name"].astype(str).to_numpy())
    time = named.groupby(["operation", "scope", "match", "kernel"], sort=False)["duration_ns"].sum()
    largest: dict[tuple[str, str, str], str] = {}
    for key, group in time.groupby(level=["operation", "scope", "match"], sort=False):
        top = group.nlargest(NAMED_KERNELS).index.get_level_values("kernel")
        largest[key] = "; ".join(name[:_NAME_CHARS] for name in top)
    return [largest.get((row.operation, row.scope, row.match), "") for row in table.itertuples()]


def scope_table(process: ProcessTrace) -> pd.DataFrame:
    """GPU kernel time per (Python operation, scope, match) of a process's jitted modules, largest
    first, with each row's share of its operation's kernel time and, where no single scope was
    found for its kernels (unmatched, ambiguous, library, across scopes), the names of the
    largest (columns SCOPE_TABLE_COLUMNS; empty for a process profiled without ``--jax-scopes``)."""
    scopes = process.scopes
    if scopes is None or scopes.empty:
        return pd.DataFrame(columns=list(SCOPE_TABLE_COLUMNS))
    names = process.events["name"].cat.categories
    # overlap.UNANNOTATED's label; overlap imports attribution, which imports this module
    operation = [names[op] if op >= 0 else "(unannotated)" for op in scopes["operation"]]
    kernels = scopes.assign(operation=operation)
    groups = kernels.groupby(["operation", "scope", "match"], sort=False)
    table = groups.agg(kernels=("duration_ns", "size"), duration_ns=("duration_ns", "sum")).reset_index()
    whole = table.groupby("operation")["duration_ns"].transform("sum")
    table["share"] = np.where(whole > 0, table["duration_ns"] / whole.where(whole > 0, 1), 0.0)
    table["kernel_names"] = _largest_kernels(process, kernels, table)
    table.insert(0, "process", process.process)
    return table.sort_values(["operation", "duration_ns"], ascending=[True, False], kind="stable")[
        list(SCOPE_TABLE_COLUMNS)].reset_index(drop=True)
