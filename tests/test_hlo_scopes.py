"""Scopes inside jax.jit: HLO parsing (rlscope.analyze.hlo), scope extraction (hlo_scopes) and the
kernel join (hlo_join).

Compiled modules come from JAX on the CPU, whose fusions differ from the GPU's (other kinds,
other counts), so those tests assert structural facts: where a scope appears, that a fusion
mixing scopes is reported, never how many fusions there are. The exact rules are pinned on small
hand-written HLO texts. The kernel lists of the join are synthetic, built from the compiled
module's instruction names plus library-named and unknown kernels: they stand in for recorded GPU
fixtures (tests/data/) until a GPU run records real ones.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlscope.analyze.hlo import kernel_name, parse_hlo
from rlscope.analyze.hlo_join import AMBIGUOUS, LIBRARY, MATCH_KINDS, UNMATCHED, attribute_kernels, scope_totals
from rlscope.analyze.hlo_scopes import (FUSED_ACROSS, NO_SCOPE, ScopeNameError, fusion_scope, innermost_scope,
                                        instruction_scopes, scope_path)
from rlscope.errors import TraceError
from tests.conftest import REPO

PPO_SCOPES = {"rollout", "inference", "env", "gae", "update"}
ABC = {"a", "b", "c"}


def _compiled(fn, *args) -> str:
    jax = pytest.importorskip("jax")
    return jax.jit(fn).lower(*args).compile().as_text()


@pytest.fixture(scope="module")
def two_scopes_fused() -> str:
    """Identical work in scopes a and b (one kernel may serve both), and a's work fused into c's reduce."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def f(x, w):
        with jax.named_scope("a"):
            y = jnp.sin(x) * 3.0
        with jax.named_scope("b"):
            z = jnp.sin(w) * 3.0
        with jax.named_scope("c"):
            s = jnp.sum(y * 2.0, axis=1)
        return y, z, s

    return _compiled(f, jnp.ones((64, 32)), jnp.ones((64, 32)))


# --- kernel names -------------------------------------------------------------------------------

@pytest.mark.parametrize(("instruction", "kernel"), [
    ("loop_fusion", "loop_fusion"),
    ("multiply_add_fusion.1", "multiply_add_fusion_1"),
    ("bitcast_dynamic-update-slice_fusion", "bitcast_dynamic_update_slice_fusion"),
    ("1st.fusion", "_1st_fusion"),          # no leading digit
    ("a$b", "a_b"),                         # SanitizeFunctionName keeps $, NameUniquer does not
    ("__foo.1", "a_foo_1"),                 # __ is reserved for the backends...
    ("__xla_gemm", "__xla_gemm"),           # ...but __xla_
    ("f32", "f32_"),                        # a primitive type name is a keyword in HLO text
    ("", "a_unnamed"),
])
def test_kernel_names_follow_xla_sanitisers(instruction, kernel):
    assert kernel_name(instruction) == kernel


@given(st.text(alphabet="abcXYZ019._-$%/ ", max_size=12))
def test_a_kernel_name_is_a_valid_ptx_identifier(name):
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", kernel_name(name))


# --- scope paths --------------------------------------------------------------------------------

@pytest.mark.parametrize(("op_name", "path"), [
    ("jit(step)/while/body/closed_call/rollout/inference/dot_general", ("rollout", "inference")),
    ("jit(step)/rollout/eval_jaxpr/env/add", ("rollout", "env")),
    ("jit(step)/update/jvp(fwd)/tanh", ("update", "fwd")),
    ("jit(step)/update/transpose(jvp(fwd))/mul", ("update", "fwd")),
    ("jit(step)/update/transpose(jvp(update))/jvp()/checkpoint/rematted_computation/cos", ("update",)),
    ("jit(step)/outer/jit(inner)/inner_scope/sin", ("outer", "inner_scope")),
    ("jit(update)/vmap()/mul", ()),          # a jitted function named like a scope is not the scope
    ("transpose(jvp(jit(update)))/mul", ()),
    ("jit(step)/sub", ()),
    ("reduce_sum", ()),
    ("", ()),
])
def test_scope_path_matches_names_not_positions(op_name, path):
    names = {"rollout", "inference", "env", "update", "fwd", "outer", "inner_scope"}
    assert scope_path(op_name, names) == path
    assert innermost_scope(op_name, names) == (path[-1] if path else None)


def test_one_scope_name_may_be_given_as_a_string():
    assert scope_path("jit(f)/while/body/rollout/x", "rollout") == ("rollout",)


@pytest.mark.parametrize("bad", ["body", "while", "a/b", ""])
def test_a_scope_name_jax_uses_itself_is_refused(bad):
    with pytest.raises(ScopeNameError, match="rename the jax.named_scope"):
        scope_path("jit(f)/while/body/x", {"rollout", bad})


# --- the rules, on hand-written HLO -------------------------------------------------------------

# Each rule in a few lines: a multi-output fusion in a while body, env work fused into gae's reduce
# (with a CSE'd constant broadcast from inference), a nested fusion, twin fused bodies in two
# scopes, a cuBLAS custom call.
HAND_WRITTEN = (REPO / "tests/data/hlo/hand_written.hlo").read_text()
NAMES = {"rollout", "inference", "env", "gae", "update", "fwd"}


@pytest.mark.parametrize("text", [HAND_WRITTEN, HAND_WRITTEN.replace("%", "")], ids=["percent", "bare-names"])
def test_hand_written_module_parses(text):
    module = parse_hlo(text)
    assert module.name == "jit_step" and module.entry == "main"
    fusion = next(i for i in module.computations["main"] if i.name == "mixed_fusion")
    assert (fusion.is_fusion, fusion.fusion_kind, fusion.fused_computation) == (True, "kInput", "mixed")
    assert module.root("mixed").name == "r" and module.root("mixed").called == {"to_apply": ("add_region",)}
    assert fusion.op_name == "jit(step)/gae/reduce_sum"
    gemm = next(i for i in module.computations["main"] if i.name == "gemm")
    assert gemm.custom_call_target == "__cublas$gemm"
    nested = next(i for i in module.computations["main"] if i.name == "nested_fusion")
    assert [i.name for i in module.fusion_body(nested)] == ["param_0.3", "param_0.2", "n", "a"]
    sites = {i.name for i in module.launch_sites()}
    assert {"mo.fusion", "mixed_fusion", "gemm", "done"} <= sites       # the while body is reached
    assert not sites & {"sum", "n", "loop", "init", "x.1"}             # reducers, fused bodies, control, inputs


def test_a_fusion_takes_its_root_scope_the_common_scope_or_is_reported_across():
    table = instruction_scopes(parse_hlo(HAND_WRITTEN), NAMES).set_index("instruction")
    # A multi-output fusion's root (a tuple) has no scope: the body's common scope, not either output's.
    assert table.loc["mo.fusion", ["scope", "how", "body_scopes"]].tolist() == ["rollout", "common",
                                                                               "rollout;rollout/env"]
    # env work fused into gae's reduce: across, with both scopes listed (the CSE'd broadcast of a
    # constant, with inference's metadata, does not count).
    assert table.loc["mixed_fusion", ["scope", "how", "body_scopes"]].tolist() == [FUSED_ACROSS, "across",
                                                                                  "gae;rollout/env"]
    # A nested fusion's body counts: update (its negate) and update/fwd lie on one line.
    assert table.loc["nested_fusion", ["scope", "how"]].tolist() == ["update/fwd", "root"]
    assert table.loc["gemm", ["scope", "how"]].tolist() == ["update", "own"]
    assert table.loc["twin_fusion.1", "kernel_name"] == "twin_fusion_1"


def test_parse_refuses_text_without_an_entry_computation():
    with pytest.raises(TraceError, match="no ENTRY computation"):
        parse_hlo("HloModule broken\n\nnot hlo at all\n")


# --- compiled modules ---------------------------------------------------------------------------

def test_scopes_survive_scan_and_grad(ppo_step):
    module = parse_hlo(ppo_step)
    table = instruction_scopes(module, PPO_SCOPES)
    in_loop = table[table["computation"] != module.entry]
    assert {"rollout/inference", "rollout/env"} <= set(in_loop["scope"])      # through scan's while body
    assert "update" in set(table["scope"])                                    # through grad's jvp/transpose
    transposed = [i for c in module.computations.values() for i in c if "transpose(jvp" in i.op_name]
    assert transposed and all(scope_path(i.op_name, PPO_SCOPES)[:1] == ("update",) for i in transposed)
    for row in table[table["opcode"] == "fusion"].itertuples():
        assert row.fused_computation in module.computations
        assert module.root(row.fused_computation).name == row.root
    assert not any(s in {"while", "body", "closed_call"} for p in table["scope"] for s in p.split("/"))


def test_named_scopes_nest_through_nested_jit_and_transforms():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    @jax.jit
    def update(x):                 # a function named like a scope: jit(update) is not the scope
        with jax.named_scope("inner"):
            return jnp.sin(x) * 2

    def step(p, x):
        def loss(p):
            with jax.named_scope("fwd"):
                return jnp.sum(jnp.tanh(x @ p) ** 2)

        with jax.named_scope("update"):
            g = jax.grad(loss)(p)
        with jax.named_scope("outer"):
            y = update(x)
        return p - g, y

    module = parse_hlo(_compiled(step, jnp.ones((8, 8)), jnp.ones((16, 8))))
    paths = {scope_path(i.op_name, {"update", "fwd", "outer", "inner"}): i.op_name
             for c in module.computations.values() for i in c}
    assert "jit(update)" in paths[("outer", "inner")]
    assert ("update", "fwd") in paths and ("update", "outer") not in paths
    assert any(p[:1] == ("update",) and "jvp(" in op for p, op in paths.items())


def test_a_fusion_mixing_scopes_is_reported_not_given_to_its_root(two_scopes_fused):
    module = parse_hlo(two_scopes_fused)
    mixed = 0
    for inst in module.launch_sites():
        if not inst.is_fusion:
            continue
        root = scope_path(module.root(inst.fused_computation).op_name, ABC)
        body = {scope_path(i.op_name, ABC) for i in module.fusion_body(inst)} - {()}
        if root == ("c",) and ("a",) in body:              # a's sin fused into c's reduce
            mixed += 1
            assert fusion_scope(module, inst, ABC)[:2] == (FUSED_ACROSS, "across")
    assert mixed >= 1


# --- the join -----------------------------------------------------------------------------------

def _kernels(names: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"name": names, "duration_ns": [1000 * (i + 1) for i in range(len(names))]})


def test_join_matches_names_library_kernels_and_unknowns(ppo_step):
    module = parse_hlo(ppo_step)
    fused = [kernel_name(i.name) for i in module.launch_sites() if i.is_fusion]
    extra = ["sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8", "nvjet_tst_64x8_64x16_4x1_v_bz_TNT",
             "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm>(Params)", "ampere_sgemm_32x32_sliced1x4_tn",
             "some_kernel_from_another_module", "gemm_fusion_dot_7"]
    out = attribute_kernels(_kernels(fused + extra), module, PPO_SCOPES)
    assert len(out) == len(fused) + len(extra) and set(out["match"]) <= set(MATCH_KINDS)
    ours = out.iloc[:len(fused)]
    assert set(ours["match"]) <= {"exact", "alias", "ambiguous", "across-scopes"}
    assert (ours["instruction"] != "").all()
    assert out.iloc[len(fused):len(fused) + 4]["scope"].eq(LIBRARY).all()
    assert out.iloc[-2:]["scope"].eq(UNMATCHED).all()        # XLA-like but not in this module: not guessed
    assert {"rollout/inference", "rollout/env"} <= set(out["scope"])


def test_a_reused_kernel_is_ambiguous_only_when_its_twins_lie_in_other_scopes(two_scopes_fused):
    module = parse_hlo(two_scopes_fused)
    table = instruction_scopes(module, ABC).set_index("scope")
    a, b = kernel_name(table.loc["a", "instruction"]), kernel_name(table.loc["b", "instruction"])
    both = attribute_kernels(_kernels([a, b]), module, ABC).set_index("name")
    assert both.loc[a, ["scope", "match"]].tolist() == ["a", "exact"]     # each made its own kernel
    assert both.loc[b, ["scope", "match"]].tolist() == ["b", "exact"]
    one = attribute_kernels(_kernels([a]), module, ABC).set_index("name")   # b may have reused a's
    assert one.loc[a, ["scope", "match", "scopes"]].tolist() == [AMBIGUOUS, "ambiguous", "a;b"]


def test_join_follows_twins_deduplicated_names_and_uniquer_suffixes():
    module = parse_hlo(HAND_WRITTEN)
    rows = attribute_kernels(_kernels(["twin_fusion_1", "mixed_fusion", "nested_fusion__1", "done"]), module,
                             NAMES).set_index("name")
    # twin_b's body is twin_a's: its kernel may be twin_fusion_1's, so that name may be update's work too.
    assert rows.loc["twin_fusion_1", ["match", "scopes"]].tolist() == ["ambiguous", "rollout/inference;update"]
    assert rows.loc["mixed_fusion", ["scope", "match", "scopes"]].tolist() == [FUSED_ACROSS, "across-scopes",
                                                                               "gae;rollout/env"]
    assert rows.loc["nested_fusion__1", ["scope", "match"]].tolist() == ["update/fwd", "alias"]
    assert rows.loc["done", ["scope", "match"]].tolist() == ["update", "exact"]

    unlike = HAND_WRITTEN.replace("cosine(%param_0.5)", "sine(%param_0.5)")
    rows = attribute_kernels(_kernels(["twin_fusion_1"]), parse_hlo(unlike), NAMES).set_index("name")
    assert rows.loc["twin_fusion_1", ["scope", "match"]].tolist() == ["rollout/inference", "exact"]
    hinted = unlike.replace("calls=%twin_b", 'calls=%twin_b, metadata={deduplicated_name="twin_fusion.1"}')
    rows = attribute_kernels(_kernels(["twin_fusion_1"]), parse_hlo(hinted), NAMES).set_index("name")
    assert rows.loc["twin_fusion_1", "match"] == "ambiguous"


def test_scope_totals_add_up_and_count_each_match_kind(ppo_step):
    module = parse_hlo(ppo_step)
    fused = [kernel_name(i.name) for i in module.launch_sites() if i.is_fusion]
    attributed = attribute_kernels(_kernels(fused + ["sm90_xmma_gemm", "unknown"]), module, PPO_SCOPES)
    totals = scope_totals(attributed)
    assert totals["share"].sum() == pytest.approx(1.0)
    assert totals["kernels"].sum() == len(attributed) and totals["duration_ns"].is_monotonic_decreasing
    assert (totals[list(MATCH_KINDS)].sum(axis=1) == totals["kernels"]).all()
    assert totals.set_index("scope").loc[LIBRARY, "library"] == 1
    assert NO_SCOPE in set(totals["scope"])          # the scan's own bookkeeping, reported as such
    assert scope_totals(attributed.iloc[:0]).empty


def test_join_needs_names_and_durations(ppo_step):
    with pytest.raises(TraceError, match="duration_ns"):
        attribute_kernels(pd.DataFrame({"name": ["x"]}), parse_hlo(ppo_step), PPO_SCOPES)
