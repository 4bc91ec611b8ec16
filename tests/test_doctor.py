"""`rlscope doctor`: what is usable here, with the fix for each failure, and its exit status."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlscope import doctor
from rlscope.nvidia import gpu_unavailable_reason


def rlscope_doctor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlscope.cli", "doctor", *args], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU is here: see the gpu test")
def test_without_a_gpu_quick_is_ready_and_full_names_the_gpu(cli_env):
    quick = rlscope_doctor(env=cli_env)
    assert quick.returncode == 0, quick.stdout + quick.stderr
    assert "ok   native module _hotpath" in quick.stdout and "ready for quick scale" in quick.stdout
    full = rlscope_doctor("--scale", "full", env=cli_env)
    assert full.returncode == 1 and "Traceback" not in full.stderr
    assert "FAIL GPU and driver" in full.stdout and "fix: full scale needs an NVIDIA GPU" in full.stdout
    (failed,) = [line for line in full.stderr.splitlines() if "failed for full scale:" in line]
    assert "GPU and driver" in failed  # and the native module _cupti, where it was built without CUDA headers


@pytest.mark.gpu
def test_on_a_gpu_machine_full_scale_is_ready(cli_env):
    full = rlscope_doctor("--scale", "full", env=cli_env)
    assert full.returncode == 0, full.stdout + full.stderr
    assert "ok   CUPTI tracing" in full.stdout and "permitted; libcupti" in full.stdout


def test_a_cupti_refusal_fails_full_scale_with_its_message(monkeypatch):
    monkeypatch.setattr("rlscope.nvidia.gpu_unavailable_reason", lambda: None)
    refusal = {"status": "error", "reason": "CUPTI: insufficient privileges to trace the GPU ... run as root"}
    checks = doctor.run_checks("full", probe=lambda: refusal)
    (cupti,) = [c for c in checks if c.name.startswith("CUPTI tracing")]
    assert cupti.ok is False and "insufficient privileges" in cupti.detail
    assert cupti in doctor.failures(checks, "full") and cupti not in doctor.failures(checks, "quick")


def test_optional_pieces_never_fail_and_larger_scales_do_not_count():
    checks = [doctor.Check("a", True, ""), doctor.Check("sim", None, "not installed", "pip", "optional"),
              doctor.Check("gpu", False, "none", "fix", "full"), doctor.Check("torch", False, "missing", "pip")]
    assert [c.name for c in doctor.failures(checks, "quick")] == ["torch"]
    assert [c.name for c in doctor.failures(checks, "full")] == ["gpu", "torch"]
