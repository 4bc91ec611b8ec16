"""Property-based fuzzing of the command line: malformed manifests, --set values, trace bytes and
results tables never end in a traceback, a failure is one message with a non-zero exit, and no
file the command did not mean to write changes.

The CLI runs in this process (``rlscope.cli.main``), so an exception it lets through fails the
test with that exception: the same event as a traceback on a user's terminal. Examples per test:
``RLSCOPE_FUZZ_EXAMPLES`` (CI: the default below; ``make fuzz``: thousands, with a random seed it
prints, e.g. ``pytest tests/test_fuzz_cli.py --hypothesis-seed=N`` to repeat a run).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlscope.cli import main

EXAMPLES = int(os.environ.get("RLSCOPE_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize="RLSCOPE_FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

GOOD = {
    "experiment": "toy",
    "workload": "tests.toy_workloads:echo",
    "params": {"sleep_s": 0},
    "grid": {"x": [1, 2], "mode": ["a", "b"]},
    "exclude": [{"x": 2, "mode": "b"}],
    "repetitions": 1,
    "scales": {"quick": {"grid": {"x": [1]}}},
    "figures": [],
}

scalars = st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=True) | st.text(max_size=20)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)


def invoke(*args: str) -> tuple[int, str, str]:
    """Run the CLI in this process; its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["rlscope", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        sys.argv = argv
    return code, out.getvalue(), err.getvalue()


def check_outcome(code: int, stderr: str, may_succeed: bool) -> None:
    """A failure is one message (one `error:` line or click's usage error) and a non-zero exit."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:") or line.startswith("Error:")]
    if code == 0:
        assert may_succeed, f"accepted: {stderr}"
        assert not errors, stderr
    else:
        assert code in (1, 2), (code, stderr)
        if code == 2:
            assert len(errors) == 1 and len(errors[0]) > len("error: "), stderr


def snapshot(root: Path, keep: Callable[[Path], bool] = lambda p: False) -> dict[str, str]:
    """Hashes of every file under ``root`` except those the command is meant to write (``keep``)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not keep(p)}


def mutate(data: object, path: list[object], value: object, delete: bool) -> object:
    """``data`` with the value at ``path`` replaced (or deleted), as far as the path reaches."""
    if not path or not isinstance(data, (dict, list)) or not data:
        return value
    copy = json.loads(json.dumps(data))
    keys = list(copy) if isinstance(copy, dict) else list(range(len(copy)))
    key = keys[hash(str(path[0])) % len(keys)]
    if delete and len(path) == 1:
        del copy[key]
        return copy
    copy[key] = mutate(copy[key], path[1:], value, delete)
    return copy


# Manifests ------------------------------------------------------------------------------------
@FUZZ
@given(data=values)
def test_any_yaml_as_a_manifest_is_refused_in_one_line(tmp_path_factory, data) -> None:
    path = tmp_path_factory.mktemp("m") / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    before = snapshot(path.parent)
    code, _, stderr = invoke("run", str(path), "--dry-run")
    check_outcome(code, stderr, may_succeed=False)
    assert snapshot(path.parent) == before


@FUZZ
@given(raw=st.binary(max_size=300))
def test_any_bytes_as_a_manifest_are_refused_in_one_line(tmp_path_factory, raw) -> None:
    path = tmp_path_factory.mktemp("m") / "m.yaml"
    path.write_bytes(raw)
    code, _, stderr = invoke("run", str(path), "--dry-run")
    check_outcome(code, stderr, may_succeed=False)


@FUZZ
@given(where=st.lists(st.text(max_size=8), min_size=1, max_size=4), value=values, delete=st.booleans())
def test_a_valid_manifest_with_one_field_changed_is_accepted_or_refused_in_one_line(tmp_path_factory, where, value,
                                                                                     delete) -> None:
    path = tmp_path_factory.mktemp("m") / "m.yaml"
    path.write_text(yaml.safe_dump(mutate(GOOD, where, value, delete)))
    code, _, stderr = invoke("run", str(path), "--dry-run")
    check_outcome(code, stderr, may_succeed=True)


@FUZZ
@given(assignment=st.text(max_size=30))
def test_any_set_value_is_accepted_or_refused_in_one_line(tmp_path_factory, assignment) -> None:
    path = tmp_path_factory.mktemp("m") / "m.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    code, _, stderr = invoke("run", str(path), "--dry-run", "--set", assignment)
    check_outcome(code, stderr, may_succeed=True)


# Traces ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    """A trace of one process in two chunks (65,536 events each at most), written once per module."""
    directory = tmp_path_factory.mktemp("trace")
    script = textwrap.dedent(f"""\
        import rlscope
        with rlscope.profile({str(directory)!r}, gpu=False):
            for i in range(40_000):
                rlscope.step()
                with rlscope.operation("inference"):
                    pass
        """)
    repo = str(Path(__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=300)
    return directory


@pytest.fixture(scope="module")
def intact_tables(trace: Path, tmp_path_factory) -> str:
    """The breakdown table the undamaged trace gives."""
    copy, _ = damaged_copy(trace, tmp_path_factory.mktemp("intact"))
    code, _, stderr = invoke("analyze", str(copy))
    assert code == 0, stderr
    return (copy / "analysis" / "breakdown.csv").read_text()


def damaged_copy(trace: Path, into: Path) -> tuple[Path, Path]:
    copy = into / "trace"
    shutil.copytree(trace, copy)
    process = next(copy.glob("*/meta.json")).parent
    return copy, process


@FUZZ
@given(cut=st.floats(0, 1), flips=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 255)), max_size=4),
       drop=st.booleans())
def test_damaged_trace_bytes_never_crash_analyze_nor_pass_unsaid(tmp_path_factory, trace, intact_tables, cut, flips,
                                                                  drop) -> None:
    copy, process = damaged_copy(trace, tmp_path_factory.mktemp("t"))
    events = process / "events.arrows"
    raw = bytearray(events.read_bytes())
    for where, xor in flips:
        raw[int(where * (len(raw) - 1))] ^= xor
    events.write_bytes(bytes(raw[:max(1, int(cut * len(raw)))]))
    before = snapshot(copy, keep=lambda p: "analysis" in p.parts)
    code, _, stderr = invoke("analyze", str(copy), *(["--drop-corrupt"] if drop else []))
    check_outcome(code, stderr, may_succeed=True)
    assert snapshot(copy, keep=lambda p: "analysis" in p.parts) == before
    if code == 0:  # the damage changed nothing the analysis reads, or the analysis said what it left out
        unchanged = (copy / "analysis" / "breakdown.csv").read_text() == intact_tables
        assert unchanged or "warning:" in stderr, stderr


def meta_fields(trace: Path) -> list[str]:
    """Every field a session writes into meta.json, and the file as a whole."""
    return sorted(json.loads(next(trace.glob("*/meta.json")).read_text())) + ["(whole)"]


@FUZZ
@given(data=st.data(), value=values)
def test_a_meta_json_of_the_wrong_shape_never_crashes_analyze(tmp_path_factory, trace, data, value) -> None:
    field = data.draw(st.sampled_from(meta_fields(trace)))
    copy, process = damaged_copy(trace, tmp_path_factory.mktemp("t"))
    meta = json.loads((process / "meta.json").read_text())
    (process / "meta.json").write_text(json.dumps(value if field == "(whole)" else {**meta, field: value}))
    code, _, stderr = invoke("analyze", str(copy))
    check_outcome(code, stderr, may_succeed=True)


# Results tables -------------------------------------------------------------------------------
EXPERIMENT = {"experiment": "toy", "path": "m.yaml", "workload": "tests.toy_workloads:echo", "scale": "quick",
              "description": "", "params": {}, "grid": {"x": [1, 2]}, "exclude": [], "repetitions": 1,
              "timeout_s": 60, "figures": ["casestudy_time"]}


@FUZZ
@given(table=st.lists(st.dictionaries(st.sampled_from(["run_id", "status", "reason", "x", "table", "iterations",
                                                        "seconds", "operation", "layer"]), scalars, max_size=9),
                      max_size=5),
       meta=st.one_of(st.just(EXPERIMENT), st.builds(lambda k, v: {**EXPERIMENT, k: v},
                                                      st.sampled_from(sorted(EXPERIMENT)), values)))
def test_a_malformed_results_table_never_crashes_plot_or_report(tmp_path_factory, table, meta) -> None:
    output = tmp_path_factory.mktemp("o")
    experiment = output / "toy"
    experiment.mkdir()
    (experiment / "experiment.json").write_text(json.dumps(meta))
    import pandas as pd

    pd.DataFrame(table).to_csv(experiment / "results.csv", index=False)
    meant = lambda p: "artifacts" in p.parts or p.name == "report.html"  # noqa: E731
    before = snapshot(output, keep=meant)
    code, _, stderr = invoke("plot", str(experiment))
    check_outcome(code, stderr, may_succeed=True)
    code, _, stderr = invoke("report", str(output))
    check_outcome(code, stderr, may_succeed=True)
    assert snapshot(output, keep=meant) == before
