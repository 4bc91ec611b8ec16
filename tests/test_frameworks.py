"""The framework comparison's frameworks (experiments.casestudies.frameworks): each trains under
`rlscope prof` with the same operations; warming up leaves no trace in the model; graph modes
change how training calls the backend."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from experiments.casestudies.frameworks import FRAMEWORKS, framework_problem  # noqa: E402
from rlscope.analyze import analyze_trace  # noqa: E402
from rlscope.errors import ManifestError, SkipRun  # noqa: E402
from rlscope.harness.manifest import load_manifest  # noqa: E402
from rlscope.analyze.attribution import read_attributed  # noqa: E402
from rlscope.trace.schema import Category, Kind  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STEPS, LEARNING_STARTS = 300, 100


def _installed(framework: str) -> bool:
    if framework != "sbx":
        return True
    try:
        import sbx  # noqa: F401
    except ImportError:
        return False
    return True


# Python 3.13 only: the profiled torch.compile run finishes training, then segfaults in the garbage
# collector at interpreter exit (unprofiled, the same run exits 0). Known and open: only that crash
# xfails, so the tests run as usual once it is gone.
_COMPILE_CRASH = "rlscope prof of torch.compile segfaults at exit on Python 3.13 (open defect)"


class _Traces(dict):
    """Each framework's trace directory; a failed training fails (or, for the known crash, xfails)
    only the tests that read its trace."""

    def __missing__(self, framework: str) -> Path:
        done = self.failed[framework]
        if framework == "sb3_compile" and sys.version_info >= (3, 13) and done.returncode in (-11, 245):
            pytest.xfail(_COMPILE_CRASH)
        pytest.fail(f"{framework} exited {done.returncode}: {done.stdout[-2000:]}{done.stderr[-3000:]}")


@pytest.fixture(scope="module")
def traces(tmp_path_factory, request) -> dict[str, Path]:
    """One short TD3 training per installed framework under `rlscope prof`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    out = _Traces()
    out.failed = {}
    for framework in FRAMEWORKS:
        if not _installed(framework):
            continue
        trace = tmp_path_factory.mktemp(framework) / "trace"
        done = subprocess.run([sys.executable, "-m", "rlscope.cli", "prof", "--output", str(trace), "--no-analyze",
                               "--", sys.executable, "-m", "experiments.casestudies.sb3_train", "td3", "Pendulum-v1",
                               str(STEPS), "cpu", "--learning-starts", str(LEARNING_STARTS), "--framework", framework],
                              capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
        if done.returncode == 0:
            out[framework] = trace
        else:
            out.failed[framework] = done
    return out


def _trainer(trace: Path):
    (process,) = [p for p in read_attributed(trace) if p.meta["process"] == "sb3_train"]
    return process


def _backend_calls_in(process, operation: str) -> tuple[int, list[str]]:
    """How many times ``operation`` ran, and the backend functions Python called inside it."""
    ev = process.events
    ops = ev[(ev["kind"] == int(Kind.OPERATION)) & (ev["name"] == operation)]
    calls = ev[(ev["kind"] == int(Kind.CPU_CALL)) & (ev["category"] == int(Category.BACKEND))]
    starts, ends = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    index = np.searchsorted(starts, calls["start_ns"].to_numpy(), side="right") - 1
    inside = (index >= 0) & (calls["end_ns"].to_numpy() <= ends[np.maximum(index, 0)])
    return len(ops), [str(n) for n in calls["name"][inside]]


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_every_framework_trains_with_the_same_operations_and_counts_its_transitions(traces, framework):
    if not _installed(framework):
        pytest.skip(f"{framework} is not installed")
    process = _trainer(traces[framework])
    ops = process.events[process.events["kind"] == int(Kind.OPERATION)]
    counts = ops["name"].astype(str).value_counts()
    assert set(counts.index) == {"inference", "simulation", "backpropagation"}
    assert counts["simulation"] == STEPS
    assert counts["inference"] == STEPS - LEARNING_STARTS  # the policy acts after the random warm-up
    transitions = analyze_trace(traces[framework])["transitions"]
    mine = transitions[(transitions["process"].str.startswith("sb3_train")) & (transitions["thread"] == "main")]
    per_op = mine[mine["transition"] == "Python->Backend"].groupby("operation")["count"].sum()
    assert per_op.get("inference", 0) > 0 and per_op.get("backpropagation", 0) > 0


def test_compiled_networks_no_longer_run_layer_by_layer_from_python(traces):
    """Eager SB3 calls torch's ``linear`` once per layer of the actor (3) at every action choice;
    compiled, the layers run inside Inductor's generated code and Python calls no ``linear``."""
    eager, eager_calls = _backend_calls_in(_trainer(traces["sb3"]), "inference")
    compiled, compiled_calls = _backend_calls_in(_trainer(traces["sb3_compile"]), "inference")
    assert eager_calls.count("linear") == 3 * eager
    assert compiled_calls.count("linear") == 0 and compiled == eager


def test_jax_jit_makes_far_fewer_python_to_backend_calls_than_eager_pytorch(traces):
    if "sbx" not in traces:
        pytest.skip("sbx is not installed")
    for operation in ("inference", "backpropagation"):
        eager, eager_calls = _backend_calls_in(_trainer(traces["sb3"]), operation)
        jitted, jit_calls = _backend_calls_in(_trainer(traces["sbx"]), operation)
        assert len(jit_calls) / jitted < len(eager_calls) / eager / 5, operation


@pytest.mark.parametrize("framework", ["sb3", "sbx"])
def test_warming_up_leaves_weights_optimiser_buffer_and_counters_as_they_were(framework):
    if not _installed(framework):
        pytest.skip(f"{framework} is not installed")
    from experiments.casestudies.frameworks import warm_up
    from experiments.casestudies.sb3_train import make_model

    model = make_model("td3", "Pendulum-v1", "cpu", framework=framework)

    def state() -> list[np.ndarray]:
        if framework == "sbx":  # SBX's states are pytrees, torch's are state dicts
            import jax.tree_util as jtu

            leaves = jtu.tree_leaves((model.policy.actor_state, model.policy.qf_state, model.key))
            return [np.asarray(leaf).copy() for leaf in leaves]
        return [t.detach().clone().numpy() for t in model.policy.state_dict().values()]

    before = state()
    warm_up(model, framework, n_envs=1)
    after = state()
    assert len(before) == len(after) and all(np.array_equal(a, b) for a, b in zip(before, after))
    assert model._n_updates == 0 and model.replay_buffer.pos == 0 and not model.replay_buffer.full


def test_a_framework_that_cannot_run_an_algorithm_is_refused_and_a_missing_one_is_skipped(tmp_path, monkeypatch):
    assert framework_problem("sbx", "a2c") == "SBX has no a2c; it has ppo, sac, td3, ddpg, dqn"
    assert "compiles td3 and ddpg only" in framework_problem("sb3_compile", "ppo")
    assert framework_problem("tf", "td3").startswith("unknown framework 'tf'")
    from experiments.casestudies.profiled import profiled_training

    shadow = tmp_path / "shadow" / "sbx"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('sbx is not installed here')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(shadow.parent), str(REPO),
                                                                   os.environ.get("PYTHONPATH")))))
    with pytest.raises(SkipRun, match=r"the sbx framework is not installed .* pip install 'rlscope\[jax\]'"):
        profiled_training("td3", "Pendulum-v1", 64, device="cpu", framework="sbx")


@pytest.mark.parametrize("scale", ["quick", "full"])
def test_the_framework_comparison_manifest_validates_and_refuses_an_unknown_framework(tmp_path, scale):
    manifest = load_manifest(REPO / "configs" / "rl_framework_comparison.yaml", scale)
    assert manifest.figures == ("casestudy_time", "casestudy_breakdown", "casestudy_transitions")
    assert {(p.params["algorithm"], p.params["framework"]) for p in manifest.points()} == {
        (a, f) for a in ("td3", "ddpg") for f in FRAMEWORKS}
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "configs" / "rl_framework_comparison.yaml").read_text().replace("sbx]", "tf_eager]"))
    with pytest.raises(ManifestError, match=r"field 'grid.framework.2': unknown framework 'tf_eager'; known: "):
        load_manifest(bad, scale)
