"""`rlscope run` then `rlscope plot` on a small data-collection sweep, as a user runs them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

MANIFEST = """\
experiment: gpu_vectorization
workload: experiments.datacollection.collect:data_collection
params: {steps: 4, warmup_steps: 1, device: cpu}
grid:
  backend: [gymnasium, numpy, cpp, torch]
  num_envs: [1, 8]
scales:
  quick: {params: {device: cpu}}
  full: {params: {device: cuda}}
repetitions: 2
timeout_s: 120
figures: [throughput_vs_envs]
"""


def rlscope(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlscope.cli", *args], capture_output=True, text=True, env=env)


def test_quick_sweep_writes_results_and_figure(tmp_path: Path, cli_env: dict[str, str]) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST)
    out = tmp_path / "output"
    proc = rlscope("run", str(manifest), "--scale", "quick", "--output", str(out), env=cli_env)
    assert proc.returncode == 0, proc.stderr
    frame = pd.read_csv(out / "gpu_vectorization" / "results.csv")
    assert len(frame) == 4 * 2 * 2  # backends x N x repetitions
    assert (frame["status"] == "ok").all() and (frame["samples_per_s"] > 0).all()
    assert (frame["samples"] == frame["num_envs"] * 4).all()
    pdf = out / "artifacts" / "experiment_gpu_vectorization" / "throughput_vs_envs.pdf"
    assert pdf.read_bytes().startswith(b"%PDF")
    pdf.unlink()
    replot = rlscope("plot", str(out / "gpu_vectorization"), env=cli_env)
    assert replot.returncode == 0, replot.stderr
    assert pdf.exists()


def test_gpu_runs_without_a_gpu_are_skipped_with_reason(tmp_path: Path, cli_env: dict[str, str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the GPU runs would run, not be skipped")
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST.replace("[gymnasium, numpy, cpp, torch]", "[torch]").replace("[1, 8]", "[1]"))
    proc = rlscope("run", str(manifest), "--scale", "full", "--output", str(tmp_path / "o"), "--no-plot", env=cli_env)
    assert proc.returncode == 0, proc.stderr
    assert "skipped" in proc.stdout and "needs a CUDA GPU" in proc.stdout


def test_bad_manifest_gives_one_line_and_exit_2(tmp_path: Path, cli_env: dict[str, str]) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(textwrap.dedent(MANIFEST).replace("repetitions: 2", "repetitions: -1"))
    proc = rlscope("run", str(manifest), "--output", str(tmp_path / "o"), env=cli_env)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert "m.yaml:10: field 'repetitions': expected an integer >= 1" in proc.stderr
    assert not (tmp_path / "o").exists(), "nothing is written for a manifest that does not validate"


def test_unknown_workload_module_is_one_clear_error(tmp_path: Path, cli_env: dict[str, str]) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST.replace("experiments.datacollection.collect", "experiments.nope"))
    proc = rlscope("run", str(manifest), "--output", str(tmp_path / "o"), env=cli_env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "module 'experiments.nope' not found" in proc.stderr


def test_plot_without_results_says_what_to_run(tmp_path: Path, cli_env: dict[str, str]) -> None:
    proc = rlscope("plot", str(tmp_path / "nothing"), env=cli_env)
    assert proc.returncode == 2 and "rlscope run" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.gpu
def test_full_scale_data_collection_runs_on_the_gpu(tmp_path: Path, cli_env: dict[str, str]) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST.replace("[gymnasium, numpy, cpp, torch]", "[numpy, torch]"))
    proc = rlscope("run", str(manifest), "--scale", "full", "--output", str(tmp_path / "o"), env=cli_env)
    assert proc.returncode == 0, proc.stderr
    frame = pd.read_csv(tmp_path / "o" / "gpu_vectorization" / "results.csv")
    assert (frame["status"] == "ok").all() and set(frame["device"]) == {"cuda"}


def test_several_manifests_run_on_past_a_failed_run_and_sum_up(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """`make artifacts` runs every manifest in one `rlscope run`: a failed run in the first one
    does not stop the second, the end lists both, and the exit status says a run failed."""
    for name, params in (("first", "{fail_on: 2}"), ("second", "{}")):
        (tmp_path / f"{name}.yaml").write_text(f"experiment: {name}\nworkload: tests.toy_workloads:echo\n"
                                               f"params: {params}\ngrid: {{x: [1, 2]}}\n")
    proc = rlscope("run", str(tmp_path / "first.yaml"), str(tmp_path / "second.yaml"), "--output",
                   str(tmp_path / "out"), env=cli_env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert (tmp_path / "out" / "second" / "results.csv").exists()
    summary = proc.stdout[proc.stdout.index("summary (quick):"):]
    assert "first: 1 ok, 0 reused, 0 skipped, 1 failed, 0 timeout" in summary
    assert "second: 2 ok" in summary
    assert str(tmp_path / "out" / "first" / "runs" / "x-2" / "log.txt") in summary


def test_a_bad_manifest_among_several_stops_before_anything_runs(tmp_path: Path, cli_env: dict[str, str]) -> None:
    (tmp_path / "good.yaml").write_text("experiment: good\nworkload: tests.toy_workloads:echo\ngrid: {x: [1]}\n")
    (tmp_path / "bad.yaml").write_text("experiment: bad\nworkload: tests.toy_workloads:echo\ngird: {x: [1]}\n")
    proc = rlscope("run", str(tmp_path / "good.yaml"), str(tmp_path / "bad.yaml"), "--output", str(tmp_path / "out"),
                   env=cli_env)
    assert proc.returncode == 2 and "bad.yaml" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "good").exists()


def test_set_overrides_a_parameter_and_a_bad_assignment_is_one_line(tmp_path: Path, cli_env: dict[str, str]) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST.replace("[gymnasium, numpy, cpp, torch]", "[numpy]"))
    proc = rlscope("run", str(manifest), "--set", "num_envs=2", "--set", "steps=3", "--no-plot",
                   "--output", str(tmp_path / "o"), env=cli_env)
    assert proc.returncode == 0, proc.stderr
    frame = pd.read_csv(tmp_path / "o" / "gpu_vectorization" / "results.csv")
    assert set(frame["num_envs"]) == {2} and set(frame["steps"]) == {3}
    bad = rlscope("run", str(manifest), "--set", "steps", "--output", str(tmp_path / "o"), env=cli_env)
    assert bad.returncode == 2 and "NAME=VALUE" in bad.stderr and "Traceback" not in bad.stderr
