"""The case study "end-to-end jitted training" (configs/jitted_training.yaml): the jitted PPO's
workload at a small scale on the CPU, the SB3 side's hyperparameters, and the figure."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pandas as pd
import pytest

from experiments.casestudies import jitted_training as study
from rlscope.harness.manifest import load_manifest
from tests.conftest import REPO


def test_the_manifest_loads_at_both_scales() -> None:
    for scale in ("quick", "full"):
        manifest = load_manifest(REPO / "configs/jitted_training.yaml", scale)
        assert list(manifest.grid["framework"]) == list(study.FRAMEWORKS)
    # brax's ant only in the whole-step jit, and only at full scale (its step compiles for minutes on a CPU)
    full = [p.params for p in load_manifest(REPO / "configs/jitted_training.yaml", "full").points()]
    assert {(p["framework"], p["environment"]) for p in full} == {
        ("jax_jit", "cartpole"), ("jax_fused", "cartpole"), ("sb3", "cartpole"), ("sbx", "cartpole"),
        ("jax_jit", "ant")}


def test_an_unknown_framework_is_refused() -> None:
    assert "unknown framework" in study.check_params("framework", "tensorflow")
    with pytest.raises(ValueError, match="unknown framework"):
        study.jitted_training("tensorflow", 1024, device="cpu")


def test_the_jitted_ppo_trains_under_the_profiler_on_the_cpu() -> None:
    """In a process of its own, as the harness's workers run workloads. JAX and optax are looked
    up, not imported, here: with optax imported in pytest's process, test_architecture run
    after it crashed writing to a closed stderr ("I/O operation on closed file")."""
    missing = [name for name in ("jax", "optax") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"needs {' and '.join(missing)}: pip install 'rlscope[jax]'")
    steps = study.ENVS * study.ROLLOUT_STEPS
    script = ("import json; from experiments.casestudies import jitted_training as s; "
              f"print(json.dumps(s.jitted_training('jax_jit', {3 * steps}, device='cpu', timeout_s=600)))")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    breakdown = pd.DataFrame([r for r in result["rows"] if r["table"] == "breakdown"])
    assert "train_step" in set(breakdown["operation"])
    assert result["iterations"] == 3  # one rlscope.step() per jitted iteration, in the training phase
    assert result["uninstrumented_learn_s"] > 0 and result["profiled_learn_s"] > 0
    assert result["env_steps_per_s"] == pytest.approx(3 * steps / result["uninstrumented_learn_s"])
    # The compiled iterations' own time, beside the wall time to the steps that includes compiling.
    assert 0 < result["uninstrumented_iteration_s"] < result["uninstrumented_learn_s"]
    assert 0 < result["profiled_iteration_s"] < result["profiled_learn_s"]


def test_sb3_and_sbx_get_the_jitted_ppo_s_hyperparameters() -> None:
    from experiments.casestudies.jitted_ppo import HYPERPARAMETERS
    from experiments.casestudies.sb3_train import cartpole_ppo

    params = cartpole_ppo(study.ENVS)
    assert params["n_steps"] == study.ROLLOUT_STEPS
    assert params["batch_size"] * HYPERPARAMETERS["minibatches"] == study.ROLLOUT_STEPS * study.ENVS
    assert (params["n_epochs"], params["learning_rate"], params["clip_range"], params["ent_coef"]) == (
        HYPERPARAMETERS["epochs"], HYPERPARAMETERS["lr"], HYPERPARAMETERS["clip"], HYPERPARAMETERS["ent_coef"])


def test_the_figure_shows_time_per_framework_and_environment_and_each_step_s_scopes() -> None:
    from rlscope.plot.jitted import jitted_training

    base = {"status": "ok", "repetition": 0, "timesteps": 8192, "device": "cuda"}
    runs = (("jax_jit", "cartpole", 1.0), ("jax_fused", "cartpole", 0.5), ("sb3", "cartpole", 8.0),
            ("sbx", "cartpole", 4.0), ("jax_jit", "ant", 2.0))
    rows = [{**base, "framework": f, "environment": e, "table": "breakdown", "uninstrumented_learn_s": s,
             "env_steps_per_s": 8192 / s} for f, e, s in runs]
    for framework, environment, split in (
            ("jax_jit", "cartpole", (("update", 0.5), ("rollout/inference", 0.3), ("rollout/env", 0.2))),
            ("jax_jit", "ant", (("rollout/env", 0.9), ("update", 0.1))),
            ("jax_fused", "cartpole", (("update", 0.6), ("rollout/inference", 0.1)))):
        scoped = {**base, "framework": framework, "environment": environment, "table": "jax_scopes",
                  "uninstrumented_learn_s": 1.0, "env_steps_per_s": 8192.0}
        rows += [{**scoped, "operation": "train_step", "scope": scope, "seconds": seconds, "match": "exact"}
                 for scope, seconds in split]
        # Neither the set-up's kernels outside the step nor compile-time autotuning are the step's.
        rows += [{**scoped, "operation": "(unannotated)", "scope": "(no scope)", "seconds": 1.0, "match": "exact"},
                 {**scoped, "operation": "train_step", "scope": "autotuning (compile time)", "seconds": 4.0,
                  "match": "autotuning"}]
    # The fused kernel's launch: operation rollout inside train_step, in no XLA module.
    rows.append({**scoped, "operation": "rollout", "scope": "unmatched", "seconds": 0.3, "match": "unmatched"})
    rows.append({"status": "skipped", "framework": "sbx", "environment": "cartpole", "repetition": 1,
                 "reason": "needs a GPU"})
    grid = {"framework": list(study.FRAMEWORKS), "environment": ["cartpole", "ant"]}
    fig = jitted_training(pd.DataFrame(rows), {"grid": grid, "scale": "full"})
    left, right = fig.axes[:2]
    assert [t.get_text() for t in left.get_xticklabels()] == [
        "jax_jit\ncartpole", "jax_fused\ncartpole", "sb3\ncartpole", "sbx\ncartpole", "jax_jit\nant"]
    assert [round(p.get_height(), 6) for p in left.patches] == [1.0, 0.5, 8.0, 4.0, 2.0]
    assert [t.get_text() for t in right.get_xticklabels()] == [
        "jax_jit\ncartpole", "jax_fused\ncartpole", "jax_jit\nant"]
    assert sorted(t.get_text() for t in right.get_legend().get_texts()) == [
        "rollout (fused CUDA kernel)", "rollout/env", "rollout/inference", "update"]
    # Each scope's share per run, one colour per scope across the bars (zero-height where absent).
    heights = {(round(p.get_x() + p.get_width() / 2), round(p.get_height(), 6)) for p in right.patches
               if p.get_height() > 0}
    assert heights == {(0, 50.0), (0, 30.0), (0, 20.0), (1, 60.0), (1, 10.0), (1, 30.0), (2, 90.0), (2, 10.0)}
    assert {t.get_text() for t in right.texts} == {"50.0%", "30.0%", "20.0%", "60.0%", "10.0%", "90.0%"}
    assert "PPO" in fig._suptitle.get_text() and left.get_ylabel() and right.get_ylabel()


def test_brax_environments_are_the_whole_step_jit_s_only() -> None:
    with pytest.raises(ValueError, match="jax_jit's only"):
        study.jitted_training("sb3", 1024, device="cpu", environment="ant")


def test_the_figure_draws_runs_without_kernels() -> None:
    """On a CPU no run has GPU kernels, so the results have no ``jax_scopes`` rows (nor their
    columns): the time panel is drawn and the scope panel says why it is empty."""
    from rlscope.plot.jitted import jitted_training

    rows = [{"status": "ok", "repetition": 0, "timesteps": 8192, "device": "cpu", "framework": f,
             "environment": "cartpole", "table": "breakdown", "operation": "train_step", "uninstrumented_learn_s": s,
             "env_steps_per_s": 8192 / s} for f, s in (("jax_jit", 1.0), ("sb3", 8.0))]
    fig = jitted_training(pd.DataFrame(rows), {"grid": {"framework": list(study.FRAMEWORKS),
                                                        "environment": ["cartpole"]}, "scale": "quick"})
    left, right = fig.axes[:2]
    assert [round(p.get_height(), 6) for p in left.patches] == [1.0, 8.0]
    assert "need a GPU" in right.texts[0].get_text()


def test_a_simulator_s_own_scopes_count_as_its_scope_and_every_bar_sums_to_100() -> None:
    """brax's MJX names dozens of scopes under ``rollout/env``: the figure cuts them to
    ``rollout/env``; past ten scopes in all, the smallest share one bar rather than vanish."""
    from rlscope.plot.jitted import jitted_training

    base = {"status": "ok", "repetition": 0, "timesteps": 8192, "device": "cuda", "framework": "jax_jit",
            "uninstrumented_learn_s": 1.0, "env_steps_per_s": 8192.0}
    rows = [{**base, "environment": "ant", "table": "jax_scopes", "operation": "train_step", "match": "exact",
             "scope": f"rollout/env/step/forward/part{i}", "seconds": 0.05} for i in range(12)]
    rows.append({**base, "environment": "ant", "table": "jax_scopes", "operation": "train_step", "match": "exact",
                 "scope": "update", "seconds": 0.4})
    scopes = [f"scope{i}" for i in range(12)]  # twelve scopes of their own on CartPole
    rows += [{**base, "environment": "cartpole", "table": "jax_scopes", "operation": "train_step", "match": "exact",
              "scope": scope, "seconds": 1.0 + i} for i, scope in enumerate(scopes)]
    grid = {"framework": ["jax_jit"], "environment": ["cartpole", "ant"]}
    right = jitted_training(pd.DataFrame(rows), {"grid": grid, "scale": "full"}).axes[1]
    legend = [t.get_text() for t in right.get_legend().get_texts()]
    assert len(legend) == 10 and legend[-1] == "other scopes" and "rollout/env" in legend
    assert not any(label.startswith("rollout/env/") for label in legend)
    totals: dict[int, float] = {}
    for patch in right.patches:
        x = round(patch.get_x() + patch.get_width() / 2)
        totals[x] = totals.get(x, 0.0) + patch.get_height()
    assert {x: round(total, 6) for x, total in totals.items()} == {0: 100.0, 1: 100.0}
