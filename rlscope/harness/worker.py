"""The process that executes one run: ``python -m rlscope.harness.worker RUN_DIR``.

It reads ``config.json``, imports the workload, calls it once per repetition (from after the
``finished_repetitions`` an interrupted earlier attempt handed on, if any) and writes
``result.json`` atomically. The runner, not the worker, writes ``DONE`` after checking the exit
status, so a run killed at any point never looks complete. After every repetition but the last,
the worker also saves those finished so far to ``partial.json`` (removed once ``result.json``
holds them all), which the runner keeps in results.csv if a later repetition fails or runs past
the timeout.

Each repetition's checkpointed stages (:mod:`rlscope.stages`) live in a directory of the run that
the worker names in ``RLSCOPE_STAGES_DIR`` while the repetition runs; a repetition stopped part
way resumes from its last finished stage. Once saved in ``partial.json`` a repetition's stages
are removed (a resume takes it whole from there); the last one's go with the run's DONE.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlscope.errors import SkipRun, WorkloadError
from rlscope.files import read_json, write_json_atomic
from rlscope.harness.process import die_with_parent_here
from rlscope.stages import ENV_STAGES_DIR, repetition_dir

__all__ = ["resolve_workload", "main", "gpu_out_of_memory", "PARTIAL_FILE"]

PARTIAL_FILE = "partial.json"  # the repetitions finished so far, rewritten after each


def resolve_workload(spec: str) -> Callable[..., Mapping[str, Any]]:
    """Import ``module:function``; raise WorkloadError saying what is missing."""
    module_name, _, func_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        raise WorkloadError(
            f"workload {spec!r}: module {err.name!r} not found; run from the project root "
            f"(the workload's package must be importable) or install what it needs"
        ) from err
    except ImportError as err:  # the module is there, but something it imports is not, or is broken
        raise WorkloadError(f"workload {spec!r}: importing {module_name} failed ({err}); install or repair "
                            f"what it names") from err
    except SyntaxError as err:
        raise WorkloadError(f"workload {spec!r}: {err.filename}:{err.lineno}: syntax error ({err.msg}); "
                            f"fix the workload's code") from err
    except Exception as err:  # the workload's own module failed as it was imported: its bug, named
        raise WorkloadError(f"workload {spec!r}: importing {module_name} raised {type(err).__name__}: {err}; "
                            f"fix the workload's module") from err
    func = getattr(module, func_name, None)
    if not callable(func):
        raise WorkloadError(f"workload {spec!r}: {module_name} has no function {func_name!r}")
    return func


def gpu_out_of_memory(err: BaseException | None) -> bool:
    """Whether ``err``, or an error that led to it, is a GPU running out of memory: PyTorch's and
    CuPy's ``OutOfMemoryError``, XLA's ``RESOURCE_EXHAUSTED`` (JAX)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        text = str(err)
        if type(err).__name__ == "OutOfMemoryError" or "CUDA out of memory" in text or (
                "RESOURCE_EXHAUSTED" in text and "memory" in text.lower()):
            return True
        err = err.__cause__ or err.__context__
    return False


def _where(config: Mapping[str, Any]) -> str:
    """The grid point of a run, as a reader of the data-collection figures names it."""
    params = config.get("params", {})
    return (f"N={params['num_envs']} " if "num_envs" in params else "") + f"(run {config.get('run_id', '?')})"


def _run(run_dir: Path) -> int:
    config = read_json(run_dir / "config.json")
    if config is None:
        print(f"error: {run_dir}/config.json is missing or corrupt", file=sys.stderr)
        return 2
    func = resolve_workload(config["workload"])
    rows: list[dict[str, Any]] = list(config.get("finished_repetitions") or [])
    if rows:
        print(f"resumed: {len(rows)} of {config['repetitions']} repetitions finished by an earlier attempt",
              flush=True)
    for repetition in range(len(rows), config["repetitions"]):
        started = time.time()
        stages = repetition_dir(run_dir, config, repetition)
        os.environ[ENV_STAGES_DIR] = str(stages)
        try:
            metrics = dict(func(**config["params"]))
        except SkipRun as skip:
            print(f"skipped: {skip}", flush=True)
            write_json_atomic(run_dir / "result.json", {"status": "skipped", "reason": str(skip), "repetitions": []})
            return 0
        except Exception as err:
            if not gpu_out_of_memory(err):
                raise
            traceback.print_exc()
            print(f"out of GPU memory at {_where(config)}", flush=True)  # the log's last line: the run's reason
            return 1
        metrics["repetition"] = repetition
        metrics["run_seconds"] = time.time() - started
        rows.append(metrics)
        print(f"repetition {repetition}: {metrics}", flush=True)
        if repetition + 1 < config["repetitions"]:
            write_json_atomic(run_dir / PARTIAL_FILE, {"repetitions": rows})
            shutil.rmtree(stages, ignore_errors=True)  # saved whole: a resume takes the repetition, not its stages
    os.environ.pop(ENV_STAGES_DIR, None)
    write_json_atomic(run_dir / "result.json", {"status": "ok", "reason": "", "repetitions": rows})
    (run_dir / PARTIAL_FILE).unlink(missing_ok=True)  # result.json holds them all now
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m rlscope.harness.worker RUN_DIR", file=sys.stderr)
        return 2
    die_with_parent_here()
    try:
        return _run(Path(args[0]))
    except WorkloadError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception:  # the full traceback belongs in log.txt, where the summary points
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
