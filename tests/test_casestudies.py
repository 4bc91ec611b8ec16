"""RL-Scope's case studies (algorithm and simulator choice): manifests, the profiled-training
workload, its skips and errors, and the figures, end to end at a test's size."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rlscope.errors import ManifestError, SkipRun
from rlscope.harness.manifest import load_manifest

pytest.importorskip("stable_baselines3")

REPO = Path(__file__).resolve().parents[1]
CASE_STUDIES = ("algorithm_choice", "simulator_choice")


@pytest.mark.parametrize("name", CASE_STUDIES)
@pytest.mark.parametrize("scale", ["quick", "full"])
def test_manifests_validate(name, scale):
    manifest = load_manifest(REPO / "configs" / f"{name}.yaml", scale)
    assert manifest.figures == ("casestudy_breakdown", "casestudy_transitions")
    assert len(list(manifest.points())) >= 5


def test_an_environment_that_does_not_exist_fails_the_manifest_with_a_did_you_mean(tmp_path):
    text = (REPO / "configs" / "simulator_choice.yaml").read_text().replace("Walker2d-v5", "Walker2D-v5")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ManifestError, match=r"bad.yaml:\d+: field 'grid.env.4': no gymnasium environment "
                                            r"'Walker2D-v5'; did you mean 'Walker2d-v5'"):
        load_manifest(bad, "quick")
    with pytest.raises(ManifestError, match="unknown algorithm 'ppo2'; known: ppo, a2c, sac, td3, ddpg"):
        bad.write_text((REPO / "configs" / "algorithm_choice.yaml").read_text().replace("[ppo,", "[ppo2,"))
        load_manifest(bad, "quick")


def test_a_missing_simulator_is_a_skipped_run_that_names_the_install(tmp_path, monkeypatch):
    from experiments.casestudies.profiled import profiled_training

    shadow = tmp_path / "shadow" / "mujoco"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('mujoco is not installed here')\n")
    import os

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(shadow.parent), str(REPO),
                                                                   os.environ.get("PYTHONPATH")))))
    with pytest.raises(SkipRun, match=r"Hopper-v5 needs a simulator that is not installed .*"
                                      r"pip install 'rlscope\[sims\]'"):
        profiled_training("ppo", "Hopper-v5", 64, device="cpu")


def test_training_rows_cover_the_training_phases_only_and_add_up():
    from experiments.casestudies.profiled import training_rows

    key = dict(process="t[1]", thread="main")
    breakdown = pd.DataFrame([
        {**key, "phase": "default", "operation": "(unannotated)", "cpu": "Python", "gpu": False, "time_s": 5.0},
        {**key, "phase": "data_collection", "operation": "inference", "cpu": "Backend", "gpu": False, "time_s": 1.0},
        {**key, "phase": "data_collection", "operation": "simulation", "cpu": "Simulator", "gpu": False, "time_s": 2.0},
        {**key, "phase": "training", "operation": "backpropagation", "cpu": "Backend", "gpu": False, "time_s": 3.0},
        {**key, "phase": "training", "operation": "backpropagation", "cpu": "CUDA API", "gpu": True, "time_s": 2.0},
    ])
    transitions = pd.DataFrame([
        {**key, "phase": "default", "operation": "(unannotated)", "transition": "Python->Backend", "count": 900,
         "iterations": 0},
        {**key, "phase": "data_collection", "operation": "simulation", "transition": "Python->Simulator",
         "count": 40, "iterations": 4},
        {**key, "phase": "training", "operation": "backpropagation", "transition": "Python->Backend", "count": 400,
         "iterations": 0},
    ])
    result = training_rows(breakdown, transitions)
    rows = pd.DataFrame(result["rows"])
    shares = rows[rows["table"] == "breakdown"].set_index(["operation", "layer"])["share"]
    assert result["training_s"] == 8.0 and result["iterations"] == 4  # start-up (phase "default") left out
    assert shares.sum() == pytest.approx(1.0)
    assert shares[("backpropagation", "CPU + GPU")] == pytest.approx(2 / 8)
    per_iteration = rows[rows["table"] == "transitions"].set_index(["operation", "transition"])["per_iteration"]
    assert per_iteration.to_dict() == {("backpropagation", "Python->Backend"): 100.0,
                                       ("simulation", "Python->Simulator"): 10.0}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "grid", "params"), [
    ("algorithm_choice", "algorithm: [ppo, sac]", "timesteps: 400, learning_starts: 200"),
    ("simulator_choice", "env: [CartPole-v1, Hopper-v5]", "timesteps: 512"),
])
def test_each_case_study_runs_end_to_end_into_rows_and_figures(tmp_path, cli_env, name, grid, params):
    """The manifest at a test's size: fewer workloads, fewer steps, otherwise as shipped."""
    pytest.importorskip("mujoco")
    import yaml

    manifest = yaml.safe_load((REPO / "configs" / f"{name}.yaml").read_text())
    manifest["grid"] = yaml.safe_load(grid)
    manifest["scales"]["quick"]["params"].update(yaml.safe_load("{" + params + "}"))
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    done = subprocess.run([sys.executable, "-m", "rlscope.cli", "run", str(path), "--scale", "quick", "--output",
                           str(tmp_path / "out")], capture_output=True, text=True, env=cli_env, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    results = pd.read_csv(tmp_path / "out" / name / "results.csv")
    column = next(iter(manifest["grid"]))
    assert (results["status"] == "ok").all() and results[column].nunique() == 2
    breakdown = results[results["table"] == "breakdown"]
    assert set(breakdown["operation"]) >= {"inference", "simulation", "backpropagation"}
    assert breakdown.groupby(column)["share"].sum().round(6).eq(1.0).all()
    transitions = results[results["table"] == "transitions"]
    assert (transitions.loc[transitions["transition"] == "Python->Backend", "per_iteration"] > 0).all()
    for figure in manifest["figures"]:
        pdf = tmp_path / "out" / "artifacts" / f"experiment_{name}" / f"{figure}.pdf"
        assert pdf.read_bytes().startswith(b"%PDF")


def test_a_crash_inside_sb3_fails_its_run_and_the_sweep_goes_on(tmp_path, cli_env):
    """TD3 refuses CartPole's discrete actions inside SB3: that run fails with its log named, and
    the PPO run beside it finishes into results.csv."""
    import yaml

    manifest = yaml.safe_load((REPO / "configs" / "algorithm_choice.yaml").read_text())
    manifest["params"]["env"] = "CartPole-v1"
    manifest["grid"] = {"algorithm": ["td3", "ppo"]}
    manifest["scales"]["quick"]["params"].update(timesteps=256)
    manifest["figures"] = []
    path = tmp_path / "crash.yaml"
    path.write_text(yaml.safe_dump(manifest))
    done = subprocess.run([sys.executable, "-m", "rlscope.cli", "run", str(path), "--scale", "quick", "--output",
                           str(tmp_path / "out")], capture_output=True, text=True, env=cli_env, timeout=600, cwd=REPO)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "algorithm-td3" in done.stderr and "log.txt" in done.stderr
    results = pd.read_csv(tmp_path / "out" / "algorithm_choice" / "results.csv")
    # td3 finished nothing: its row says so, with no measurement
    assert results.groupby("algorithm")["status"].first().to_dict() == {"ppo": "ok", "td3": "failed"}


def test_corrected_training_rows_carry_the_corrections_interval_and_the_figures_draw_it():
    from matplotlib.container import ErrorbarContainer

    from experiments.casestudies.profiled import training_rows
    from rlscope.analyze.caveats import OVERCORRECTED
    from rlscope.plot.breakdown import INTERVAL_LABEL
    from rlscope.plot.casestudies import casestudy_breakdown, casestudy_time

    key = dict(process="t[1]", thread="main", phase="data_collection", gpu=False)
    breakdown = pd.DataFrame([
        {**key, "operation": "inference", "cpu": "Python", "time_s": 4.0, "corrected_ns": 3e9,
         "corrected_low_ns": 2.5e9, "corrected_high_ns": 3.5e9, "caveat": ""},
        {**key, "operation": "inference", "cpu": "Backend", "time_s": 2.0, "corrected_ns": 2e9,
         "corrected_low_ns": 2e9, "corrected_high_ns": 2e9, "caveat": ""},
        {**key, "operation": "simulation", "cpu": "Simulator", "time_s": 1.0, "corrected_ns": 0,
         "corrected_low_ns": 0, "corrected_high_ns": 0, "caveat": OVERCORRECTED},
    ])
    transitions = pd.DataFrame([{"process": "t[1]", "thread": "main", "phase": "data_collection",
                                 "operation": "simulation", "transition": "Python->Simulator", "count": 8,
                                 "iterations": 2}])
    result = training_rows(breakdown, transitions, corrected=True)
    rows = pd.DataFrame(result["rows"])
    rows = rows[rows["table"] == "breakdown"].set_index("layer")
    assert rows.loc["Python", ["corrected_low_seconds", "corrected_seconds", "corrected_high_seconds"]].tolist() == [
        2.5, 3.0, 3.5]
    # Python's share at its ends against Backend's 2 s: 2.5 / 4.5 and 3.5 / 5.5
    assert rows.loc["Python", ["corrected_low_share", "corrected_share", "corrected_high_share"]].tolist() == \
        pytest.approx([2.5 / 4.5, 3 / 5, 3.5 / 5.5])
    assert rows.loc["Simulator", "caveat"] == OVERCORRECTED and rows.loc["Python", "caveat"] == ""
    results = rows.reset_index().assign(status="ok", reason="", run_id="r", algorithm="ppo", iterations=2)
    meta = {"scale": "quick", "grid": {"algorithm": ["ppo"]}}
    # shares: Python's and, moved by it, Backend's; times: Python's alone (the others' bounds are one value)
    for figure, drawn in ((casestudy_breakdown(results, meta), 2), (casestudy_time(results, meta), 1)):
        whiskers = [c for ax in figure.axes for c in ax.containers if isinstance(c, ErrorbarContainer)]
        assert len(whiskers) == drawn
        assert INTERVAL_LABEL in [t.get_text() for t in figure.legends[0].get_texts()]


def test_calibration_runs_hold_enough_rollouts_to_alternate_on() -> None:
    """PPO's 512-step rollouts: a calibration twice as long as a 10,000-step training would hold
    about 39 rollouts, fewer than the windows need; it is made longer instead."""
    from experiments.casestudies.profiled import MIN_CALIBRATION_ITERATIONS, steps_per_iteration

    assert steps_per_iteration("ppo", 1) == 512 and steps_per_iteration("ppo", 4) == 2048
    assert steps_per_iteration("a2c", 1) == 5  # SB3's default n_steps
    assert steps_per_iteration("td3", 1) == steps_per_iteration("sac", 1) == 1  # one step, one update
    assert MIN_CALIBRATION_ITERATIONS * steps_per_iteration("ppo", 1) > 2 * 10_000


def test_a_calibration_is_made_at_the_length_its_rollouts_need(tmp_path, monkeypatch) -> None:
    """_calibration(make=True) asks the cache for a calibration of a command long enough for
    MIN_CALIBRATION_ITERATIONS rollouts, with options calibrate() accepts."""
    import inspect

    import rlscope.calibrate as calibrate_package
    from experiments.casestudies import profiled
    from rlscope.calibrate.ladder import calibrate

    asked = {}

    def cached(identity, command, **options):
        accepted = set(inspect.signature(calibrate).parameters)
        assert set(options) <= accepted, set(options) - accepted
        asked.update(identity=identity, command=command(), options=options)
        return None, tmp_path / "calibration.json"

    monkeypatch.setattr(calibrate_package, "cached_calibration", cached)
    profiled._calibration("ppo", "Walker2d-v5", 10_000, "cuda", None, 1, "sb3", 600.0, make=True)
    length = int(asked["command"][asked["command"].index("Walker2d-v5") + 1])
    assert length == profiled.MIN_CALIBRATION_ITERATIONS * 512
    assert any("min-iterations" in part for part in asked["identity"])
