"""Calls Python 3.11's profile hook cannot see: recorded by the process that could have made them,
and said on the rows of every table, printout and page that they falsify."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rlscope
from rlscope.analyze import analyze_trace
from rlscope.analyze.summary import format_correction, format_summary
from rlscope.collect.python import DEFAULT_TARGETS, TransitionCollector
from rlscope.collect.unseen import UNSEEN_CALLS, invisible_to_setprofile, unseen_targets
from rlscope.report import write_report
from rlscope.trace import Category
from rlscope.trace.writer import TraceWriter
from tests.conftest import REPO

STORED = REPO / "tests/data/traces/numpy_cpu"  # recorded on 3.11, before processes recorded what they could not see
UNSEEN = {"numpy": {"category": "backend", "examples": ["numpy._core._multiarray_umath.add (ufunc)"]}}


def _as_if_unseen(tmp_path: Path, unseen: dict) -> Path:
    """The stored 3.11 trace, its meta.json saying which targets' calls went unseen."""
    trace = tmp_path / "trace"
    shutil.copytree(STORED, trace)
    (meta_path,) = trace.glob("*/meta.json")
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, UNSEEN_CALLS: unseen}))
    return trace


def test_a_trace_without_the_field_has_no_caveat() -> None:
    tables = analyze_trace(STORED)
    assert (tables["breakdown"]["caveat"] == "").all() and (tables["transitions"]["caveat"] == "").all()
    text = format_summary(tables["breakdown"], tables["transitions"])
    assert "caveat" not in text and "*" not in text


def test_the_rows_that_unseen_calls_falsify_carry_the_caveat(tmp_path: Path) -> None:
    tables = analyze_trace(_as_if_unseen(tmp_path, UNSEEN))
    breakdown, transitions = tables["breakdown"], tables["transitions"]
    marked = breakdown["caveat"] != ""
    assert set(breakdown.loc[marked, "cpu"]) == {"Python", "Backend"} and marked.all()
    caveat = breakdown.loc[marked, "caveat"].iloc[0]
    assert "Python 3.11.7 does not see calls into numpy" in caveat and "Python >= 3.12" in caveat
    by_kind = transitions.groupby("transition")["caveat"].apply(lambda c: set(c))
    assert by_kind["Python->Backend"] == {caveat} and by_kind["Annotations"] == {""}
    # Every operation has a Python->Backend row to say it on, with count 0 where none was seen.
    ops = set(breakdown["operation"])
    backend = transitions[transitions["transition"] == "Python->Backend"].set_index("operation")
    assert set(backend.index) == ops
    assert backend.loc["simulation", "count"] == 0 and backend.loc["simulation", "per_iteration"] == 0.0
    assert backend.loc["inference", "count"] == 20  # the calls that were seen keep their count


def test_a_simulator_target_marks_the_simulator_layer(tmp_path: Path) -> None:
    unseen = {"ale_py": {"category": "simulator", "examples": ["ale_py._ale_py.ALEInterface.act (nb_method)"]}}
    tables = analyze_trace(_as_if_unseen(tmp_path, unseen))
    marked = tables["breakdown"][tables["breakdown"]["caveat"] != ""]
    assert set(marked["cpu"]) == {"Python"}  # the trace has no Simulator rows; Backend rows are not concerned
    kinds = set(tables["transitions"].loc[tables["transitions"]["caveat"] != "", "transition"])
    assert kinds == {"Python->Simulator"}


def test_the_printed_summary_marks_the_rows_and_explains_once(tmp_path: Path) -> None:
    tables = analyze_trace(_as_if_unseen(tmp_path, UNSEEN))
    text = format_summary(tables["breakdown"], tables["transitions"])
    lines = text.splitlines()
    rows = [line for line in lines if "inference" in line or "simulation" in line]
    assert len(rows) == 4 and all(line.rstrip().endswith("*") for line in rows)  # both tables
    notes = [line for line in lines if line.startswith("* ")]
    assert len(notes) == 1 and "does not see calls into numpy" in notes[0] and "Python >= 3.12" in notes[0]
    corrected = tables["breakdown"].assign(corrected_ns=tables["breakdown"]["time_ns"], overhead_ns=0)
    text = format_correction(corrected)
    assert "caveat" in text and text.splitlines()[-1].startswith("* ")


def _experiment(out: Path, caveat: str) -> None:
    experiment = out / "toy"
    experiment.mkdir(parents=True)
    meta = {"experiment": "toy", "description": "a toy sweep", "scale": "quick", "path": "configs/toy.yaml",
            "workload": "tests.toy_workloads:echo", "grid": {"n": [1, 2]}}
    (experiment / "experiment.json").write_text(json.dumps(meta))
    rows = [{"run_id": f"n-{n}", "n": n, "status": "ok", "reason": "", "repetition": 0, "seconds": 1.0 * n,
             "caveat": caveat if n == 1 else ""} for n in (1, 2)]
    pd.DataFrame(rows).to_csv(experiment / "results.csv", index=False)


def test_the_report_marks_the_runs_whose_results_carry_a_caveat(tmp_path: Path) -> None:
    tables = analyze_trace(_as_if_unseen(tmp_path, UNSEEN))
    caveat = tables["breakdown"]["caveat"].iloc[0]
    _experiment(tmp_path / "output", caveat)
    page = write_report(tmp_path / "output").read_text()
    assert "<th>caveat</th>" in page and "<td class='caveat'>*</td><" in page and "<td class='caveat'></td>" in page
    assert "<p class='caveat'>* Python 3.11.7 does not see calls into numpy" in page


def test_a_page_without_caveats_has_no_caveat_column(tmp_path: Path) -> None:
    _experiment(tmp_path / "output", "")
    page = write_report(tmp_path / "output").read_text()
    assert "<th>caveat</th>" not in page and "<p class='caveat'>" not in page


def test_a_profiled_process_that_imported_jax_records_what_311_cannot_see(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    import jax.numpy as jnp

    with rlscope.profile(tmp_path, process="jaxed", gpu=False):
        jnp.ones(3).block_until_ready()
    (meta_path,) = tmp_path.glob("jaxed.*/meta.json")
    meta = json.loads(meta_path.read_text())
    if sys.version_info >= (3, 12):
        assert UNSEEN_CALLS not in meta
        return
    unseen = meta[UNSEEN_CALLS]
    assert unseen["jaxlib"]["category"] == "backend" and unseen["jaxlib"]["examples"]
    assert "numpy" in unseen  # its ufuncs
    assert "torch" not in unseen and "mujoco" not in unseen  # builtins and pybind11 methods: seen


def test_the_scan_is_bounded_and_names_only_targets() -> None:
    import rlscope._hotpath  # noqa: F401  nanobind, but not a target

    found = unseen_targets(DEFAULT_TARGETS)
    assert all(len(entry["examples"]) <= 3 for entry in found.values())
    assert "numpy" in found and not any(name.startswith("rlscope._hotpath") for name in found)
    assert unseen_targets({"rlscope._hotpath": Category.BACKEND})["rlscope._hotpath"]["category"] == "backend"


def _callables() -> dict[str, tuple]:
    """Callables and a call of each: ufunc, builtin, method descriptor, Cython, nanobind function
    and method (``rlscope._hotpath``), pybind11 method (mujoco, where installed)."""
    from rlscope import _cartpole_cpu, _hotpath

    rng = np.random.default_rng(0)
    env = _cartpole_cpu.CartPoleF32(2, 1, 0)
    array = np.ones(2)
    cases = {
        "ufunc": (np.add, lambda: np.add(1.0, 2.0)),
        "builtin": (np.zeros, lambda: np.zeros(2)),
        "method descriptor": (np.ndarray.sum, lambda: array.sum()),
        "Cython method": (type(rng).normal, lambda: rng.normal()),
        "nanobind function": (_hotpath.bind_step, lambda: _hotpath.bind_step()),
        "nanobind method": (vars(type(env))["reset"], lambda: env.reset(0)),
    }
    try:
        import mujoco

        model = mujoco.MjModel.from_xml_string("<mujoco/>")
        cases["pybind11 method"] = (vars(mujoco.MjModel)["__copy__"], lambda: model.__copy__())
    except ImportError:
        pass
    return cases


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.11's profile hook is the one that misses calls")
def test_what_the_scan_counts_unseen_is_what_311_does_not_report() -> None:
    for label, (func, call) in _callables().items():
        reported: list[object] = []
        sys.setprofile(lambda frame, event, arg, into=reported: into.append(arg) if event == "c_call" else None)
        try:
            call()
        finally:
            sys.setprofile(None)
        seen = any(getattr(arg, "__name__", None) == func.__name__ for arg in reported)
        assert seen != invisible_to_setprofile(func), label


def test_a_jitted_function_is_a_backend_call_whatever_module_it_was_defined_in(tmp_path: Path) -> None:
    jax = pytest.importorskip("jax")

    collector = TransitionCollector(TraceWriter(tmp_path / "events.arrows"), native=False)
    jitted = jax.jit(lambda a: a)  # its __module__ is this test's, its calls enter jaxlib's dispatch
    assert collector._compute(jitted)[0] == int(Category.BACKEND)
    assert collector._compute(lambda a: a) is None
    collector.writer.close()
