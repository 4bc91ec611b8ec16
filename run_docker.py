#!/usr/bin/env python3
"""Build the rlscope image and run a command in it, this checkout (and so output/) mounted at /rlscope.

    pip install -r requirements.deploy.txt   # the host side needs only the Docker SDK
    python run_docker.py                     # a shell inside the container
    python run_docker.py -- make artifacts   # one command inside it; the exit code is the command's
    python run_docker.py --dry-run           # the checks, the build and the run it would do

Two images come from dockerfiles/Dockerfile: ``gpu`` (CUDA 13 devel base, CUDA torch, every GPU
extra) and ``cpu`` (Debian, CPU torch). ``--variant auto`` takes the GPU one where the host passes
GPUs through. Behind a mirror or a TLS-inspecting proxy, ``--pip-config`` and ``--ca-cert`` pass
pip's configuration and a CA bundle into the build as BuildKit secrets (never into a layer), and
``--base``/``--torch`` replace the base image and torch's index.

The Docker SDK checks the host (engine, NVIDIA runtime, disk, the image); the ``docker`` CLI builds
(BuildKit, which the SDK cannot drive: secrets and cache mounts) and runs (a real terminal, signals,
the command's exit code). Both reach the same engine: the CLI's current endpoint (``DOCKER_HOST``,
a ``docker context``, or a rootless socket). Each problem is one line with its fix.

The container runs as the calling user (``--user``; group 0 added, which owns the image's
environment), so what it writes under the checkout is the caller's. On a rootless engine it runs as
root inside, which is the caller outside.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent
DOCKERFILE = "dockerfiles/Dockerfile"
MOUNT = "/rlscope"
DRIVER_PARAMS = Path("/proc/driver/nvidia/params")
BUILD_LOG_DIR = REPO / "output" / "docker"
LAST_LINES = 25


@dataclass(frozen=True)
class Variant:
    """What one image is built from: its base, torch's requirement and rlscope's extras."""

    base: str
    torch: str
    extras: str
    free_gb: int  # disk the build needs, about: checked before building


VARIANTS = {
    "gpu": Variant("nvidia/cuda:13.0.0-devel-ubuntu24.04",
                   "torch==2.13.0 --index-url https://download.pytorch.org/whl/cu130",
                   "rl,jax,sims,gpu,gpu-jax,dist,dev", 30),
    "cpu": Variant("debian:trixie", "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
                   "rl,jax,sims,dist,dev", 10),
}
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


class DockerProblem(Exception):
    """Something on the host stops the build or the run; the message says what and the fix."""


@dataclass
class Host:
    """What the checks found: problems (each with its fix) stop the run; notes are said."""

    gpus: bool = False
    cap_sys_admin: bool = False
    rootless: bool = False
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def profiling_admin_only(params: Path | None = None) -> bool | None:
    """Whether the NVIDIA driver lets only admins profile GPUs; None without an NVIDIA driver."""
    params = params or DRIVER_PARAMS
    try:
        text = params.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "RmProfilingAdminOnly":
            return value.strip() != "0"
    return True  # drivers that do not say restrict profiling to admins


def engine_endpoint(docker_cli: str, environ: dict[str, str] | None = None) -> str | None:
    """The engine the CLI talks to: ``DOCKER_HOST``, else the current ``docker context``'s, else a
    rootless engine's socket where the system one is missing; None for the SDK's default."""
    environ = os.environ if environ is None else environ
    if environ.get("DOCKER_HOST"):
        return environ["DOCKER_HOST"]
    try:
        done = subprocess.run([docker_cli, "context", "inspect", "--format", "{{.Endpoints.docker.Host}}"],
                              capture_output=True, text=True, timeout=30)
        if done.returncode == 0 and done.stdout.strip():
            endpoint = done.stdout.strip()
            if endpoint != "unix:///var/run/docker.sock" or Path("/var/run/docker.sock").exists():
                return endpoint
    except (OSError, subprocess.TimeoutExpired):
        pass  # an old CLI without contexts: the sockets below decide
    rootless = Path(environ.get("XDG_RUNTIME_DIR", f"/run/user/{os.getuid()}")) / "docker.sock"
    if not Path("/var/run/docker.sock").exists() and rootless.exists():
        return f"unix://{rootless}"
    return None


def unreachable(err: Exception) -> str:
    """The message for an engine that does not answer, with the fix that fits the error."""
    if "ermission denied" in str(err):
        return (f"this user may not use the Docker engine ({err}): `sudo usermod -aG docker $USER`, then log in "
                f"again, or use a rootless engine")
    return (f"the Docker engine is not reachable ({err}); start it (`sudo systemctl start docker`, or "
            f"`systemctl --user start docker` for a rootless engine), or point DOCKER_HOST at its socket")


def check_host(client: Any, gpus: str, params: Path | None = None) -> Host:
    """``gpus``: all (required), auto (where the host has them) or none."""
    params = params or DRIVER_PARAMS
    host = Host()
    try:
        client.ping()
        info = client.info()
    except Exception as err:  # the SDK raises several kinds; each means the engine is not usable
        host.problems.append(unreachable(err))
        return host
    host.rootless = any("rootless" in str(option) for option in info.get("SecurityOptions") or [])
    if gpus == "none":
        return host
    admin_only = profiling_admin_only(params)
    if admin_only is None:
        if gpus == "all":
            host.problems.append(f"no NVIDIA driver on this host ({params} is missing); install the driver, "
                                 f"or run on the CPU with --gpus none")
        else:
            host.notes.append("no NVIDIA GPU on this host: the container runs on the CPU (quick scale)")
        return host
    if "nvidia" not in (info.get("Runtimes") or {}):
        host.problems.append("Docker has no NVIDIA runtime; install the NVIDIA Container Toolkit and run "
                             "`sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`, "
                             "or run on the CPU with --gpus none")
        return host
    host.gpus = True
    host.cap_sys_admin = admin_only
    if admin_only:
        host.notes.append("this host lets only admins profile GPUs (RmProfilingAdminOnly=1): adding --cap-add "
                          "SYS_ADMIN so that CUPTI can trace inside the container (not --privileged)")
    return host


def check_disk(client: Any, needed_gb: int) -> str | None:
    """A note when the engine's data root (where it is on this machine) has less free space than a
    build needs; None when it has enough or cannot be seen from here."""
    try:
        root = client.info().get("DockerRootDir")
        free_gb = shutil.disk_usage(root).free / 2**30 if root else None
    except (OSError, TypeError):
        return None
    if free_gb is None or free_gb >= needed_gb:
        return None
    return (f"only {free_gb:.0f} GiB free under {root}, and the image needs about {needed_gb} GiB: free space "
            f"(`docker system prune`, `docker builder prune`) or move Docker's data-root")


def secrets_for(pip_config: str | None, ca_cert: str | None) -> dict[str, str]:
    """BuildKit secrets ``id -> file``; a named file that does not exist is a problem."""
    secrets = {}
    for secret_id, path, option in (("pip.conf", pip_config, "--pip-config"), ("ca", ca_cert, "--ca-cert")):
        if path is None:
            continue
        if not Path(path).is_file():
            raise DockerProblem(f"{option} {path}: no such file; give the path of an existing file")
        secrets[secret_id] = str(Path(path).resolve())
    return secrets


def host_ca_bundle(environ: dict[str, str] | None = None) -> str | None:
    """The CA bundle the host's pip uses (PIP_CERT), which pip in the build then needs too."""
    environ = os.environ if environ is None else environ
    path = environ.get("PIP_CERT")
    return path if path and Path(path).is_file() else None


def build_command(docker_cli: str, image: str, variant: Variant, secrets: dict[str, str], network: str | None,
                  environ: dict[str, str] | None = None) -> list[str]:
    """The ``docker build`` command line (run with DOCKER_BUILDKIT=1)."""
    environ = os.environ if environ is None else environ
    line = [docker_cli, "build", "--progress", "plain", "-f", DOCKERFILE, "-t", image,
            "--build-arg", f"BASE={variant.base}", "--build-arg", f"TORCH={variant.torch}",
            "--build-arg", f"EXTRAS={variant.extras}"]
    for name in PROXY_VARIABLES:
        if environ.get(name):
            line += ["--build-arg", f"{name}={environ[name]}"]
    for secret_id, path in secrets.items():
        line += ["--secret", f"id={secret_id},src={path}"]
    if network:
        line += ["--network", network]
    return line + [str(REPO)]


def run_command(docker_cli: str, image: str, command: list[str], host: Host, tty: bool, user: str | None,
                network: str | None) -> list[str]:
    """The ``docker run`` command line for this host and command."""
    line = [docker_cli, "run", "--rm", "--init", "-w", MOUNT, "--shm-size", "8g",
            "-v", f"{REPO}:{MOUNT}", "-e", "RLSCOPE_IN_DOCKER=1"]
    if user:
        line += ["--user", user, "--group-add", "0", "-e", f"USER={os.environ.get('USER', 'rlscope')}"]
    if host.gpus:
        line += ["--gpus", "all", "-e", "RLSCOPE_SCALE=full"]
    if host.cap_sys_admin:
        line += ["--cap-add", "SYS_ADMIN"]
    if network:
        line += ["--network", network]
    if tty:
        line.append("-it")
    return line + [image, *(command or ["bash"])]


def explain_build_failure(log: list[str], base: str) -> str:
    """One message for a failed build, from its log: what went wrong and the fix."""
    text = "\n".join(log)
    if "buildx component is missing" in text:
        return ("this docker CLI builds with BuildKit only through its buildx plugin, which is missing: install it "
                "(`sudo apt-get install docker-buildx` or Docker's docker-buildx-plugin), or give a CLI with "
                "BuildKit built in with --docker PATH")
    if re.search(r"no space left on device", text, re.IGNORECASE):
        return ("the disk filled up during the build: free space (`docker system prune`, `docker builder prune`) "
                "or move Docker's data-root, then build again")
    pulled = re.search(r"(failed to resolve source metadata for|pull access denied|manifest unknown|"
                       r"failed to do request|not found: manifest)[^\n]*", text)
    if pulled and base.split(":")[0].split("/")[-1] in text:
        return (f"the base image {base} could not be pulled ({pulled.group(0).strip()}): pull it where a registry "
                f"is reachable (`docker pull {base}`), or build a local one, e.g. `debootstrap --variant=minbase "
                f"trixie DIR && tar -C DIR -c . | docker import - debian-local:trixie`, and pass "
                f"--base debian-local:trixie")
    return "the image did not build; its last lines are above"


def build(line: list[str], base: str, image: str) -> None:
    """Run the build, its output shown as it comes and kept in output/docker/; raises DockerProblem."""
    log_path = BUILD_LOG_DIR / f"build-{re.sub(r'[^A-Za-z0-9_.-]', '_', image)}.log"
    try:
        BUILD_LOG_DIR.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "w")
    except OSError as err:
        raise DockerProblem(f"cannot write the build log {log_path} ({err.strerror}): make {BUILD_LOG_DIR} "
                            f"writable for this user") from err
    print(f"building {image} from {DOCKERFILE} (log: {log_path}; a first build takes minutes)", file=sys.stderr,
          flush=True)
    output: list[str] = []
    with log:
        try:
            process = subprocess.Popen(line, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       errors="replace", env={**os.environ, "DOCKER_BUILDKIT": "1"})
        except OSError as err:
            raise DockerProblem(f"could not start `{line[0]}` ({err.strerror}); install the Docker CLI, or give "
                                f"its path with --docker") from err
        with process:
            assert process.stdout is not None
            for text in process.stdout:
                log.write(text)
                sys.stderr.write(text)
                output.append(text.rstrip("\n"))
            returncode = process.wait()
    if returncode != 0:
        message = explain_build_failure(output, base)
        if message.endswith("above"):
            print("\n--- last lines of the build ---\n" + "\n".join(output[-LAST_LINES:]), file=sys.stderr)
        raise DockerProblem(f"{message} (full log: {log_path})")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=("auto", "gpu", "cpu"), default="auto",
                        help="image to build and run: gpu, cpu, or auto (gpu where the run gets GPUs)")
    parser.add_argument("--gpus", choices=("auto", "all", "none"), default="auto",
                        help="pass the host's GPUs through: auto (where it has them), all (required), none")
    parser.add_argument("--image", help="image tag to build and run (default: rlscope:VARIANT)")
    parser.add_argument("--base", help="base image to build on (default: the variant's; any image with apt)")
    parser.add_argument("--torch", help="pip's torch requirement, with its index (default: the variant's)")
    parser.add_argument("--pip-config", metavar="FILE", help="pip configuration for the build (a BuildKit secret)")
    parser.add_argument("--ca-cert", metavar="FILE",
                        help="CA bundle for pip in the build (a BuildKit secret; default: the host pip's PIP_CERT)")
    parser.add_argument("--network", help="network of the build and the container, e.g. host")
    parser.add_argument("--user", help="UID:GID the container runs as (default: the caller's)")
    parser.add_argument("--docker", default=os.environ.get("RLSCOPE_DOCKER", "docker"),
                        help="the docker CLI to use (default: $RLSCOPE_DOCKER, else docker on PATH)")
    parser.add_argument("--no-build", action="store_true", help="reuse the image already built")
    parser.add_argument("--build-only", action="store_true", help="build the image, run nothing")
    parser.add_argument("--dry-run", action="store_true", help="check the host, print the build and run, do neither")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="command to run inside (after --)")
    return parser.parse_args(argv)


def _connect(docker_cli: str) -> Any:
    """The SDK's client for the CLI's engine; raises DockerProblem when there is no Docker at all."""
    if shutil.which(docker_cli) is None:
        raise DockerProblem(f"no Docker CLI `{docker_cli}` on this machine: install Docker Engine "
                            f"(https://docs.docker.com/engine/install/, or `sudo apt-get install docker.io`)")
    try:
        import docker
    except ImportError as err:
        raise DockerProblem("the Docker SDK for Python is not installed: pip install -r requirements.deploy.txt") \
            from err
    endpoint = engine_endpoint(docker_cli)
    if endpoint:
        os.environ["DOCKER_HOST"] = endpoint  # the CLI and the SDK then reach the same engine
    try:
        return docker.from_env()
    except docker.errors.DockerException as err:
        raise DockerProblem(unreachable(err)) from err


def _exec(line: list[str]) -> int:
    """Replace this process by ``line``: the terminal, signals and the exit code are the command's."""
    try:
        os.execvp(line[0], line)
    except OSError as err:
        raise DockerProblem(f"could not start `{line[0]}` ({err.strerror}); install the Docker CLI") from err
    return 0  # not reached


def main(argv: list[str] | None = None, client: Any = None) -> int:
    args = _parse(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        return _main(args, command, client)
    except DockerProblem as problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _main(args: argparse.Namespace, command: list[str], client: Any) -> int:
    if client is None:
        client = _connect(args.docker)
    host = check_host(client, args.gpus)
    name = args.variant if args.variant != "auto" else ("gpu" if host.gpus else "cpu")
    defaults = VARIANTS[name]
    variant = Variant(args.base or defaults.base, args.torch or defaults.torch, defaults.extras, defaults.free_gb)
    image = args.image or f"rlscope:{name}"
    ca_cert = args.ca_cert or host_ca_bundle()
    if ca_cert and not args.ca_cert and not args.no_build:
        host.notes.append(f"passing the host pip's CA bundle {ca_cert} (PIP_CERT) to the build as a secret")
    secrets = secrets_for(args.pip_config, ca_cert)
    user = None if host.rootless else (args.user or f"{os.getuid()}:{os.getgid()}")
    if host.rootless:
        host.notes.append("rootless engine: the container runs as root inside, which is you outside")
    if not args.no_build and not host.problems:
        full = check_disk(client, variant.free_gb)
        if full:
            host.notes.append(full)
    for note in host.notes:
        print(f"note: {note}", file=sys.stderr)
    for problem in host.problems:
        print(f"error: {problem}", file=sys.stderr)
    tty = sys.stdin.isatty()
    build_line = build_command(args.docker, image, variant, secrets, args.network)
    run_line = run_command(args.docker, image, command, host, tty, user, args.network)
    if args.dry_run:
        if not args.no_build:
            print(f"build: DOCKER_BUILDKIT=1 {shlex.join(build_line)}")
        print(f"run: {shlex.join(run_line)}")
        return 2 if host.problems else 0
    if host.problems:
        return 2
    if args.no_build:
        import docker

        try:
            client.images.get(image)
        except docker.errors.ImageNotFound as err:
            raise DockerProblem(f"no image {image} here: build it (run without --no-build)") from err
    else:
        build(build_line, variant.base, image)
    if args.build_only:
        return 0
    sys.stdout.flush()
    return _exec(run_line)


if __name__ == "__main__":
    sys.exit(main())
