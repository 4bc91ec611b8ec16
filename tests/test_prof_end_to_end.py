"""`rlscope prof` on real scripts: torch + gymnasium, child processes, analysis and export."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

TRAIN = """\
import gymnasium as gym
import torch
import rlscope

env = gym.make("CartPole-v1")
obs, _ = env.reset(seed=0)
policy = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))
rlscope.set_phase("data_collection")
for _ in range(300):
    rlscope.step()
    with rlscope.operation("inference"):
        with torch.no_grad():
            action = int(policy(torch.as_tensor(obs)).argmax())
    with rlscope.operation("simulation"):
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()
"""

CHILDREN = """\
import multiprocessing as mp
import subprocess
import sys
import numpy as np
import rlscope

def work(n):
    with rlscope.operation("child-work"):
        np.ones(n).sum()

if __name__ == "__main__":
    with rlscope.operation("parent-work"):
        np.zeros(3).sum()
    for method in ("fork", "spawn"):
        p = mp.get_context(method).Process(target=work, args=(4,))
        p.start()
        p.join()
    subprocess.run([sys.executable, "-c", "import rlscope, numpy\\nwith rlscope.operation('sub-work'): numpy.ones(2)"],
                   check=True)
"""


def prof(tmp_path: Path, script: str, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    return subprocess.run([sys.executable, "-m", "rlscope.cli", "prof", "--output", str(tmp_path / "trace"), *extra,
                           "--", sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300)


def test_prof_torch_gymnasium_script(tmp_path: Path, cli_env: dict[str, str]) -> None:
    proc = prof(tmp_path, TRAIN, cli_env)
    assert proc.returncode == 0, proc.stderr
    breakdown = pd.read_csv(tmp_path / "trace" / "analysis" / "breakdown.csv")
    inference = breakdown[(breakdown["operation"] == "inference") & (breakdown["phase"] == "data_collection")]
    backend = inference.loc[inference["cpu"] == "Backend", "time_s"].sum()
    assert backend > 0 and inference["time_s"].sum() > backend, "inference spends time in torch and in Python"
    transitions = pd.read_csv(tmp_path / "trace" / "analysis" / "transitions.csv")
    row = transitions[(transitions["operation"] == "inference") & (transitions["transition"] == "Python->Backend")]
    assert row["iterations"].item() == 300
    assert row["per_iteration"].item() >= 3  # linear, tanh, linear, argmax ... at least
    assert "inference" in proc.stdout and "trace:" in proc.stderr

    figures = subprocess.run([sys.executable, "-m", "rlscope.cli", "plot", str(tmp_path / "trace")],
                             capture_output=True, text=True, env=cli_env)
    assert figures.returncode == 0, figures.stderr
    assert (tmp_path / "trace" / "figures" / "time_breakdown.pdf").exists()
    assert (tmp_path / "trace" / "figures" / "transitions.pdf").exists()


def test_prof_without_transitions_records_operations_only(tmp_path: Path, cli_env: dict[str, str]) -> None:
    proc = prof(tmp_path, TRAIN, cli_env, "--no-transitions")
    assert proc.returncode == 0, proc.stderr
    breakdown = pd.read_csv(tmp_path / "trace" / "analysis" / "breakdown.csv")
    assert set(breakdown["cpu"]) == {"Python"}
    assert {"inference", "simulation"} <= set(breakdown["operation"])


def test_child_processes_write_their_own_file_sets(tmp_path: Path, cli_env: dict[str, str]) -> None:
    proc = prof(tmp_path, CHILDREN, cli_env)
    assert proc.returncode == 0, proc.stderr
    metas = [json.loads(p.read_text()) for p in (tmp_path / "trace").glob("*/meta.json")]
    assert all(m["complete"] for m in metas), "every process closed its trace"
    assert len({m["pid"] for m in metas}) == len(metas) >= 4
    breakdown = pd.read_csv(tmp_path / "trace" / "analysis" / "breakdown.csv")
    by_op = breakdown.groupby("operation")["process"].nunique()
    assert by_op["child-work"] == 2 and by_op["parent-work"] == 1 and by_op["sub-work"] == 1


def test_exit_code_of_the_profiled_command_is_kept(tmp_path: Path, cli_env: dict[str, str]) -> None:
    proc = prof(tmp_path, "import sys\nsys.exit(3)\n", cli_env)
    assert proc.returncode == 3


def test_analyze_missing_directory_is_one_clear_error(tmp_path: Path, cli_env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "rlscope.cli", "analyze", str(tmp_path / "nope")],
                          capture_output=True, text=True, env=cli_env)
    assert proc.returncode == 2 and "no such trace directory" in proc.stderr and "Traceback" not in proc.stderr


@pytest.fixture
def small_trace(tmp_path: Path, cli_env: dict[str, str]) -> Path:
    assert prof(tmp_path, TRAIN, cli_env, "--no-analyze").returncode == 0
    return tmp_path / "trace"


def test_export_is_valid_chrome_trace_json(small_trace: Path, tmp_path: Path) -> None:
    from rlscope.analyze.attribution import read_attributed
    from rlscope.trace.perfetto import export_perfetto

    out = export_perfetto(read_attributed(small_trace), tmp_path / "trace.json")
    data = json.loads(out.read_text())
    events = data["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in complete} >= {"user_annotation", "cpu_op"}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in complete)
    assert sum(e["name"].startswith("ProfilerStep#") for e in complete) == 300
    assert any(e["ph"] == "M" and e["name"] == "process_name" for e in events)


def test_holistic_trace_analysis_loads_the_export(small_trace: Path, tmp_path: Path) -> None:
    hta = pytest.importorskip("hta.trace_analysis")
    from rlscope.analyze.attribution import read_attributed
    from rlscope.trace.perfetto import export_perfetto

    (tmp_path / "hta").mkdir()
    export_perfetto(read_attributed(small_trace), tmp_path / "hta" / "rank-0.json")
    analysis = hta.TraceAnalysis(trace_dir=str(tmp_path / "hta"))
    frame = analysis.t.get_trace(0)
    names = set(analysis.t.symbol_table.sym_table)
    assert len(frame) > 300 and {"inference", "simulation", "linear"} <= names
