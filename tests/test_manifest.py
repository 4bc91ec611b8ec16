"""Manifest validation: each kind of mistake gets its own message with file, line and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from rlscope.errors import ManifestError
from rlscope.harness.manifest import load_manifest, with_overrides

GOOD = """\
experiment: toy
workload: tests.toy_workloads:echo
params: {sleep_s: 0}
grid:
  x: [1, 2, 3]
  mode: [a, b]
exclude:
  - {x: 3, mode: b}
repetitions: 2
scales:
  quick:
    grid: {x: [1]}
    repetitions: 1
figures: []
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def error_for(tmp_path: Path, text: str, scale: str = "full") -> str:
    with pytest.raises(ManifestError) as info:
        load_manifest(write(tmp_path, text), scale)
    return str(info.value)


def test_full_scale_expands_grid_in_order_without_excluded_points(tmp_path: Path) -> None:
    m = load_manifest(write(tmp_path, GOOD), "full")
    ids = [p.run_id for p in m.points()]
    assert ids == ["x-1__mode-a", "x-1__mode-b", "x-2__mode-a", "x-2__mode-b", "x-3__mode-a"]
    assert m.repetitions == 2
    assert dict(next(m.points()).params) == {"sleep_s": 0, "x": 1, "mode": "a"}


def test_quick_scale_overrides_grid_and_repetitions(tmp_path: Path) -> None:
    m = load_manifest(write(tmp_path, GOOD), "quick")
    assert [p.run_id for p in m.points()] == ["x-1__mode-a", "x-1__mode-b"]
    assert m.repetitions == 1


def test_unknown_top_level_key_names_line_and_suggests(tmp_path: Path) -> None:
    msg = error_for(tmp_path, GOOD.replace("repetitions: 2", "repetitons: 2"))
    assert "m.yaml:9:" in msg and "unknown field 'repetitons'" in msg and "did you mean 'repetitions'" in msg


def test_unknown_scale_key(tmp_path: Path) -> None:
    msg = error_for(tmp_path, GOOD.replace("    repetitions: 1", "    reps: 1"))
    assert "m.yaml:13:" in msg and "'reps' in scales.quick" in msg and "allowed fields" in msg


def test_wrong_type_names_field_and_value(tmp_path: Path) -> None:
    msg = error_for(tmp_path, GOOD.replace("repetitions: 2", "repetitions: two"))
    assert "m.yaml:9:" in msg and "'repetitions'" in msg and "integer >= 1" in msg and "'two'" in msg


def test_grid_value_must_be_a_list(tmp_path: Path) -> None:
    msg = error_for(tmp_path, GOOD.replace("x: [1, 2, 3]", "x: 5"))
    assert "m.yaml:5:" in msg and "'grid.x'" in msg and "non-empty list" in msg


def test_grid_values_must_be_scalars(tmp_path: Path) -> None:
    msg = error_for(tmp_path, GOOD.replace("x: [1, 2, 3]", "x: [1, {a: 2}]"))
    assert "'grid.x.1'" in msg and "single value" in msg


def test_missing_required_field(tmp_path: Path) -> None:
    msg = error_for(tmp_path, GOOD.replace("workload: tests.toy_workloads:echo\n", ""))
    assert "missing required field 'workload'" in msg


def test_bad_workload_form(tmp_path: Path) -> None:
    msg = error_for(tmp_path, GOOD.replace("tests.toy_workloads:echo", "tests/toy.py"))
    assert "m.yaml:2:" in msg and "package.module:function" in msg


def test_unknown_figure_lists_known_ones(tmp_path: Path) -> None:
    msg = error_for(tmp_path, GOOD.replace("figures: []", "figures: [nope]"))
    assert "unknown figure 'nope'" in msg and "throughput_vs_envs" in msg


def test_invalid_yaml_reports_line(tmp_path: Path) -> None:
    msg = error_for(tmp_path, GOOD.replace("grid:\n", "grid: [\n"))
    assert "not valid YAML" in msg and "m.yaml:" in msg


def test_same_parameter_in_params_and_grid(tmp_path: Path) -> None:
    msg = error_for(tmp_path, GOOD.replace("{sleep_s: 0}", "{x: 0}"))
    assert "x appear in both params and grid" in msg


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="cannot read manifest"):
        load_manifest(tmp_path / "absent.yaml")


def test_every_shipped_manifest_validates_at_both_scales() -> None:
    manifests = sorted(Path("configs").glob("*.yaml"))
    assert manifests, "configs/ holds no manifests"
    for path in manifests:
        for scale in ("quick", "full"):
            assert list(load_manifest(path, scale).points())


def test_every_experiment_script_runs_the_manifest_of_its_name() -> None:
    """experiments/experiment_<name>.sh runs the manifest whose experiment is <name>, so its
    figures land in output/artifacts/experiment_<name>/ as the script says; every manifest has one."""
    import re

    scripts = sorted(Path("experiments").glob("experiment_*.sh"))
    run = set()
    for script in scripts:
        (manifest,) = re.findall(r"run_manifest\.sh\"? (configs/\S+\.yaml)", script.read_text())
        experiment = load_manifest(Path(manifest), "quick").experiment
        assert script.name == f"experiment_{experiment}.sh", (script, manifest)
        assert f"output/artifacts/experiment_{experiment}/" in script.read_text()
        run.add(Path(manifest))
    assert run == set(Path("configs").glob("*.yaml"))  # one script per manifest


def test_set_replaces_a_fixed_parameter_and_narrows_a_grid_one(tmp_path: Path) -> None:
    (m,) = with_overrides([load_manifest(write(tmp_path, GOOD), "full")], {"sleep_s": 0.5, "mode": "b"})
    assert [p.run_id for p in m.points()] == ["x-1__mode-b", "x-2__mode-b"]
    assert all(p.params["sleep_s"] == 0.5 for p in m.points())


def test_set_of_a_parameter_the_manifest_lacks_names_it_and_suggests(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        with_overrides([load_manifest(write(tmp_path, GOOD), "quick")], {"sleep": 1})
    msg = str(info.value)
    assert "--set sleep=1" in msg and "no parameter 'sleep'" in msg and "did you mean 'sleep_s'" in msg


def test_set_value_is_checked_by_the_workload(tmp_path: Path) -> None:
    """A value the workload's check_params refuses is refused before anything runs."""
    with pytest.raises(ManifestError, match=r"--set env=CartPol-v1: .*did you mean"):
        with_overrides([load_manifest(Path("configs/simulator_choice.yaml"), "quick")], {"env": "CartPol-v1"})


def test_set_over_several_manifests_leaves_those_without_the_parameter_alone() -> None:
    """`make smoke-gpu` runs every manifest at quick scale with --set device=cuda."""
    manifests = [load_manifest(path, "quick") for path in sorted(Path("configs").glob("*.yaml"))]
    on_gpu = with_overrides(manifests, {"device": "cuda"})
    for before, after in zip(manifests, on_gpu):
        if "device" in before.params:
            assert all(p.params["device"] == "cuda" for p in after.points()), after.experiment
        else:
            assert after == before
    assert sum("device" in m.params for m in on_gpu) >= len(on_gpu) - 1  # only overhead_correction picks per workload


@pytest.mark.parametrize("text, expected", [
    ("figures: [[a]]", ["m.yaml:14:", "'figures.0'", "expected a figure name, got a list"]),
    ("exclude: [{x: [[1]]}]", ["'exclude.0.x'", "expected a single value", "got a list"]),
    ("exclude: [{nope: 1}]", ["m.yaml:13:", "'exclude.0.nope'", "not a grid parameter", "excludes nothing"]),
    ("exclude: [{mod: a}]", ["did you mean 'mode'?"]),
    ("params: {sleep_s: 0, x: 2}", ["x appear in both params and grid"]),
    ("params: {sleep_s: fast}", ["'params.sleep_s'", "text 'fast'", "parameter 'sleep_s'", "valid number"]),
    ("params: {sleep_s: 0, speed: 2}", ["'params.speed'", "takes no parameter 'speed'", "it takes: x,"]),
])
def test_what_the_workload_and_figures_cannot_use_is_refused_at_its_line(tmp_path: Path, text: str,
                                                                          expected: list[str]) -> None:
    base = GOOD.replace("figures: []\n", "") if text.startswith("figures") else GOOD
    base = base.replace("exclude:\n  - {x: 3, mode: b}\n", "") if text.startswith("exclude") else base
    base = base.replace("params: {sleep_s: 0}\n", "") if text.startswith("params") else base
    msg = error_for(tmp_path, base.rstrip("\n") + "\n" + text + "\n")
    for part in expected:
        assert part in msg, (part, msg)


def test_a_workload_parameter_without_default_must_be_set(tmp_path: Path) -> None:
    msg = error_for(tmp_path, GOOD.replace("  x: [1, 2, 3]\n", "").replace("{x: 3, mode: b}", "{mode: b}")
                    .replace("grid: {x: [1]}", "grid: {mode: [a]}"))
    assert "needs 'x'" in msg and "neither params nor grid" in msg


def test_a_figure_drawn_over_a_parameter_the_manifest_lacks_is_refused(tmp_path: Path) -> None:
    msg = error_for(tmp_path, GOOD.replace("figures: []", "figures: [throughput_vs_envs]"))
    assert "'figures.0'" in msg and "backend, num_envs" in msg and "add them to params or grid" in msg


def test_a_manifest_that_is_not_utf8_is_one_message(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_bytes(GOOD.encode() + b"# caf\xe9\n")
    with pytest.raises(ManifestError, match=r"m.yaml:15: not UTF-8 text"):
        load_manifest(path, "full")


def test_exponent_numbers_are_numbers_as_in_yaml_1_2(tmp_path: Path) -> None:
    m = load_manifest(write(tmp_path, GOOD.replace("{sleep_s: 0}", "{sleep_s: 1e-3}")), "full")
    assert m.params["sleep_s"] == 0.001


def test_values_that_spell_alike_get_distinct_run_ids(tmp_path: Path) -> None:
    m = load_manifest(write(tmp_path, GOOD.replace("mode: [a, b]", "mode: ['a b', a_b, a-b]")
                            .replace("{x: 3, mode: b}", "{x: 3}")), "quick")
    ids = [p.run_id for p in m.points()]
    assert len(set(ids)) == len(ids) == 3
    assert all(i.startswith("x-1__mode-a_b__") for i in ids)
