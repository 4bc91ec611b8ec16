"""Calibrations kept per workload, machine and rlscope version, so that the runs of a manifest that
profile one workload calibrate it once."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlscope.calibrate.ladder import calibrate
from rlscope.calibrate.model import CALIBRATION_FILE, Calibration, CalibrationError, machine_fingerprint
from rlscope.errors import RlscopeError
from rlscope.outputs import LOCK_FILE, output_lock

__all__ = ["calibration_cache_dir", "find_cached_calibration", "cached_calibration"]

WORK = "work"  # where a calibration being made keeps its runs and its calibration.json so far


def calibration_cache_dir() -> Path:
    """Where ``cached_calibration`` keeps calibrations: ``$XDG_CACHE_HOME/rlscope/calibration``
    (``~/.cache/...`` by default)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlscope" / "calibration"


def _cache_path(identity: list[str], cache_dir: Path | None, options: dict[str, Any]) -> Path:
    key = json.dumps({"workload": identity, "machine": machine_fingerprint(), "options": options}, sort_keys=True)
    return (cache_dir or calibration_cache_dir()) / hashlib.sha256(key.encode()).hexdigest()[:16] / CALIBRATION_FILE


def find_cached_calibration(identity: list[str], cache_dir: Path | None = None, **options: Any) -> Path | None:
    """The ``calibration.json`` that ``cached_calibration`` made for this workload, machine,
    rlscope version and ``options``, or None where there is none (or it is of another format)."""
    path = _cache_path(identity, cache_dir, options)
    if not path.exists():
        return None
    try:
        Calibration.load(path)
    except CalibrationError:
        return None  # written by another rlscope version: calibrate afresh
    return path


def cached_calibration(identity: list[str], command: Callable[[], list[str]], cache_dir: Path | None = None,
                       **options: Any) -> tuple[Calibration, Path]:
    """The calibration of a workload on this machine and rlscope version with ``options`` (those
    of ``calibrate``), made the first time it is asked for and reused after: a manifest's runs
    that profile the same workload calibrate once. Returns it and its ``calibration.json``.

    ``identity``: what tells workloads apart (their command, less what only sizes a run);
    ``command``: makes the command to calibrate, called only when nothing is cached, so that a
    length judged from a noisy timing does not make a new calibration each time.

    Why a cache keyed by machine and version: per-event costs carry over between runs of one
    workload on one machine, not to another machine or rlscope version (``check_fits`` warns)."""
    path = _cache_path(identity, cache_dir, options)
    if (found := find_cached_calibration(identity, cache_dir, **options)) is not None:
        return Calibration.load(found), found
    directory = path.parent
    # Runs of a sweep that profile one workload may ask at once: one calibrates, the others wait for it.
    with output_lock(directory, "a calibration for rlscope run", wait=True):
        if (found := find_cached_calibration(identity, cache_dir, **options)) is not None:
            return Calibration.load(found), found
        # What an earlier, failed attempt left must not be mixed into this one's runs.
        for earlier in (p for p in directory.iterdir() if p.name != LOCK_FILE):
            if earlier.is_dir():
                shutil.rmtree(earlier)
            else:
                earlier.unlink()
        # calibrate saves its calibration.json after every repetition: it works in a folder of its
        # own, and only a finished one becomes the cached file, so a calibration cut off part way
        # (Ctrl-C, a job's time limit) is never found and reused as if it were complete.
        work = directory / WORK
        calibration, failures = calibrate(command(), work, progress=lambda line: None, **options)
        if failures:  # a calibration with failed runs is not one to reuse
            raise RlscopeError("calibration runs failed: " + "; ".join(failures))
        os.replace(work / CALIBRATION_FILE, path)
    return calibration, path
