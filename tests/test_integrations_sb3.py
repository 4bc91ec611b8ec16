"""rlscope.integrations.sb3 on tiny Stable-Baselines3 runs under `rlscope prof` (CPU, seconds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from rlscope.analyze import analyze_trace  # noqa: E402
from rlscope.analyze.attribution import read_attributed  # noqa: E402
from rlscope.trace.schema import Category, Kind  # noqa: E402


def train(tmp_path: Path, cli_env: dict[str, str], *args: str) -> Path:
    trace = tmp_path / "trace"
    done = subprocess.run([sys.executable, "-m", "rlscope.cli", "prof", "--output", str(trace), "--no-analyze", "--",
                           sys.executable, "-m", "experiments.casestudies.sb3_train", *args],
                          capture_output=True, text=True, env=cli_env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return trace


def trainer(trace: Path):
    (process,) = [p for p in read_attributed(trace) if p.meta["process"] == "sb3_train"]
    return process


def operations(process) -> dict[str, np.ndarray]:
    events = process.events
    ops = events[(events["kind"] == int(Kind.OPERATION)) & (events["tid"] == process.meta["main_tid"])]
    return {str(name): group[["start_ns", "end_ns", "depth"]].to_numpy()
            for name, group in ops.groupby("name", observed=True)}


def phase_of(process, times: np.ndarray) -> list[str]:
    events = process.events
    phases = events[events["kind"] == int(Kind.PHASE)].sort_values("start_ns")
    index = np.searchsorted(phases["start_ns"].to_numpy(), times, side="right") - 1
    return [str(phases["name"].iloc[i]) for i in index]


@pytest.mark.parametrize(("args", "inferences"), [
    (("ppo", "CartPole-v1", "1024", "cpu"), 1024),  # two rollouts of 512 steps
    (("sac", "Pendulum-v1", "300", "cpu", "--learning-starts", "100"), 200),  # the policy acts after 100 random steps
])
def test_operations_phases_and_iterations_of_an_sb3_run(tmp_path, cli_env, args, inferences):
    trace = train(tmp_path, cli_env, *args)
    process = trainer(trace)
    ops = operations(process)
    assert set(ops) == {"inference", "simulation", "backpropagation"}
    assert len(ops["inference"]) == inferences
    steps = int(args[2])
    assert len(ops["simulation"]) == steps
    rollouts = len(ops["backpropagation"])
    iterations = (process.events["kind"] == int(Kind.STEP)).sum()
    assert rollouts == iterations == (2 if args[0] == "ppo" else steps)
    # Nested correctly: all three are top-level, never overlapping one another.
    spans = np.concatenate(list(ops.values()))
    assert (spans[:, 2] == 0).all()
    spans = spans[np.argsort(spans[:, 0])]
    assert (spans[1:, 0] >= spans[:-1, 1]).all()
    # Phases split: acting and stepping while collecting, backpropagation while training.
    assert set(phase_of(process, ops["inference"][:, 0])) == {"data_collection"}
    assert set(phase_of(process, ops["simulation"][:, 0])) == {"data_collection"}
    assert set(phase_of(process, ops["backpropagation"][:, 0])) == {"training"}
    # The breakdown's CPU side adds up to the process's wall time.
    tables = analyze_trace(trace)
    main = tables["breakdown"]
    main = main[(main["process"] == process.process) & (main["thread"] == "main")]
    wall = process.meta["end_ns"] - process.meta["start_ns"]
    assert main.loc[main["cpu"] != "none", "time_ns"].sum() == pytest.approx(wall, rel=1e-6)
    backprop = main[main["operation"] == "backpropagation"]
    assert backprop.loc[backprop["cpu"] == "Backend", "time_ns"].sum() > 0  # torch's autograd and optimiser


def test_mujoco_simulation_is_simulator_time(tmp_path, cli_env):
    pytest.importorskip("mujoco")
    trace = train(tmp_path, cli_env, "ppo", "Hopper-v5", "512", "cpu")
    process = trainer(trace)
    main = analyze_trace(trace)["breakdown"]
    main = main[(main["process"] == process.process) & (main["thread"] == "main")]
    simulator = main[(main["operation"] == "simulation") & (main["cpu"] == "Simulator")]["time_ns"].sum()
    assert simulator > 0
    calls = process.events[(process.events["kind"] == int(Kind.CPU_CALL))
                           & (process.events["category"] == int(Category.SIMULATOR))]
    assert len(calls) >= 512  # at least one mj_step per environment step


@pytest.mark.skipif(sys.version_info < (3, 12), reason="Python 3.11 reports no calls into nanobind methods "
                    "(ale_py's), so ALE time reads as Python there; 3.12's sys.monitoring sees them")
def test_ale_simulation_is_simulator_time(tmp_path, cli_env):
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    trace = train(tmp_path, cli_env, "ppo", "ALE/Pong-v5", "128", "cpu")
    process = trainer(trace)
    main = analyze_trace(trace)["breakdown"]
    main = main[(main["process"] == process.process) & (main["thread"] == "main")]
    assert main[(main["operation"] == "simulation") & (main["cpu"] == "Simulator")]["time_ns"].sum() > 0


def test_subproc_vec_env_children_are_profiled(tmp_path, cli_env):
    trace = train(tmp_path, cli_env, "ppo", "CartPole-v1", "512", "cpu", "--n-envs", "2", "--subproc")
    processes = read_attributed(trace)
    workers = [p for p in processes if p.meta["process"] != "sb3_train"
               and (p.events["kind"] == int(Kind.OPERATION)).any()]
    assert len(workers) >= 2, [p.process for p in processes]
    for worker in workers:  # each child steps its environment inside a simulation operation
        names = set(worker.events.loc[worker.events["kind"] == int(Kind.OPERATION), "name"].astype(str))
        assert names == {"simulation"}
    assert "simulation" in operations(trainer(trace))  # and the parent waits on them in one
