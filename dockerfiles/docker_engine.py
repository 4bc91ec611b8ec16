"""A Docker engine and a base image for the container test, provisioned where missing: a BuildKit-
capable CLI (Debian's docker.io), a private ``dockerd`` on a temporary socket, data root and exec
root, and a Debian base made with debootstrap where no registry serves one."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["Failed", "log", "sh", "docker_cli", "docker_engine", "base_image", "LOCAL_BASE", "REGISTRY_BASE"]

LOCAL_BASE = "rlscope-base:trixie"
REGISTRY_BASE = "debian:trixie"


class Failed(Exception):
    """A step that did not do what it must; the message says which and why."""


def log(message: str) -> None:
    print(f"[container-test {time.strftime('%H:%M:%S')}] {message}", flush=True)


def sh(line: list[str], timeout: float = 600, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(line, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and done.returncode != 0:
        raise Failed(f"`{' '.join(line)}` exited {done.returncode}: {(done.stderr or done.stdout).strip()[-800:]}")
    return done


def apt_install(*packages: str) -> None:
    if os.geteuid() != 0:
        raise Failed(f"{', '.join(packages)} missing and this is not root: install them (apt-get install -y "
                     f"{' '.join(packages)}) or run as root")
    log(f"installing {' '.join(packages)} with apt")
    sh(["apt-get", "update", "-qq"], timeout=900)
    sh(["apt-get", "install", "-y", "-qq", *packages], timeout=1800,
       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def buildkit_cli() -> str:
    """A docker CLI that can build with BuildKit (buildx, or a CLI older than 23, which has it built
    in); empty when there is none."""
    candidates = [c for c in (os.environ.get("RLSCOPE_DOCKER"), shutil.which("docker"), "/usr/bin/docker") if c]
    for cli in dict.fromkeys(candidates):
        if not Path(cli).exists():
            continue
        if sh([cli, "buildx", "version"], check=False).returncode == 0:
            return cli
        version = sh([cli, "version", "--format", "{{.Client.Version}}"], check=False).stdout.strip()
        if re.match(r"(1\d|2[0-2])\.", version):
            return cli
    return ""


def docker_cli() -> str:
    """A BuildKit-capable docker CLI, installing Debian's docker.io (and docker-buildx where the
    distribution ships BuildKit apart) when there is none."""
    cli = buildkit_cli()
    if not cli:
        apt_install("docker.io")
        cli = buildkit_cli()
    if not cli:
        apt_install("docker-buildx")
        cli = buildkit_cli()
    if not cli:
        raise Failed("no docker CLI here can build with BuildKit, even after installing docker.io and docker-buildx")
    return cli


@contextlib.contextmanager
def docker_engine(cli: str, data_root: Path | None, uid: int) -> Iterator[tuple[str, bool]]:
    """``(DOCKER_HOST, started here)``: the engine already reachable, or a private ``dockerd``."""
    if not data_root and sh([cli, "info"], check=False, timeout=60).returncode == 0:
        yield os.environ.get("DOCKER_HOST", ""), False
        return
    if shutil.which("dockerd") is None:
        apt_install("docker.io")
    with tempfile.TemporaryDirectory(prefix="rlscope-dockerd-") as tmp:
        root = data_root or Path(tmp) / "data"
        socket = Path(tmp) / "docker.sock"
        log(f"starting dockerd on {socket} (data root {root})")
        with open(Path(tmp) / "dockerd.log", "w") as daemon_log:
            daemon = subprocess.Popen(["dockerd", "--host", f"unix://{socket}", "--data-root", str(root),
                                       "--exec-root", f"{tmp}/exec", "--pidfile", f"{tmp}/docker.pid",
                                       "--iptables=false", "--bridge=none"],
                                      stdout=daemon_log, stderr=subprocess.STDOUT)
        host = f"unix://{socket}"
        try:
            for _ in range(120):
                if socket.exists() and sh([cli, "-H", host, "info"], check=False).returncode == 0:
                    break
                if daemon.poll() is not None:
                    daemon_output = (Path(tmp) / "dockerd.log").read_text()[-800:]
                    raise Failed(f"dockerd exited {daemon.returncode}: {daemon_output}")
                time.sleep(0.5)
            else:
                raise Failed("dockerd did not answer within 60 s")
            os.chown(socket, uid, -1)  # the test's uid uses this private engine, nobody else
            Path(tmp).chmod(0o711)  # through a directory it may cross, not read
            yield host, data_root is None
        finally:
            daemon.terminate()
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
            unmount_below(Path(tmp))
            log("dockerd stopped")


def unmount_below(directory: Path) -> None:
    """Unmount what a stopped dockerd left mounted under ``directory`` (its network namespace),
    so that the directory can be removed."""
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(f"{directory}/")), reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def base_image(cli: str, wanted: str | None) -> str:
    """The base image to build on; made with debootstrap when no registry serves one."""
    if wanted:
        return wanted
    for name in (LOCAL_BASE, REGISTRY_BASE):
        if sh([cli, "image", "inspect", name], check=False).returncode == 0:
            return name
    log(f"pulling {REGISTRY_BASE}")
    try:
        if sh([cli, "pull", REGISTRY_BASE], check=False, timeout=300).returncode == 0:
            return REGISTRY_BASE
    except subprocess.TimeoutExpired:
        log(f"pulling {REGISTRY_BASE} took over 300 s")
    if shutil.which("debootstrap") is None:
        apt_install("debootstrap")
    log(f"no registry serves {REGISTRY_BASE}: making {LOCAL_BASE} with debootstrap")
    with tempfile.TemporaryDirectory(prefix="rlscope-base-") as tmp:
        sh(["debootstrap", "--variant=minbase", "trixie", tmp, "http://deb.debian.org/debian"], timeout=1800)
        tar = subprocess.Popen(["tar", "-C", tmp, "-c", "."], stdout=subprocess.PIPE)
        sh([cli, "import", "-", LOCAL_BASE], stdin=tar.stdout, timeout=600)
        tar.wait()
    return LOCAL_BASE
