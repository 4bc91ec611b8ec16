"""run_docker.py builds the right docker commands (no Docker engine is needed to check that)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

sys.path.insert(0, str(REPO))
import run_docker  # noqa: E402


def test_mounts_repo_and_runs_command_through_entrypoint() -> None:
    build, run = run_docker.docker_commands("img", ["make", "test"], gpus="none", build=True, interactive=False)
    assert build[:2] == ["docker", "build"] and "img" in build
    assert f"{REPO}:/rlscope" in run and run[-3:] == ["dockerfiles/entrypoint.sh", "make", "test"]
    assert "--gpus" not in run


def test_gpus_all_adds_gpus_and_profiling_capability() -> None:
    (run,) = run_docker.docker_commands("img", [], gpus="all", build=False, interactive=True)
    assert run[run.index("--gpus") + 1] == "all" and "SYS_ADMIN" in run and "-it" in run
    assert run[-1] == "bash"


def test_dry_run_prints_commands_without_docker() -> None:
    proc = subprocess.run([sys.executable, "run_docker.py", "--dry-run", "--gpus", "none", "--", "make", "test"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[-1].endswith("dockerfiles/entrypoint.sh make test")
