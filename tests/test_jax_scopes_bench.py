"""bench/jax_scopes.py: each scope's share over rounds, per mode, against the precise mode's."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "bench" / "jax_scopes.py"
_spec = importlib.util.spec_from_file_location("jax_scopes_bench", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_shares_are_averaged_over_rounds_and_compared_with_the_precise_mode() -> None:
    by_round = [{"scopes": {"env": 0.08, "update": 0.92}, "precise": {"env": 0.10, "update": 0.90},
                 "scopes-graphs-off": {"env": 0.10, "update": 0.90}},
                {"scopes": {"env": 0.06, "update": 0.94}, "precise": {"env": 0.10, "gae": 0.02, "update": 0.88},
                 "scopes-graphs-off": {"env": 0.10, "update": 0.90}}]
    summary = bench.shares_over_rounds(by_round)
    assert summary["modes"] == ["scopes", "scopes-graphs-off", "precise"]
    env = summary["scopes"]["env"]
    assert math.isclose(env["scopes"], 0.07) and math.isclose(env["precise"], 0.10)
    assert math.isclose(env["scopes_relative_difference"], -0.3)
    assert math.isclose(env["scopes-graphs-off_relative_difference"], 0.0)
    gae = summary["scopes"]["gae"]  # in one round of one mode: a share of 0 in the others
    assert math.isclose(gae["precise"], 0.01) and gae["scopes"] == 0.0 and not gae["goal_applies"]
    assert summary["scopes"]["update"]["goal_applies"]


def test_a_scope_the_precise_mode_never_saw_has_no_relative_difference() -> None:
    summary = bench.shares_over_rounds([{"scopes": {"library (unattributed)": 0.2}, "precise": {"update": 1.0}}])
    assert summary["scopes"]["library (unattributed)"]["scopes_relative_difference"] is None


def test_the_workload_is_the_process_with_xla_s_dump_and_the_most_events(tmp_path: Path) -> None:
    import types

    import pytest

    from rlscope.trace.schema import XLA_DIR

    def process(name: str, events: int, dump: bool) -> types.SimpleNamespace:
        directory = tmp_path / name
        (directory / XLA_DIR if dump else directory).mkdir(parents=True)
        return types.SimpleNamespace(directory=directory, events=[0] * events)

    launcher, helper, workload = process("launcher.1", 900, False), process("python.2", 1, True), process("ppo.3", 50, True)
    assert bench.workload_process(tmp_path, [launcher, helper, workload]) is workload
    with pytest.raises(SystemExit, match="not a --jax-scopes trace"):
        bench.workload_process(tmp_path, [launcher])


def test_the_dump_options_take_effect_and_leave_the_compiled_step_as_it_was() -> None:
    """bench/jax_scopes_executables.py on a small CPU step: the dump wrote files (its compile
    options took effect), the optimised module is the same text, and every pair was timed."""
    pytest.importorskip("jax")
    path = Path(__file__).resolve().parents[1] / "bench" / "jax_scopes_executables.py"
    spec = importlib.util.spec_from_file_location("jax_scopes_executables", path)
    executables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(executables)
    result = executables.measure(envs=4, steps=4, pairs=3, block=1)
    assert result["dump_files"] > 0
    assert result["optimised_hlo_identical"]
    assert len(result["dumped_over_plain"]["pairs"]) == 3 and result["dumped_over_plain"]["interval95"] is None
    assert all(len(ms) == 3 and min(ms) > 0 for ms in result["iteration_ms"].values())


def test_a_cost_only_record_holds_the_ratio_per_round_and_its_interval_and_no_attribution() -> None:
    import argparse

    args = argparse.Namespace(envs=8, steps=8, iterations=3, cost_only=True)
    times = {"prof": [1.0, 1.1, 0.9, 1.0, 1.2, 1.0], "scopes": [1.0, 1.0, 1.0, 1.1, 1.2, 0.9]}
    rounds = [{"prof": p, "scopes": s} for p, s in zip(times["prof"], times["scopes"])]
    record = bench._record(args, {"command": "x"}, times, rounds, {}, [])
    ratio = record["scopes_over_prof"]
    assert ratio["rounds"] == [s / p for p, s in zip(times["prof"], times["scopes"])]
    assert tuple(ratio["interval95"]) == (min(ratio["rounds"]), max(ratio["rounds"]))  # six rounds: the outermost
    assert "precise_over_prof" not in record and "attribution" not in record
    short = bench._record(args, {"command": "x"}, {k: v[:3] for k, v in times.items()}, rounds[:3], {}, [])
    assert short["scopes_over_prof"]["interval95"] is None  # too few rounds for one
