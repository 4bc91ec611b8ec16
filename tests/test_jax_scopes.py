"""Scopes inside jax.jit end to end: what ``--jax-scopes`` records (rlscope.collect.jax_scopes) and how
the analysis charges kernels to ``<operation>/<scope>`` (rlscope.analyze.jax_scopes).

On the CPU, JAX compiles real modules but launches no kernels, so the joins run on traces built
here: kernels named after a CPU-compiled module's instructions, launched by API calls inside an
operation, as CUPTI would record them. The ``gpu`` test runs the jitted PPO on a GPU in both modes.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlscope.analyze import analyze_processes
from rlscope.analyze.hlo import parse_hlo
from rlscope.analyze.hlo_join import UNMATCHED, ModuleSites
from rlscope.analyze.hlo_scopes import instruction_scopes
from rlscope.analyze.jax_scopes import AUTOTUNING, _innermost, join_scopes, read_modules, scope_table
from rlscope.collect import jax_scopes as collect
from rlscope.errors import RlscopeError
from rlscope.trace.reader import ProcessTrace
from rlscope.trace.schema import SCHEMA_VERSION, XLA_COMPILES_FILE, XLA_DIR, Kind
from tests.conftest import REPO

MAIN = 1
SCOPES = {"rollout", "inference", "env", "gae", "update"}


def _kernel_of(hlo: str, scope: str) -> str:
    """A kernel of ``scope`` that its name alone tells (no identical fusion elsewhere to alias)."""
    module = parse_hlo(hlo)
    table = instruction_scopes(module, SCOPES)
    names = table.loc[table["scope"] == scope, "kernel_name"]
    return next(n for n in names if ModuleSites(module, SCOPES, {n}).resolve(n)[2] == "exact")


def _trace(directory: Path, kernels: list[str], nvtx: list[tuple[str, int, int]] = ()) -> ProcessTrace:
    """An operation ``train_step`` [0, 1000) launching ``kernels`` in order, one API call each
    (at 10 + 100 i), each kernel running 50 ns; ``nvtx``: (name, start, end) ranges on the main thread."""
    names = ["train_step", "cuLaunchKernel", *dict.fromkeys(kernels), *(n for n, _, _ in nvtx), "default"]
    names = list(dict.fromkeys(names))
    rows = [(Kind.OPERATION, 0, 1000, "train_step", 0, -1), (Kind.PHASE, 0, 1000, "default", 0, -1)]
    for i, kernel in enumerate(kernels):
        rows.append((Kind.CUDA_API, 10 + 100 * i, 15 + 100 * i, "cuLaunchKernel", i + 1, -1))
        rows.append((Kind.GPU_KERNEL, 20 + 100 * i, 70 + 100 * i, kernel, i + 1, names.index("train_step")))
    rows += [(Kind.NVTX_RANGE, s, e, n, 0, -1) for n, s, e in nvtx]
    frame = pd.DataFrame([dict(kind=int(k), category=0, tid=MAIN, depth=0, start_ns=s, end_ns=e, name=names.index(n),
                               correlation=c, operation=o) for k, s, e, n, c, o in rows])
    frame["name"] = pd.Categorical.from_codes(frame["name"], categories=names)
    meta = {"schema_version": SCHEMA_VERSION, "process": "t", "pid": 7, "main_tid": MAIN, "start_ns": 0,
            "end_ns": 1000, "complete": True}
    return ProcessTrace(directory, meta, frame)


def _dump(directory: Path, modules: dict[str, str], compiles: list[tuple[int, int]] = ()) -> Path:
    xla = directory / XLA_DIR
    xla.mkdir(parents=True)
    for i, (name, text) in enumerate(modules.items()):
        (xla / f"module_{i:04d}.{name}.sm_9.0_gpu_after_optimizations.txt").write_text(text)
    (xla / XLA_COMPILES_FILE).write_text("".join(
        json.dumps({"start_ns": s, "end_ns": e, "tid": MAIN, "function": "jit(step)"}) + "\n" for s, e in compiles))
    return directory


def _scopes(process: ProcessTrace) -> list[str]:
    """The scope of each kernel, in launch order."""
    return list(process.scopes.sort_index()["scope"])


def test_parse_jax_scopes_accepts_the_two_modes_and_off() -> None:
    assert [collect.parse_jax_scopes(v) for v in (None, False, "", "0", True, "1", "default", "precise")] == \
        [None] * 4 + ["default"] * 3 + ["precise"]
    with pytest.raises(RlscopeError, match="default or precise"):
        collect.parse_jax_scopes("exact")


def test_recording_refuses_once_jax_has_started_its_backends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Bridge:
        @staticmethod
        def backends_are_initialized() -> bool:
            return True

    monkeypatch.setitem(sys.modules, "jax._src.xla_bridge", Bridge)
    with pytest.raises(RlscopeError, match="before the first JAX computation"):
        collect.JaxScopes("default", tmp_path).start(None)


def test_prof_keeps_the_optimised_modules_and_the_compiles(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    script = tmp_path / "step.py"
    script.write_text("import jax, jax.numpy as jnp, rlscope\n"
                      "f = jax.jit(lambda x: jnp.sin(x) * 2)\n"
                      "with rlscope.operation('train_step'):\n    f(jnp.ones(4)).block_until_ready()\n")
    out = tmp_path / "trace"
    done = subprocess.run([sys.executable, "-m", "rlscope.cli", "prof", "--jax-scopes", "--no-gpu", "--output",
                           str(out), "--", sys.executable, str(script)], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (process_dir,) = [p for p in out.iterdir() if (p / "meta.json").exists()]
    kept = sorted(p.name for p in (process_dir / XLA_DIR).iterdir())
    assert XLA_COMPILES_FILE in kept and any(".jit__lambda" in k for k in kept)
    assert all(k == XLA_COMPILES_FILE or k.endswith("after_optimizations.txt") for k in kept)
    meta = json.loads((process_dir / "meta.json").read_text())["jax_scopes"]
    assert meta["mode"] == "default" and meta["modules"] == len(kept) - 1 and meta["compiles"] >= 1
    assert [m.name for m in read_modules(process_dir)][-1] == "jit__lambda"


def test_the_calling_operation_s_kernel_time_splits_by_scope_and_nothing_else_changes(
        tmp_path: Path, ppo_step: str) -> None:
    kernels = [_kernel_of(ppo_step, s) for s in ("rollout/inference", "rollout/env", "update")] + ["not_xla_kernel"]
    plain = _trace(tmp_path / "plain", kernels)
    process = join_scopes(_trace(_dump(tmp_path / "scoped", {"jit_step": ppo_step}), kernels))
    assert _scopes(process) == ["rollout/inference", "rollout/env", "update", UNMATCHED]
    table = scope_table(process)
    assert set(table["operation"]) == {"train_step"}
    assert set(table["scope"]) == {"rollout/inference", "rollout/env", "update", UNMATCHED}
    assert table["share"].sum() == pytest.approx(1.0) and table["kernels"].sum() == 4
    scoped, unscoped = analyze_processes([process]), analyze_processes([plain])
    for name in ("breakdown", "transitions", "gpu"):
        pd.testing.assert_frame_equal(scoped[name], unscoped[name])
    assert scoped["jax_scopes"]["scope"].tolist() == table["scope"].tolist()


def test_rows_without_a_scope_name_their_largest_kernels(tmp_path: Path, ppo_step: str) -> None:
    """An unmatched or library row says which kernels it holds, largest first (so a user can tell
    a library the rule does not know from a kernel of a module that was not dumped); a row of a
    scope names none."""
    from rlscope.analyze.summary import format_jax_scopes

    inference = _kernel_of(ppo_step, "rollout/inference")
    kernels = [inference, "foreign_small_kernel", "foreign_left_kernel", "foreign_left_kernel", "a", "b", "c"]
    process = join_scopes(_trace(_dump(tmp_path / "scoped", {"jit_step": ppo_step}), kernels))
    table = scope_table(process).set_index("scope")
    unmatched = table.loc[UNMATCHED, "kernel_names"].split("; ")
    assert len(unmatched) == 3 and unmatched[0] == "foreign_left_kernel"  # two launches: the most time
    assert table.loc["rollout/inference", "kernel_names"] == ""
    assert "foreign_left_kernel" in format_jax_scopes(scope_table(process))


def test_an_analysis_written_before_kernel_names_reads_with_them_empty(tmp_path: Path, ppo_step: str) -> None:
    from rlscope.analyze import read_tables, write_tables

    process = join_scopes(_trace(_dump(tmp_path / "scoped", {"jit_step": ppo_step}), ["not_xla_kernel"]))
    tables = analyze_processes([process])
    tables["jax_scopes"] = tables["jax_scopes"].drop(columns="kernel_names")
    write_tables(tables, tmp_path / "analysis")
    assert read_tables(tmp_path / "analysis", tmp_path)["jax_scopes"]["kernel_names"].tolist() == [""]


def test_a_name_several_modules_have_takes_the_module_of_its_neighbours(tmp_path: Path, ppo_step: str) -> None:
    table = instruction_scopes(parse_hlo(ppo_step), SCOPES)
    env = table[table["scope"] == "rollout/env"].iloc[0]
    # An eager module whose only kernel is named like the step's env kernel, with no scope.
    other = (f"HloModule jit_other\n\n%fused (p: f32[4]) -> f32[4] {{\n  %p = f32[4]{{0}} parameter(0)\n"
             f"  ROOT %s = f32[4]{{0}} sine(%p), metadata={{op_name=\"jit(other)/sin\"}}\n}}\n\n"
             f"ENTRY %main (x: f32[4]) -> f32[4] {{\n  %x = f32[4]{{0}} parameter(0)\n"
             f"  ROOT %{env['instruction']} = f32[4]{{0}} fusion(%x), kind=kLoop, calls=%fused, "
             f"metadata={{op_name=\"jit(other)/sin\"}}\n}}\n")
    directory = _dump(tmp_path, {"jit_step": ppo_step, "jit_other": other})
    first = [_kernel_of(ppo_step, s) for s in ("rollout/inference", "update")]
    process = join_scopes(_trace(directory, [*first, env["kernel_name"], env["kernel_name"]]))
    assert _scopes(process) == ["rollout/inference", "update", "rollout/env", "rollout/env"]
    assert set(process.scopes["module"]) == {"jit_step"}
    alone = join_scopes(_trace(_dump(tmp_path / "alone", {"jit_step": ppo_step, "jit_other": other}),
                               [env["kernel_name"]]))
    assert list(alone.scopes["match"]) == ["ambiguous"]  # no neighbour tells the modules apart


def test_the_environment_is_put_back_once_xla_has_read_it(tmp_path: Path) -> None:
    """XLA reads its flags at the first compile: from then on the process's environment is the
    user's again, so processes it starts do not dump into this trace."""
    pytest.importorskip("jax")
    script = tmp_path / "inside.py"
    script.write_text("import json, os, sys, jax, jax.numpy as jnp, rlscope\n"
                      "before = os.environ.get('XLA_FLAGS', '')\n"
                      "with rlscope.profile(sys.argv[1], jax_scopes=True, gpu=False):\n"
                      "    set_ = os.environ.get('XLA_FLAGS', '')\n"
                      "    jax.jit(lambda x: x + 1)(jnp.ones(2)).block_until_ready()\n"
                      "    inside = os.environ.get('XLA_FLAGS', '')\n"
                      "print(json.dumps({'before': before, 'set': set_, 'inside': inside, "
                      "'after': os.environ.get('XLA_FLAGS', '')}))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLSCOPE_")}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "trace")], cwd=REPO, capture_output=True,
                          text=True, env=env | {"XLA_FLAGS": "--xla_force_host_platform_device_count=1"})
    assert done.returncode == 0, done.stderr
    flags = json.loads(done.stdout.splitlines()[-1])
    assert "--xla_dump_to=" in flags["set"] and "--xla_force_host_platform_device_count=1" in flags["set"]
    assert flags["inside"] == flags["after"] == flags["before"] == "--xla_force_host_platform_device_count=1"
    (process_dir,) = (tmp_path / "trace").iterdir()
    assert len(read_modules(process_dir)) >= 1


def test_kernels_launched_while_xla_compiles_are_autotuning(tmp_path: Path, ppo_step: str) -> None:
    kernels = [_kernel_of(ppo_step, "update")] * 3
    process = join_scopes(_trace(_dump(tmp_path, {"jit_step": ppo_step}, compiles=[(0, 150)]), kernels))
    assert list(process.scopes["scope"]) == [AUTOTUNING, AUTOTUNING, "update"]


def test_the_precise_mode_reads_the_scope_from_xla_s_nvtx_ranges(tmp_path: Path, ppo_step: str) -> None:
    kernels = ["sm90_xmma_gemm_f32f32", _kernel_of(ppo_step, "update")]
    nvtx = [("XlaModule:#prefix=jit(step),hlo_module=jit_step,program_id=3#", 0, 900),
            ("Thunk:#name=rollout/inference/dot_general,hlo_op=custom-call.1,unique_hlo_op_id=9#", 5, 50),
            ("Thunk:#name=update/mul,hlo_op=fusion.2,unique_hlo_op_id=10#", 105, 150)]
    process = join_scopes(_trace(_dump(tmp_path, {"jit_step": ppo_step}), kernels, nvtx))
    assert list(process.scopes["match"]) == ["nvtx", "nvtx"]
    assert list(process.scopes["scope"]) == ["rollout/inference", "update"]
    assert list(process.scopes["instruction"]) == ["custom-call.1", "fusion.2"]
    assert not (process.events["kind"] == int(Kind.NVTX_RANGE)).any()


def test_a_recorded_h100_step_gets_the_scopes_xla_s_ranges_gave(tmp_path: Path) -> None:
    """A jitted PPO step recorded on an H100 (tests/data/jax_scopes: its optimised module, and
    each kernel of two timed iterations in launch order with the scope the precise mode gave it,
    from XLA's NVTX ranges): the name join, with the schedule for reused kernels and a loop's
    body starting again, gives every kernel the same scope."""
    data = REPO / "tests/data/jax_scopes"
    (module,) = data.glob("module_*.txt.gz")
    xla = tmp_path / XLA_DIR
    xla.mkdir()
    (xla / module.name.removesuffix(".gz")).write_bytes(gzip.decompress(module.read_bytes()))
    recorded = pd.read_csv(data / "h100_step_kernels.csv.gz")
    process = join_scopes(_trace(tmp_path, list(recorded["kernel"])))
    assert process.scopes["match"].isin(["exact", "alias", "order"]).all()
    assert list(process.scopes["scope"]) == list(recorded["precise_scope"])


@pytest.mark.parametrize("launched", ["sm90_xmma_gemm_f32f32_tn", "a_kernel_of_no_known_library"])
def test_a_library_kernel_takes_the_one_instruction_between_its_neighbours_without_a_kernel_of_its_name(
        tmp_path: Path, launched: str) -> None:
    """One pass through a hand-written module in schedule order, its cuBLAS call launching a
    library-named kernel, or one of a name no library here is known by: that
    kernel goes to the custom call, the one instruction between its neighbours' that no recorded
    kernel is named after."""
    hlo = (REPO / "tests/data/hlo/hand_written.hlo").read_text()
    module = parse_hlo(hlo)
    table = instruction_scopes(module, {"a", "b", "c"})
    (call,) = table.index[table["opcode"] == "custom-call"]
    position = ModuleSites(module, {"a", "b", "c"}, set()).schedule()
    rows = sorted(range(len(table)), key=lambda r: position[r])
    kernels = [launched if r == call else table["kernel_name"].iat[r] for r in rows]
    process = join_scopes(_trace(_dump(tmp_path, {module.name: hlo}), kernels))
    library = process.scopes.iloc[rows.index(call)]
    assert library["match"] == "order" and library["instruction"] == table["instruction"].iat[call]
    assert library["scope"] == "update"  # the custom call's op_name: jit(step)/update/dot_general


def _other_module(middle: str) -> str:
    """A small module whose run is three kernels, the middle one named like the hand-written
    step's fusion ``middle`` (a fusion of its own, of another body)."""
    return f"""HloModule jit_other, is_scheduled=true

%f1 (p: f32[4]) -> f32[4] {{
  %p = f32[4]{{0}} parameter(0)
  ROOT %s = f32[4]{{0}} sine(%p), metadata={{op_name="jit(other)/sin"}}
}}

%f2 (p.1: f32[4]) -> f32[4] {{
  %p.1 = f32[4]{{0}} parameter(0)
  ROOT %t = f32[4]{{0}} tanh(%p.1), metadata={{op_name="jit(other)/tanh"}}
}}

%f3 (p.2: f32[4]) -> f32[4] {{
  %p.2 = f32[4]{{0}} parameter(0)
  ROOT %l = f32[4]{{0}} log(%p.2), metadata={{op_name="jit(other)/log"}}
}}

ENTRY %main (x: f32[4]) -> f32[4] {{
  %x = f32[4]{{0}} parameter(0)
  %other_first = f32[4]{{0}} fusion(%x), kind=kLoop, calls=%f1
  %{middle} = f32[4]{{0}} fusion(%other_first), kind=kLoop, calls=%f2
  ROOT %other_last = f32[4]{{0}} fusion(%{middle}), kind=kLoop, calls=%f3
}}
"""


def test_a_name_another_module_recorded_does_not_say_this_module_s_fusion_made_its_own_kernel(
        tmp_path: Path) -> None:
    """The hand-written step, its twin fusions (identical bodies, scopes rollout/inference and
    update) scheduled apart, both run under the first twin's kernel, while another module, run
    just before, records a kernel of the second twin's name (its own fusion of that name). The
    second launch of the first twin's kernel is the second twin's: the other module's record
    must not make the step's second twin count as a fusion that made its own kernel (as in MJX's
    solver loop on an H100)."""
    nested = "  %nested_fusion = f32[8]{0} fusion(%x.1), kind=kLoop, calls=%outer_fused, " \
             "metadata={op_name=\"jit(step)/update/jvp(fwd)/abs\"}\n"
    twin = "  %twin_fusion.1 = f32[8]{0} fusion(%x.1), kind=kLoop, calls=%twin_a\n"
    hlo = (REPO / "tests/data/hlo/hand_written.hlo").read_text()
    assert nested in hlo and twin in hlo
    hlo = hlo.replace(nested, "").replace(twin, twin + nested)  # the twins apart: nested_fusion between
    module = parse_hlo(hlo)
    table = instruction_scopes(module, {"a", "b", "c"})
    position = ModuleSites(module, {"a", "b", "c"}, set()).schedule()
    rows = sorted(range(len(table)), key=lambda r: position[r])
    (twin,) = table.index[table["instruction"] == "twin_fusion.2"]
    (call,) = table.index[table["opcode"] == "custom-call"]
    step = ["twin_fusion_1" if r == twin else "sm90_xmma_gemm_f32f32_tn" if r == call else table["kernel_name"].iat[r]
            for r in rows]
    process = join_scopes(_trace(_dump(tmp_path, {module.name: hlo, "jit_other": _other_module("twin_fusion.2")}),
                                 ["other_first", "twin_fusion_2", "other_last", *step]))
    scopes = process.scopes.sort_index()
    assert list(scopes["module"].iloc[:3]) == ["jit_other"] * 3
    second = scopes.iloc[3 + rows.index(twin)]
    assert second["instruction"] == "twin_fusion.2" and second["scope"] == "update" and second["match"] == "order"
    first = scopes.iloc[3 + rows.index(table.index[table["instruction"] == "twin_fusion.1"][0])]
    assert first["instruction"] == "twin_fusion.1" and first["scope"] != "update"


def test_a_name_at_the_border_of_two_modules_runs_keeps_both_modules_fusions_exact(tmp_path: Path) -> None:
    """The other module ends its run with a kernel named like the step's first twin, and the
    step's run begins with that twin's own kernel: which module launched each of the two is not
    beyond doubt (each lies between a kernel of either module), so the name counts as recorded in
    both, and the step's second twin, whose own kernel was recorded, stays an exact match."""
    hlo = (REPO / "tests/data/hlo/hand_written.hlo").read_text()
    kernels = ["other_first", "other_last", "twin_fusion_1", "twin_fusion_1", "twin_fusion_2", "mixed_fusion"]
    process = join_scopes(_trace(_dump(tmp_path, {"jit_step": hlo, "jit_other": _other_module("twin_fusion.1")}),
                                 kernels))
    step_twin = process.scopes.sort_index().iloc[4]
    assert step_twin["instruction"] == "twin_fusion.2" and step_twin["match"] == "exact"


_POTRF = "_Z21potrf_cta_lower_batchIffLi16EEviiiPPT_mPi"  # cuSOLVER's, in MJX's step on an H100


@pytest.mark.parametrize(("launched", "target"), [("sm90_xmma_gemm_f32f32_tn", "__cublas$gemm"),
                                                  (_POTRF, "cusolver_potrf_ffi")])
def test_of_several_unnamed_instructions_a_library_kernel_takes_the_one_that_calls_its_library(
        tmp_path: Path, launched: str, target: str) -> None:
    """The same pass, but one more instruction launched no kernel of its name (a fusion that ran
    under its twin's kernel): between the neighbours two instructions are left, and the cuBLAS
    (cuSOLVER) kernel goes to the one that calls cuBLAS (cuSOLVER)."""
    hlo = (REPO / "tests/data/hlo/hand_written.hlo").read_text().replace("__cublas$gemm", target)
    module = parse_hlo(hlo)
    table = instruction_scopes(module, {"a", "b", "c"})
    (call,) = table.index[table["opcode"] == "custom-call"]
    (twin,) = table.index[table["instruction"] == "twin_fusion.2"]
    position = ModuleSites(module, {"a", "b", "c"}, set()).schedule()
    rows = [r for r in sorted(range(len(table)), key=lambda r: position[r]) if r != twin]
    kernels = [launched if r == call else table["kernel_name"].iat[r] for r in rows]
    process = join_scopes(_trace(_dump(tmp_path, {module.name: hlo}), kernels))
    library = process.scopes.iloc[rows.index(call)]
    assert library["match"] == "order" and library["instruction"] == table["instruction"].iat[call]


_CUB_HISTOGRAM = "_ZN3cub6detail10radix_sort30DeviceRadixSortHistogramKernelIjEEvPT_"
_CUB_ONESWEEP = "_ZN3cub6detail10radix_sort29DeviceRadixSortOnesweepKernelIjEEvPT_"


def test_cub_kernels_take_the_scope_of_the_sorts_that_launched_them(tmp_path: Path) -> None:
    """A permutation's two sorts, custom calls to XLA's CUB target (``xla.gpu.ext.cub_sort_pairs``
    in JAX 0.11.2) with their kernels interleaved, after a cuBLAS call of another scope that
    launched no kernel of its name: each CUB kernel has three unnamed instructions between its
    neighbours, of which the two sorts call CUB, and both are in ``update``."""
    hlo = (REPO / "tests/data/hlo/cub_sorts.hlo").read_text()
    module = parse_hlo(hlo)
    table = instruction_scopes(module, {"rollout", "gae", "update"})
    name = dict(zip(table["instruction"], table["kernel_name"]))
    kernels = [name["before_fusion"], _CUB_HISTOGRAM, _CUB_HISTOGRAM, _CUB_ONESWEEP, _CUB_ONESWEEP,
               name["after_fusion"]]
    process = join_scopes(_trace(_dump(tmp_path, {module.name: hlo}), kernels))
    cub = process.scopes.iloc[1:5]
    assert list(cub["match"]) == ["order"] * 4 and set(cub["scope"]) == {"update"}
    assert set(cub["instruction"]) == {"sort.1;sort.2"}
    assert list(process.scopes["scope"].iloc[[0, 5]]) == ["rollout", "update"]


def test_innermost_range_at_each_time() -> None:
    ranges = pd.DataFrame({"tid": [1, 1, 1, 2, 2], "start_ns": [0, 10, 30, 0, 60], "end_ns": [100, 20, 40, 100, 60]})
    tids = np.array([1, 1, 1, 1, 2, 3, 2])
    times = np.array([5, 15, 25, 35, 50, 50, 70])
    assert list(_innermost(ranges, tids, times)) == [0, 1, 0, 2, 3, -1, 3]  # the empty range (60, 60) holds nothing


@pytest.mark.gpu
def test_on_a_gpu_the_name_join_agrees_with_xla_s_own_ranges(tmp_path: Path) -> None:
    """The precise mode ties every kernel of the step to its instruction through XLA's NVTX
    ranges; wherever the default mode matched a kernel's name exactly, it found the same scope."""
    from rlscope.analyze import read_attributed

    first_scope = {}
    for mode in ("default", "precise"):
        out = tmp_path / mode
        command = [sys.executable, "-m", "rlscope.cli", "prof", "--no-analyze", f"--jax-scopes={mode}", "--output",
                   str(out), "--", sys.executable, "-m", "experiments.casestudies.jitted_ppo", "--envs", "8",
                   "--steps", "8", "--iterations", "4"]
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        (process,) = read_attributed(out)
        assert {"rollout/inference", "rollout/env", "update"} <= set(scope_table(process)["scope"])
        scopes = process.scopes[process.scopes["scope"] != AUTOTUNING]
        in_step = scopes[scopes["module"] == "jit_train_step"]
        names = process.events.loc[in_step.index, "name"].astype(str)
        if mode == "precise":
            assert (in_step["match"] == "nvtx").all(), in_step["match"].value_counts()
            precise = dict(zip(names, in_step["scope"]))
        else:
            exact = in_step["match"] == "exact"
            first_scope = dict(zip(names[exact], in_step.loc[exact, "scope"]))
    assert first_scope and all(precise[name] == scope for name, scope in first_scope.items() if name in precise)


def test_a_kernel_of_an_unknown_name_stays_unmatched_where_its_gap_holds_two_scopes(tmp_path: Path) -> None:
    """Between the CUB module's neighbours lie a cuBLAS call in ``gae`` and two sorts in
    ``update``, none with a kernel of its name: a kernel no name places could be any of theirs."""
    hlo = (REPO / "tests/data/hlo/cub_sorts.hlo").read_text()
    module = parse_hlo(hlo)
    table = instruction_scopes(module, {"rollout", "gae", "update"})
    name = dict(zip(table["instruction"], table["kernel_name"]))
    kernels = [name["before_fusion"], "foreign_unknown_kernel", name["after_fusion"]]
    process = join_scopes(_trace(_dump(tmp_path, {module.name: hlo}), kernels))
    assert process.scopes["match"].iat[1] == "unmatched" and process.scopes["scope"].iat[1] == UNMATCHED


def test_a_kernel_of_an_unknown_name_between_two_passes_of_a_module_stays_unmatched(tmp_path: Path) -> None:
    """The hand-written module's ENTRY instructions up to its cuBLAS call (whose kernel is named
    after the library), a kernel of no known name (another library's, launched outside XLA), then
    the same instructions again: the unknown kernel's neighbours lie in two passes, and though the
    custom call is the one unnamed instruction after the first neighbour, nothing places the
    unknown kernel there."""
    hlo = (REPO / "tests/data/hlo/hand_written.hlo").read_text()
    module = parse_hlo(hlo)
    table = instruction_scopes(module, {"a", "b", "c"})
    (call,) = table.index[table["opcode"] == "custom-call"]
    position = ModuleSites(module, {"a", "b", "c"}, set()).schedule()
    entry = [r for r in sorted(range(len(table)), key=lambda r: position[r]) if table["computation"].iat[r] == "main"]
    kernels = ["sm90_xmma_gemm_f32f32_tn" if r == call else table["kernel_name"].iat[r]
               for r in entry[:entry.index(call) + 1]]
    process = join_scopes(_trace(_dump(tmp_path, {module.name: hlo}), [*kernels, "curand_foreign_kernel", *kernels]))
    foreign = process.scopes.iloc[len(kernels)]
    assert foreign["match"] == "unmatched" and foreign["scope"] == UNMATCHED
