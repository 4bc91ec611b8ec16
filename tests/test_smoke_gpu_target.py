"""`make smoke-gpu` and the CI workflow that calls it: what they would run, read without a GPU."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

WORKFLOW = Path(".github/workflows/smoke-gpu.yml")


def test_the_workflow_runs_make_smoke_gpu_on_a_self_hosted_gpu_runner() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    (job,) = workflow["jobs"].values()
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    commands = [step.get("run", "") for step in job["steps"]]
    assert commands.index("make install") < commands.index("make smoke-gpu")
    assert "gpu" in job["env"]["EXTRAS"].split(",") and "cu1" in job["env"]["TORCH"]  # CuPy and a CUDA torch
    dockerfile = Path("dockerfiles/Dockerfile").read_text()
    assert f"EXTRAS={job['env']['EXTRAS']}" in dockerfile  # the image and the runner install the same


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_smoke_gpu_checks_the_machine_runs_the_gpu_tests_then_every_manifest_on_the_gpu() -> None:
    dry = subprocess.run(["make", "-n", "-W", "pyproject.toml", "smoke-gpu"], capture_output=True, text=True,
                         check=True).stdout.replace("\\\n", " ")
    lines = [line for line in dry.splitlines() if "rlscope" in line or "pytest" in line]
    doctor = next(i for i, line in enumerate(lines) if "doctor --scale full" in line)
    tests = next(i for i, line in enumerate(lines) if "pytest -m gpu" in line)
    run = next(i for i, line in enumerate(lines) if " run " in line and "--set device=cuda" in line)
    assert doctor < tests < run
    assert all(str(path) in lines[run] for path in Path("configs").glob("*.yaml"))
    assert "--scale quick" in lines[run] and "report output/smoke-gpu" in dry
    manifests = [word for word in lines[run].split() if word.startswith("configs/")]
    assert manifests[0] == "configs/overhead_correction.yaml" and len(manifests) == len(set(manifests))
    assert "--set session_steps=0" in lines[run] and "--set calibration_repetitions=1" in lines[run]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_smoke_gpu_keeps_a_record_that_the_workflow_uploads() -> None:
    """Each step's end time and the runs' exit status, and the GPU tests' JUnit XML, beside the runs."""
    dry = subprocess.run(["make", "-n", "-W", "pyproject.toml", "smoke-gpu"], capture_output=True, text=True,
                         check=True).stdout
    assert "pytest -m gpu --junitxml=output/smoke-gpu/gpu-tests.xml" in dry
    ends = re.findall(r'echo "([\w-]+) [^"]*" >>? output/smoke-gpu/smoke-times\.txt', dry)
    assert ends == ["start", "doctor", "gpu-tests", "runs"]
    uploaded = yaml.safe_load(WORKFLOW.read_text())["jobs"]["smoke-gpu"]["steps"][-1]["with"]["path"].split()
    assert {"output/smoke-gpu/smoke-times.txt", "output/smoke-gpu/gpu-tests.xml"} <= set(uploaded)
