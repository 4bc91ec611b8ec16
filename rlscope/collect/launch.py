"""`rlscope prof`: run a command with every Python process in it profiling itself.

Profiling is switched on through the environment, so the user's script needs no flags:
$RLSCOPE_DIR names the trace directory, and a ``sitecustomize`` put first on PYTHONPATH starts
a session in each interpreter (child processes of any kind inherit both).
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from rlscope.collect.environment import (
    ENV_DIRECTORY,
    ENV_GPU,
    ENV_JAX_SCOPES,
    ENV_PROCESS,
    ENV_SAMPLE,
    ENV_TARGETS,
    ENV_TRANSITIONS,
    ENV_UNTIL_FIRST_STEP,
    ENV_WALL_ONLY,
    ENV_WINDOWS,
)
from rlscope.collect.cupti import FULL_BUFFER_BYTES, SAMPLED_BUFFER_BYTES, buffer_bytes_from_env
from rlscope.collect.flusher import flush_interval_s
from rlscope.collect.jax_scopes import parse_jax_scopes
from rlscope.collect.python import parse_targets
from rlscope.collect.sampling import parse_sample
from rlscope.errors import RlscopeError
from rlscope.collect.windows import WINDOWS_FILE
from rlscope.outputs import only_files
from rlscope.trace.schema import (EVENTS_FILE, GPU_NAMES_CRC_FILE, GPU_NAMES_FILE, GPU_ROWS_CRC_FILE, GPU_ROWS_FILE,
                                  META_FILE, SAMPLES_FILE, UTILISATION_FILE)

__all__ = ["run_profiled", "check_profile_options", "default_output", "is_trace_part", "BOOTSTRAP_DIR"]

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"
# What a profiled process writes into its folder of a trace.
PROCESS_FILES = frozenset({META_FILE, EVENTS_FILE, GPU_ROWS_FILE, GPU_NAMES_FILE, GPU_ROWS_CRC_FILE,
                           GPU_NAMES_CRC_FILE, UTILISATION_FILE, WINDOWS_FILE, SAMPLES_FILE})


def default_output(command: list[str], kind: str) -> Path:
    """output/<kind>/<script>-<time>: named after the command's script, e.g.
    output/traces/train-20261122-120000; a second one started within the same second gets -2."""
    script = next((Path(a).stem for a in command[1:] if a.endswith(".py")), Path(command[0]).name)
    base = Path("output") / kind / f"{script}-{time.strftime('%Y%m%d-%H%M%S')}"
    for n in itertools.count(1):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir(parents=True)  # made here, so that no other run can take the same name
            return path
        except FileExistsError:
            continue
    raise AssertionError("unreachable")


def is_trace_part(path: Path) -> bool:
    """Whether ``path``, in a trace directory, is something rlscope wrote there (what ``rlscope prof
    --force`` may remove): a process's folder holding only a trace's files, the analysis tables,
    the figures, a calibration. A folder that also holds anything else is the user's."""
    if path.is_symlink():
        return False
    if path.is_dir():
        if (path / META_FILE).exists():
            return all(p.is_file() and p.name in PROCESS_FILES for p in path.iterdir())
        if path.name == "analysis":
            return only_files(path, (".csv", ".parquet"))
        if path.name == "figures":
            return only_files(path, (".pdf", ".png"))
        return False
    return path.name == "calibration.json"


def check_profile_options(command: list[str], targets: list[str] | None = None, sample: str | None = None,
                          jax_scopes: str | None = None) -> None:
    """What every profiled process would refuse, refused now, in one message, before anything is
    written or run (not once per child process): the command, the targets, the sample spec, the
    jax-scopes mode, and the numbers the environment sets (CUPTI's buffer size, the flush interval)."""
    if not command:
        raise RlscopeError("no command given; usage: rlscope prof -- python train.py ARGS")
    parse_targets(",".join(targets or []))
    if sample is not None:
        parse_sample(sample)
    parse_jax_scopes(jax_scopes)
    buffer_bytes_from_env(FULL_BUFFER_BYTES if sample is None else SAMPLED_BUFFER_BYTES)
    flush_interval_s()


def run_profiled(command: list[str], output_dir: Path | None, *, transitions: bool = True,
                 gpu: bool | str = True, process: str | None = None, targets: list[str] | None = None,
                 wall_only: bool = False, until_first_step: bool = False, windows: str | None = None,
                 sample: str | None = None, jax_scopes: str | None = None, stdout: Any = None,
                 timeout_s: float | None = None) -> tuple[Path, int]:
    """Run ``command`` under profiling; return the trace directory and the command's exit code.

    ``gpu``: True, False, or the GPU layers to trace ("runtime,kernels"); ``wall_only``: record
    nothing but each process's wall time (the uninstrumented baseline of calibration);
    ``until_first_step``: end the command at its first ``rlscope.step()`` (calibration's start-up runs);
    ``windows``: switch layers on and off as the command runs (``rlscope.collect.windows``);
    ``sample``: record everything only in sampled windows (``rlscope.collect.sampling``: a spec such
    as "window=20,block=500", or "" for the defaults);
    ``jax_scopes``: "default" or "precise" to see inside jax.jit (``rlscope.collect.jax_scopes``);
    ``stdout``: where the command's output goes (both streams), default the terminal;
    ``timeout_s``: kill the command after this long and raise ``subprocess.TimeoutExpired``.
    """
    check_profile_options(command, targets, sample, jax_scopes)
    target_spec = ",".join(targets or [])
    jax_scopes = parse_jax_scopes(jax_scopes)
    if output_dir is None:
        output_dir = default_output(command, "traces")
    output_dir = output_dir.resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env[ENV_DIRECTORY] = str(output_dir)
    env[ENV_TRANSITIONS] = "1" if transitions else "0"
    if gpu is not True:
        env[ENV_GPU] = "0" if gpu is False else str(gpu)
    if wall_only:
        env[ENV_WALL_ONLY] = "1"
    if until_first_step:
        env[ENV_UNTIL_FIRST_STEP] = "1"
    if windows:
        env[ENV_WINDOWS] = windows
    if sample is not None:
        env[ENV_SAMPLE] = sample or "on"
    else:  # not inherited from a sampled parent: calibration's runs and baselines are traced whole
        env.pop(ENV_SAMPLE, None)
    if jax_scopes is not None:
        env[ENV_JAX_SCOPES] = jax_scopes
    else:
        env.pop(ENV_JAX_SCOPES, None)
    if process:
        env[ENV_PROCESS] = process
    if target_spec:
        env[ENV_TARGETS] = target_spec
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOTSTRAP_DIR), env.get("PYTHONPATH", "")) if p)
    try:
        proc = subprocess.Popen(command, env=env, stdout=stdout, stderr=subprocess.STDOUT if stdout else None)
    except FileNotFoundError as err:
        raise RlscopeError(f"cannot run {command[0]!r}: not found; check the command after `--`") from err
    except PermissionError as err:
        raise RlscopeError(f"cannot run {command[0]!r}: it is not executable; run a script through its interpreter, "
                           f"e.g. rlscope prof -- python {command[0]}") from err
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    except KeyboardInterrupt:  # the child got the same Ctrl-C; let it write its trace and exit
        proc.send_signal(signal.SIGINT)
        code = proc.wait()
    return output_dir, code
