#!/usr/bin/env python3
"""Build the rlscope container and enter it with this checkout mounted at /rlscope.

    python run_docker.py                     # shell inside the container
    python run_docker.py -- make artifacts   # run one command inside it
    python run_docker.py --dry-run           # print the docker commands only

Standard library only: this runs before anything is installed.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent
DOCKERFILE = REPO / "dockerfiles" / "Dockerfile"


def docker_commands(image: str, command: list[str], gpus: str, build: bool, interactive: bool) -> list[list[str]]:
    """The `docker build` (optional) and `docker run` invocations for these options."""
    commands = []
    if build:
        commands.append(["docker", "build", "-f", str(DOCKERFILE), "-t", image, str(REPO)])
    use_gpus = gpus == "all" or (gpus == "auto" and shutil.which("nvidia-smi") is not None)
    run = ["docker", "run", "--rm", "--init", "-v", f"{REPO}:/rlscope", "-w", "/rlscope",
           "--shm-size", "8g", "-e", "RLSCOPE_IN_DOCKER=1"]
    if use_gpus:
        # CUPTI activity tracing needs the GPU and, where the driver restricts profiling, SYS_ADMIN.
        run += ["--gpus", "all", "--cap-add", "SYS_ADMIN"]
    if interactive:
        run.append("-it")
    run += [image, "dockerfiles/entrypoint.sh", *(command or ["bash"])]
    commands.append(run)
    return commands


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default="rlscope:latest", help="image tag to build and run")
    parser.add_argument("--gpus", choices=("auto", "all", "none"), default="auto",
                        help="pass the host GPUs through (auto: when nvidia-smi exists on the host)")
    parser.add_argument("--no-build", action="store_true", help="reuse the existing image")
    parser.add_argument("--dry-run", action="store_true", help="print the docker commands, run nothing")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="command to run inside (after --)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    commands = docker_commands(args.image, command, args.gpus, not args.no_build,
                               interactive=not command and sys.stdin.isatty())
    if args.dry_run:
        for cmd in commands:
            print(shlex.join(cmd))
        return 0
    if shutil.which("docker") is None:
        print("error: docker is not installed or not on PATH; install Docker Engine "
              "(and the NVIDIA Container Toolkit for GPUs), or use `make` directly", file=sys.stderr)
        return 2
    for cmd in commands:
        code = subprocess.call(cmd)
        if code != 0:
            print(f"error: `{shlex.join(cmd[:3])} ...` exited with {code}; is the Docker engine running?",
                  file=sys.stderr)
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
