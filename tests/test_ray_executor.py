"""`rlscope run --executor ray` on a local two-node Ray cluster: the same results as the local
executor, one logical GPU per GPU run, a node dying mid-sweep, Ctrl-C and resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

from rlscope.harness.manifest import load_manifest  # noqa: E402
from rlscope.harness.ray_executor import RayExecutor, needs_gpu  # noqa: E402
from rlscope.harness.runner import run_sweep  # noqa: E402
from tests.test_runner import calls, manifest, sweep  # noqa: E402

TIMINGS = ["run_seconds"]


# The cluster, made by a process of its own: Ray starts each node's processes through a
# preexec_fn, Python code run between fork and exec, which is safe only in a process without other
# threads. The test process has those of earlier tests (it segfaulted in threading._after_fork
# under Python 3.13.5 there); the process below has none when the head starts.
CLUSTER = """
import os, sys
from ray.cluster_utils import Cluster

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
cluster.add_node(num_cpus=2, num_gpus=2)
cluster.wait_for_nodes()
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(cluster.address)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
sys.stdin.read()  # until the test closes it
cluster.shutdown()
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """The address of a head with 2 CPUs and a node with 2 CPUs and 2 logical GPUs."""
    address = tmp_path_factory.mktemp("ray") / "address"
    process = subprocess.Popen([sys.executable, "-c", CLUSTER, str(address)], stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180  # a loaded machine
        while not address.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert address.exists(), f"the Ray cluster did not start (exit code {process.poll()})"
        yield address.read_text()
    finally:
        ray.shutdown()
        process.stdin.close()
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def through_ray(path: Path, out: Path, address: str):
    executor = RayExecutor(address)
    try:
        return sweep(path, out, executor=executor)
    finally:
        executor.close()


def table(out: Path, experiment: str = "toy") -> pd.DataFrame:
    frame = pd.read_csv(out / experiment / "results.csv").drop(columns=TIMINGS)
    return frame.sort_values(["run_id", "repetition"]).reset_index(drop=True)


def test_a_sweep_through_ray_gives_the_local_results_and_brings_the_files_back(tmp_path: Path, cluster) -> None:
    path = manifest(tmp_path, params="{fail_on: 3}", xs="[1, 2, 3, 4]", repetitions=2)
    local = sweep(path, tmp_path / "local")
    remote = through_ray(path, tmp_path / "ray", cluster)
    assert sorted((o.run_id, o.status) for o in remote.outcomes) == sorted((o.run_id, o.status) for o in local.outcomes)
    pd.testing.assert_frame_equal(table(tmp_path / "ray"), table(tmp_path / "local"))
    runs = tmp_path / "ray" / "toy" / "runs"
    assert calls(tmp_path / "ray", "x-1") == ["1", "1"]  # a file the workload wrote on the node
    assert (runs / "x-1" / "DONE").exists() and not (runs / "x-3" / "DONE").exists()
    assert "toy failure for x=3" in (runs / "x-3" / "log.txt").read_text()
    assert not list(runs.glob(".incoming-*"))
    resumed = through_ray(path, tmp_path / "ray", cluster)
    assert sorted(o.status for o in resumed.outcomes) == ["failed", "reused", "reused", "reused"]


def test_runs_on_the_gpu_get_one_logical_gpu_each(tmp_path: Path, cluster) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(textwrap.dedent("""\
        experiment: gpus
        workload: tests.toy_workloads:gpu_env
        params: {sleep_s: 0.5}
        grid: {x: [1, 2, 3, 4], device: [cuda, cpu]}
        """))
    run_sweep(load_manifest(path, "full"), tmp_path / "o", executor=RayExecutor(cluster), progress=False)
    frame = pd.read_csv(tmp_path / "o" / "gpus" / "results.csv", dtype={"cuda_visible_devices": str})
    assert (frame["status"] == "ok").all() and len(frame) == 8
    on_gpu = frame[frame["device"] == "cuda"]["cuda_visible_devices"]
    assert set(on_gpu) <= {"0", "1"}
    assert not set(frame[frame["device"] == "cpu"]["cuda_visible_devices"]) & {"0", "1"}


def test_only_runs_that_use_a_gpu_ask_for_one() -> None:
    assert needs_gpu({"device": "cuda"}, True) and needs_gpu({"device": "auto"}, True) and needs_gpu({}, True)
    assert not needs_gpu({"device": "cpu"}, True)
    assert not needs_gpu({"device": "cuda"}, False)  # the run then skips itself, as locally


def test_a_run_whose_worker_dies_is_retried_once_then_failed_and_the_sweep_goes_on(tmp_path: Path, cluster) -> None:
    """Killing the process that executes a run stands for its machine dying: Ray reports both as
    a system failure. x=1 dies once and succeeds on its retry; x=2 dies twice and fails."""
    starts = tmp_path / "starts.txt"
    path = manifest(tmp_path, params=f"{{starts: '{starts}', sleep_s: 3}}", xs="[1, 2, 3]", repetitions=1)
    path.write_text(path.read_text().replace("tests.toy_workloads:echo", "tests.toy_workloads:recorded_start"))
    summary = {}
    executor = RayExecutor(cluster)
    thread = threading.Thread(target=lambda: summary.update(s=sweep(path, tmp_path / "o", executor=executor)))
    killed: list[str] = []
    try:
        thread.start()
        deadline = time.monotonic() + 90
        while thread.is_alive() and time.monotonic() < deadline:
            lines = starts.read_text().splitlines() if starts.exists() else []
            for line in lines[len(killed):]:
                x, executing = line.split()
                if x == "2" or (x == "1" and "1" not in killed):
                    os.kill(int(executing), signal.SIGKILL)
                killed.append(x)
            time.sleep(0.05)
        thread.join(30)
    finally:
        executor.close()
    outcomes = {o.run_id: o for o in summary["s"].outcomes}
    assert {k: o.status for k, o in outcomes.items()} == {"x-1": "ok", "x-2": "failed", "x-3": "ok"}
    assert "died twice" in outcomes["x-2"].message and "died twice" in outcomes["x-2"].log.read_text()
    assert sorted(killed) == ["1", "1", "2", "2", "3"]
    results = pd.read_csv(tmp_path / "o" / "toy" / "results.csv")
    assert sorted(results.loc[results["status"] == "ok", "run_id"]) == ["x-1", "x-3"]
    assert list(results.loc[results["status"] == "failed", "run_id"]) == ["x-2"]  # a row saying why, no measurement


def test_ctrl_c_cancels_the_tasks_out_and_resume_completes(tmp_path: Path, cluster, cli_env: dict[str, str]) -> None:
    out = tmp_path / "o"
    path = manifest(tmp_path, params="{sleep_s: 1.5}", xs="[1, 2, 3, 4, 5, 6]", repetitions=1)
    cmd = [sys.executable, "-m", "rlscope.cli", "run", str(path), "--executor", "ray", "--address", cluster,
           "--output", str(out), "--no-plot"]
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # see test_runner's Ctrl-C test
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env)
    finally:
        signal.signal(signal.SIGINT, previous)
    deadline = time.monotonic() + 90
    while not list((out / "toy" / "runs").glob("*/DONE")) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "resume" in stderr
    done = sorted(p.parent.name for p in (out / "toy" / "runs").glob("*/DONE"))
    assert 1 <= len(done) < 6
    assert sorted(pd.read_csv(out / "toy" / "results.csv")["run_id"]) == done
    deadline = time.monotonic() + 60  # cancelled tasks' workers go within a second here; 60 s: a loaded machine
    while (leftover := subprocess.run(["pgrep", "-f", "rlscope.harness.worker .*rlscope-run-"], capture_output=True,
                                      text=True).stdout) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftover == "", "a cancelled task left its worker running"
    resumed = subprocess.run(cmd, capture_output=True, text=True, env=cli_env)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(done)} reused" in resumed.stdout


def test_without_ray_the_executor_says_how_to_install_it(tmp_path: Path, cli_env: dict[str, str]) -> None:
    env = {**cli_env, "PYTHONPATH": f"{tmp_path}:{cli_env['PYTHONPATH']}"}
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text("raise ImportError('ray is not installed here')\n")
    path = manifest(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "rlscope.cli", "run", str(path), "--executor", "ray",
                           "--output", str(tmp_path / "o")], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "pip install 'rlscope[dist]'" in proc.stderr and "Traceback" not in proc.stderr


def test_a_task_that_raises_on_its_node_is_a_failed_run_with_the_error(tmp_path: Path, cluster) -> None:
    class Launcher:  # prepares a config the task cannot use (no timeout): the task raises KeyError
        def prepare(self, run):
            return tmp_path, {"run_id": "r", "experiment": "e", "params": {}}

        def lost(self, run, seconds, reason):
            return reason

    executor = RayExecutor(cluster)
    (reason,) = list(executor.run_all(["r"], Launcher()))
    assert reason.startswith("the Ray task failed") and "timeout_s" in reason
