#!/usr/bin/env python3
"""`make container-test`: build the CPU image on a real Docker engine and use it as a user would.

What it does, each step timed and checked:

1. Finds a Docker engine, or installs Debian's ``docker.io`` and starts ``dockerd`` on a private
   socket, data root and exec root in a temporary directory (stopped and removed at the end).
2. Finds a base image: ``--base``, an earlier local one, ``debian:trixie`` from a registry, or one
   made here with ``debootstrap`` and ``docker import``.
3. Copies this working tree (tracked files and untracked ones git does not ignore) to a temporary
   checkout owned by a non-root uid, and runs everything below as that uid, through
   ``python run_docker.py`` from a venv made of ``requirements.deploy.txt``, as a user would.
4. Builds the CPU image (cold: the engine's build cache empty when this script started it), then
   again after a Python-only change (warm rebuild), and records the image's size.
5. Inside the container: the Python version against ``requires-python``, the whole test suite
   (``make test``), one experiment script at quick scale, and ``rlscope report``.
6. On the host: the figures and the report are there, and every file the container wrote belongs
   to the uid that ran it.

``--gpu-image`` also builds the GPU image (pip's CUDA wheels provide the CUDA headers where the
base has no toolkit) and checks that ``_cupti`` compiled and every GPU extra imports.
``--artifacts`` times ``rlscope run`` at quick scale (every manifest, as ``make artifacts-quick``,
or ``--manifests``) on the host and in the container, alternating for ``--rounds`` rounds.
``--record`` writes the measurements to ``docs/results/container.json``
and regenerates ``docs/results/container.md`` from it. ``--if-changed`` (CI) skips everything when
nothing the image is made from changed since the recorded, passing run.

Needs root where it must install or start Docker, or switch to another uid; Python 3.11+, stdlib only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from container_results import machine, pytest_summary, render, suite_passed
from docker_engine import LOCAL_BASE, REGISTRY_BASE, Failed, base_image, docker_cli, docker_engine, log, sh

REPO = Path(__file__).resolve().parent.parent
RESULTS_JSON = REPO / "docs" / "results" / "container.json"
RESULTS_MD = REPO / "docs" / "results" / "container.md"
OUTPUT = REPO / "output" / "container-test"
# What the image is made from and how it is used: a change here makes --if-changed run the test.
INPUTS = ["dockerfiles", ".dockerignore", "run_docker.py", "requirements.deploy.txt", "Makefile", "pyproject.toml",
          "CMakeLists.txt", "csrc", "experiments/run_manifest.sh", "experiments/experiment_*.sh"]
EXPERIMENT = "kernel_fusion"
GPU_IMPORTS = ("import rlscope._cupti, cupy, jax, brax, pynvml, torch; "
               "print('_cupti', rlscope._cupti.__file__); print('jax', jax.__version__, 'torch', torch.__version__)")


def copy_checkout(target: Path, uid: int, gid: int) -> None:
    """This working tree as a user's fresh checkout would have it, owned by ``uid``."""
    listed = sh(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]).stdout
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    for path in [target, *target.rglob("*")]:
        os.chown(path, uid, gid, follow_symlinks=False)


class User:
    """Runs commands as one uid, with its own HOME and a venv of requirements.deploy.txt."""

    def __init__(self, uid: int, gid: int, home: Path, docker_host: str, cli: str) -> None:
        self.uid, self.gid, self.home = uid, gid, home
        self.env = {key: value for key, value in os.environ.items() if key in ("PATH", "LANG", "PIP_CERT",
                    "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "TERM", "http_proxy", "https_proxy", "no_proxy",
                    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")}
        self.env.update(HOME=str(home), USER="rlscope-test", RLSCOPE_DOCKER=cli, PYTHONUNBUFFERED="1")
        if docker_host:
            self.env["DOCKER_HOST"] = docker_host
        self.python = str(home / "deploy-venv" / "bin" / "python")

    def prefix(self) -> list[str]:
        """setpriv to the uid, with the engine socket's group where that is how the uid reaches it."""
        if os.geteuid() == self.uid:
            return []
        socket = Path(self.env.get("DOCKER_HOST", "unix:///var/run/docker.sock").removeprefix("unix://"))
        groups = f"--groups={socket.stat().st_gid}" if socket.exists() and socket.stat().st_uid != self.uid \
            else "--clear-groups"
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", groups]

    def run(self, line: list[str], cwd: Path, log_path: Path, timeout: float) -> tuple[int, float, str]:
        """``(exit code, seconds, output)``; the output is also written to ``log_path``."""
        started = time.perf_counter()
        with open(log_path, "w") as out:
            done = subprocess.run([*self.prefix(), *line], cwd=cwd, env=self.env, stdout=out,
                                  stderr=subprocess.STDOUT, text=True, timeout=timeout)
        return done.returncode, time.perf_counter() - started, log_path.read_text(errors="replace")

    def make_venv(self, checkout: Path, logs: Path) -> None:
        """The host side as the README says: a venv, then ``pip install -r requirements.deploy.txt``."""
        system_python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
        for step in ([system_python, "-m", "venv", str(self.home / "deploy-venv")],
                     [self.python, "-m", "pip", "install", "--quiet", "-r", "requirements.deploy.txt"]):
            code, _, output = self.run(step, checkout, logs / "deploy-venv.log", 900)
            if code != 0:
                raise Failed(f"`{' '.join(step)}` exited {code}: {output[-800:]}")


def owned_by_others(root: Path, uid: int) -> list[str]:
    return [str(path.relative_to(root)) for path in [root, *root.rglob("*")] if path.lstat().st_uid != uid]


def image_size(cli: str, docker_host: str, image: str) -> int:
    env = {**os.environ, **({"DOCKER_HOST": docker_host} if docker_host else {})}
    return int(sh([cli, "image", "inspect", "--format", "{{.Size}}", image], env=env).stdout.strip())


def inputs_unchanged_since(commit: str) -> bool:
    paths = [str(path.relative_to(REPO)) for pattern in INPUTS for path in REPO.glob(pattern)]
    done = subprocess.run(["git", "-C", str(REPO), "diff", "--quiet", commit, "HEAD", "--", *paths],
                          capture_output=True)
    return done.returncode == 0


class DiskWatch:
    """The most free space the test takes from the filesystem of the temporary directory, sampled
    every second and once at the end: a run that fills the disk fails part way, so the need is
    measured and shown before the next run. It counts the private engine's data root, the checkout
    and the caches where they live there (the default); an engine already running, or
    ``--data-root`` elsewhere, keeps its images outside it. Other processes' writes count too."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.start_free = self.min_free = shutil.disk_usage(path).free
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            self.min_free = min(self.min_free, shutil.disk_usage(self.path).free)

    def __enter__(self) -> "DiskWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.min_free = min(self.min_free, shutil.disk_usage(self.path).free)

    @property
    def peak_bytes(self) -> int:
        return self.start_free - self.min_free


def head_commit() -> str:
    return sh(["git", "-C", str(REPO), "rev-parse", "HEAD"]).stdout.strip()


class Session:
    """One run of the test: the user, the checkout, the log directory and what was measured."""

    def __init__(self, args: argparse.Namespace, user: User, checkout: Path, base: str, cli: str,
                 docker_host: str, cold: bool) -> None:
        self.args, self.user, self.checkout, self.base, self.cli = args, user, checkout, base, cli
        self.docker_host = docker_host
        self.results: dict = {"cold_cache": cold, "base": base, "torch": args.torch, "checks": {}}
        self.failures: list[str] = []

    def docker(self, name: str, options: list[str], timeout: float) -> tuple[int, float, str]:
        line = [self.user.python, "run_docker.py", "--gpus", "none", "--network", "host", "--base", self.base,
                "--torch", self.args.torch, *options]
        log(f"{name}: {' '.join(line[1:])}")
        code, seconds, output = self.user.run(line, self.checkout, OUTPUT / f"{name}.log", timeout)
        log(f"{name}: exit {code} in {seconds:.0f} s (log: {OUTPUT.relative_to(REPO)}/{name}.log)")
        return code, seconds, output

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.results["checks"][name] = {"ok": ok, "detail": detail}
        if not ok:
            self.failures.append(f"{name}: {detail}")
            log(f"FAILED {name}: {detail}")

    def build_cpu(self) -> None:
        code, seconds, output = self.docker("build-cold", ["--variant", "cpu", "--build-only"], 3600)
        if code != 0:
            raise Failed(f"the CPU image did not build: {output[-1500:]}")
        self.results["cold_build_s"] = round(seconds, 1)
        init = self.checkout / "rlscope" / "__init__.py"
        init.write_text(init.read_text() + "\n# container-test: a Python-only change, for the warm rebuild\n")
        code, seconds, output = self.docker("build-warm", ["--variant", "cpu", "--build-only"], 1800)
        if code != 0:
            raise Failed(f"the CPU image did not rebuild: {output[-1500:]}")
        self.results["warm_rebuild_s"] = round(seconds, 1)
        self.results["cpu_image_bytes"] = image_size(self.cli, self.docker_host, "rlscope:cpu")

    def inside(self, name: str, command: list[str], timeout: float, variant: str = "cpu") -> tuple[int, float, str]:
        return self.docker(name, ["--variant", variant, "--no-build", "--", *command], timeout)

    def use_cpu_image(self) -> None:
        for path in self.checkout.rglob("*"):
            os.utime(path, follow_symlinks=False)  # every timestamp newer than the image's
        code, _, output = self.inside("no-reinstall", ["true"], 600)
        self.check("new timestamps, same content: the entrypoint's make install does nothing",
                   code == 0 and "Nothing to be done for 'install'" in output, output.strip()[-300:])
        version_check = ("import sys, tomllib; from packaging.specifiers import SpecifierSet; "
                         "need = tomllib.load(open('pyproject.toml', 'rb'))['project']['requires-python']; "
                         "v = '.'.join(map(str, sys.version_info[:3])); print(v, need, v in SpecifierSet(need))")
        code, _, output = self.inside("python-version", ["python", "-c", version_check], 600)
        words = output.strip().splitlines()[-1].split() if output.strip() else []
        self.results["container_python"] = words[0] if words else "?"
        self.check("python satisfies requires-python", code == 0 and words[-1:] == ["True"], output.strip()[-300:])
        code, seconds, output = self.inside("make-test", ["make", "test"], 3600)
        summary = pytest_summary(output)
        self.results["make_test"] = {"exit": code, "seconds": round(seconds, 1), "summary": summary}
        self.check("make test passes in the container", suite_passed(code, summary), summary or output[-500:])
        script = f"experiments/experiment_{EXPERIMENT}.sh"
        code, seconds, output = self.inside("experiment", [script, "quick"], 1800)
        self.results["experiment"] = {"script": script, "exit": code, "seconds": round(seconds, 1)}
        self.check(f"{script} quick runs in the container", code == 0, output[-500:])
        code, _, output = self.inside("report", ["rlscope", "report", "output"], 600)
        self.check("rlscope report runs in the container", code == 0, output[-500:])
        figures = sorted((self.checkout / "output" / "artifacts" / f"experiment_{EXPERIMENT}").glob("*.pdf"))
        self.check("figures are on the host", bool(figures), ", ".join(f.name for f in figures) or "no PDF")
        self.check("the report is on the host", (self.checkout / "output" / "report.html").is_file(),
                   "output/report.html")
        others = owned_by_others(self.checkout, self.user.uid)
        self.check(f"everything in the checkout belongs to uid {self.user.uid}", not others,
                   f"{len(others)} paths owned by another uid: {others[:5]}")

    def gpu_image(self) -> None:
        code, seconds, output = self.docker("build-gpu", ["--variant", "gpu", "--build-only"], 3600)
        self.check("the GPU image builds", code == 0, output[-500:])
        if code != 0:
            return
        self.results["gpu_build_s"] = round(seconds, 1)
        self.results["gpu_image_bytes"] = image_size(self.cli, self.docker_host, "rlscope:gpu")
        code, _, output = self.inside("gpu-imports", ["python", "-c", GPU_IMPORTS], 600, "gpu")
        self.check("_cupti compiled and every GPU extra imports", code == 0, output.strip()[-400:])
        code, _, output = self.inside("gpu-doctor", ["rlscope", "doctor", "--scale", "full"], 600, "gpu")
        clean = "Traceback" not in output and code != 0 and re.search(r"\bGPU\b", output) is not None
        self.results["gpu_doctor"] = [line for line in output.splitlines() if "GPU" in line][:3]
        self.check("without a GPU, rlscope doctor says so cleanly", clean, output.strip()[-400:])

    def artifacts(self) -> None:
        """``rlscope run`` of the same manifests at quick scale on the host (the checkout's own venv,
        installed first, as root: the host's Python may be out of the test uid's reach) and in the
        container, alternating, each round into fresh output directories; the ratio per round."""
        host_checkout = self.checkout.parent / "host-checkout"
        host_checkout.mkdir()
        copy_checkout(host_checkout, os.geteuid(), os.getegid())
        log("artifacts: installing the host's venv (not timed)")
        with open(OUTPUT / "host-install.log", "w") as out:
            done = subprocess.run(["make", "install", f"PYTHON={sys.executable}"], cwd=host_checkout, stdout=out,
                                  stderr=subprocess.STDOUT, timeout=3600)
        if done.returncode != 0:
            raise Failed(f"make install on the host exited {done.returncode} (log: {OUTPUT}/host-install.log)")
        manifests = self.args.manifests or sorted(str(p.relative_to(REPO)) for p in (REPO / "configs").glob("*.yaml"))
        rounds: list[dict] = []
        for number in range(1, self.args.rounds + 1):
            line = ["run", *manifests, "--scale", "quick", "--output", f"output/timing-round{number}"]
            log(f"artifacts round {number}/{self.args.rounds}: host")
            started = time.perf_counter()
            with open(OUTPUT / f"host-round{number}.log", "w") as out:
                host_code = subprocess.run([".venv/bin/rlscope", *line], cwd=host_checkout, stdout=out,
                                           stderr=subprocess.STDOUT, timeout=7200).returncode
            host_s = time.perf_counter() - started
            code, container_s, _ = self.inside(f"container-round{number}", ["rlscope", *line], 7200)
            rounds.append({"host_s": round(host_s, 1), "container_s": round(container_s, 1),
                           "ratio": round(container_s / host_s, 3), "host_exit": host_code, "container_exit": code})
        ratios = sorted(r["ratio"] for r in rounds)
        self.results["artifacts_quick"] = {"manifests": manifests, "rounds": rounds,
                                           "median_ratio": ratios[len(ratios) // 2], "min_ratio": ratios[0],
                                           "max_ratio": ratios[-1]}
        self.check("the timed manifests run on the host and in the container",
                   all(r["host_exit"] == 0 and r["container_exit"] == 0 for r in rounds),
                   "; ".join(f"round {i}: host exit {r['host_exit']}, container exit {r['container_exit']}"
                             for i, r in enumerate(rounds, 1)))


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", help=f"base image (default: {LOCAL_BASE} or {REGISTRY_BASE}, made if missing)")
    parser.add_argument("--torch", default="torch==2.13.0",
                        help="torch requirement for the images (default: PyPI's, reachable wherever PyPI is)")
    parser.add_argument("--uid", type=int, default=4321, help="the non-root uid the test runs as (when root)")
    parser.add_argument("--data-root", type=Path, help="start a private dockerd with this data root, kept afterwards")
    parser.add_argument("--gpu-image", action="store_true", help="also build and check the GPU image")
    parser.add_argument("--artifacts", action="store_true",
                        help="also time rlscope run at quick scale on the host and in the container, alternating")
    parser.add_argument("--manifests", nargs="+", help="the manifests --artifacts times (default: all)")
    parser.add_argument("--rounds", type=int, default=1, help="host/container pairs --artifacts times")
    parser.add_argument("--record", action="store_true", help="write docs/results/container.{json,md}")
    parser.add_argument("--if-changed", action="store_true",
                        help="skip when the image's inputs are unchanged since the recorded passing run")
    return parser.parse_args(argv)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds, so the private engine and temporary files are removed


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    args = parse(argv)
    if args.if_changed and RESULTS_JSON.exists():
        recorded = json.loads(RESULTS_JSON.read_text())
        passed = all(check["ok"] for check in recorded["checks"].values())
        if passed and inputs_unchanged_since(recorded["commit"]):
            log(f"nothing the image is made from changed since {recorded['commit'][:10]}, where this test "
                f"passed ({RESULTS_JSON.relative_to(REPO)}): skipped")
            return 0
    OUTPUT.mkdir(parents=True, exist_ok=True)
    disk = DiskWatch(tempfile.gettempdir())
    recorded_peak = json.loads(RESULTS_JSON.read_text()).get("peak_disk_bytes") if RESULTS_JSON.exists() else None
    log(f"free space under {disk.path}: {disk.start_free / 2**30:.1f} GiB"
        + (f" (the recorded run took {recorded_peak / 2**30:.1f} GiB at its peak)" if recorded_peak else ""))
    started = time.perf_counter()
    session: Session | None = None
    engine = "?"
    try:
        cli = docker_cli()
        uid = os.geteuid() if os.geteuid() != 0 else args.uid
        gid = os.getegid() if os.geteuid() != 0 else args.uid
        with disk, docker_engine(cli, args.data_root, uid) as (docker_host, cold), \
                tempfile.TemporaryDirectory(prefix="rlscope-container-test-") as tmp:
            if docker_host:
                os.environ["DOCKER_HOST"] = docker_host
            engine = sh([cli, "version", "--format", "{{.Server.Version}}"]).stdout.strip()
            base = base_image(cli, args.base)
            Path(tmp).chmod(0o755)
            home, checkout = Path(tmp) / "home", Path(tmp) / "checkout"
            home.mkdir()
            checkout.mkdir()
            copy_checkout(checkout, uid, gid)
            os.chown(home, uid, gid)
            user = User(uid, gid, home, docker_host, cli)
            user.make_venv(checkout, OUTPUT)
            session = Session(args, user, checkout, base, cli, docker_host, cold)
            session.build_cpu()
            session.use_cpu_image()
            if args.gpu_image:
                session.gpu_image()
            if args.artifacts:
                session.artifacts()
    except (Failed, subprocess.TimeoutExpired) as failure:
        log(f"FAILED: {failure}")
        if session is None:
            return 1
        session.check("every step ran to its end", False, str(failure)[-500:])
    results = {**session.results, "date": datetime.date.today().isoformat(), "commit": head_commit(),
               "machine": machine(), "engine": engine, "peak_disk_bytes": disk.peak_bytes,
               "seconds": round(time.perf_counter() - started),
               "command": " ".join(["python dockerfiles/container_test.py", *(sys.argv[1:] if argv is None else argv)])}
    (OUTPUT / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    if args.record:
        RESULTS_JSON.write_text(json.dumps(results, indent=2) + "\n")
        RESULTS_MD.write_text(render(results))
        log(f"recorded {RESULTS_JSON.relative_to(REPO)} and {RESULTS_MD.relative_to(REPO)}")
    log(f"{len(results['checks']) - len(session.failures)} of {len(results['checks'])} checks passed "
        f"in {results['seconds']} s, taking {disk.peak_bytes / 2**30:.1f} GiB of disk at the peak")
    for failure in session.failures:
        log(f"FAILED {failure}")
    return 1 if session.failures else 0


if __name__ == "__main__":
    sys.exit(main())
