#!/usr/bin/env python3
"""Build the rlscope image and run a command in it, this checkout (and so output/) mounted at /rlscope.

    pip install -r requirements.deploy.txt   # the host side needs only the Docker SDK
    python run_docker.py                     # a shell inside the container
    python run_docker.py -- make artifacts   # one command inside it
    python run_docker.py --dry-run           # the checks, the build and the run it would do

Before building it checks the host, one line per problem with its fix: the Docker engine is
reachable; for GPUs, the NVIDIA driver and Docker's NVIDIA runtime (the NVIDIA Container Toolkit)
are there. Where the driver lets only admins profile GPUs (``RmProfilingAdminOnly: 1``, the
default), CUPTI needs ``SYS_ADMIN`` in the container: it is added then, and said so; the container
is never ``--privileged``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent
DOCKERFILE = "dockerfiles/Dockerfile"
MOUNT = "/rlscope"
DRIVER_PARAMS = Path("/proc/driver/nvidia/params")


@dataclass
class Host:
    """What the checks found: problems (each with its fix) stop the run; notes are said."""

    gpus: bool = False
    cap_sys_admin: bool = False
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def profiling_admin_only(params: Path = DRIVER_PARAMS) -> bool | None:
    """Whether the NVIDIA driver lets only admins profile GPUs; None without an NVIDIA driver."""
    try:
        text = params.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "RmProfilingAdminOnly":
            return value.strip() != "0"
    return True  # drivers that do not say restrict profiling to admins


def check_host(client: Any, gpus: str, params: Path = DRIVER_PARAMS) -> Host:
    """``gpus``: all (required), auto (where the host has them) or none."""
    host = Host()
    try:
        client.ping()
        info = client.info()
    except Exception as err:  # the SDK raises several kinds; each means the engine is not usable
        host.problems.append(f"the Docker engine is not reachable ({err}); start it (`sudo systemctl start docker`) "
                             f"or let this user use it (`sudo usermod -aG docker $USER`, then log in again)")
        return host
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


def run_options(image: str, command: list[str], host: Host, tty: bool) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.run`` for this host and command."""
    options: dict[str, Any] = {
        "image": image, "command": command or ["bash"], "working_dir": MOUNT, "init": True, "shm_size": "8g",
        "volumes": {str(REPO): {"bind": MOUNT, "mode": "rw"}}, "environment": {"RLSCOPE_IN_DOCKER": "1"},
        "tty": tty, "stdin_open": tty, "detach": True,
    }
    if host.gpus:
        import docker.types

        options["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
        options["environment"]["RLSCOPE_SCALE"] = "full"
    if host.cap_sys_admin:
        options["cap_add"] = ["SYS_ADMIN"]
    return options


def cli_equivalent(options: dict[str, Any]) -> list[str]:
    """The `docker run` command line that does what ``options`` asks (printed, and used for an
    interactive shell, which the SDK cannot give a terminal)."""
    line = ["docker", "run", "--rm", "--init", "-w", options["working_dir"], "--shm-size", options["shm_size"]]
    for source, bind in options["volumes"].items():
        line += ["-v", f"{source}:{bind['bind']}"]
    for name, value in options["environment"].items():
        line += ["-e", f"{name}={value}"]
    if options.get("device_requests"):
        line += ["--gpus", "all"]
    for capability in options.get("cap_add", []):
        line += ["--cap-add", capability]
    if options["tty"]:
        line.append("-it")
    return line + [options["image"], *options["command"]]


def main(argv: list[str] | None = None, client: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default="rlscope:latest", help="image tag to build and run")
    parser.add_argument("--gpus", choices=("auto", "all", "none"), default="auto",
                        help="pass the host's GPUs through: auto (where it has them), all (required), none")
    parser.add_argument("--no-build", action="store_true", help="reuse the image already built")
    parser.add_argument("--dry-run", action="store_true", help="check the host, print the build and run, do neither")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="command to run inside (after --)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    host = Host()
    if client is None:
        try:
            import docker
        except ImportError:
            print("error: the Docker SDK is not installed; pip install -r requirements.deploy.txt", file=sys.stderr)
            return 2
        try:
            client = docker.from_env()
        except docker.errors.DockerException as err:
            host.problems.append(f"the Docker engine is not reachable ({err}); start it, or install Docker Engine")
    if client is not None:
        host = check_host(client, args.gpus)
    for note in host.notes:
        print(f"note: {note}")
    for problem in host.problems:
        print(f"error: {problem}", file=sys.stderr)
    if host.problems and not args.dry_run:
        return 2
    interactive = not command and sys.stdin.isatty()
    options = run_options(args.image, command, host, tty=interactive)
    if args.dry_run:
        if not args.no_build:
            print(f"build: docker build -f {DOCKERFILE} -t {args.image} {REPO}")
        print(f"run: {shlex.join(cli_equivalent(options))}")
        return 2 if host.problems else 0
    if not args.no_build:
        print(f"building {args.image} from {DOCKERFILE} (the first build takes a while)", flush=True)
        for chunk in client.api.build(path=str(REPO), dockerfile=DOCKERFILE, tag=args.image, decode=True, rm=True):
            if "stream" in chunk:
                print(chunk["stream"], end="", flush=True)
            if "error" in chunk:
                print(f"error: the image did not build: {chunk['error'].strip()}", file=sys.stderr)
                return 1
    if interactive:
        line = cli_equivalent(options)
        os.execvp(line[0], line)
    container = client.containers.run(**options)
    try:
        for output in container.logs(stream=True, follow=True):
            sys.stdout.write(output.decode(errors="replace"))
            sys.stdout.flush()
        return int(container.wait().get("StatusCode", 1))
    finally:
        container.remove(force=True)


if __name__ == "__main__":
    sys.exit(main())
