"""Checkpointed stages of a workload's repetition: a long repetition stopped part way resumes from
the last stage it finished instead of starting over.

A workload wraps each long step in ``stage(name, compute)``. Under ``rlscope run`` the worker
names, in ``RLSCOPE_STAGES_DIR``, a directory of the run for the repetition it is in; a stage
whose result is stored there is not computed again but read back, and one that is not is
computed and its result (JSON) stored atomically once complete, so a stage cut off part way is
redone whole and nothing half-done is ever read. Called without the harness (no variable), stages
simply compute. Either way the result is what a JSON round trip makes of it (tuples become lists,
keys strings), so a stage returns the same value computed or read back.

Stored stages are tied to what the run was asked and to the repetition: the directory is
``RUN_DIR/stages/<key>/repetition-<N>/``, ``key`` a hash of the run's workload, parameters and
repetitions (what the runner compares before reusing anything), so a run asked something else
never reads them (the runner removes them). They serve only to resume an unfinished repetition,
so they are removed, not kept: the worker removes a repetition's stages once its result is saved
with the run's finished repetitions (``partial.json``), from where a resume takes it whole, and
the runner removes them all once the run is complete (``DONE``) and on ``--force``. No stage
outlives what it could resume, a complete run directory holds its results only, and a later run
can never read a stage of a repetition that was already counted. Like a finished repetition, a
stage is not tied to the workload's code: after changing it, rerun with ``--force``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from rlscope.files import CorruptFileWarning, write_atomic
from rlscope.machine import machine_identity

__all__ = ["ENV_STAGES_DIR", "STAGES_DIR", "StoredStage", "Stages", "stage", "current", "stages_key",
           "repetition_dir", "describe", "prune"]

ENV_STAGES_DIR = "RLSCOPE_STAGES_DIR"  # where the current repetition's stages are stored; unset: none are
STAGES_DIR = "stages"  # under a run directory
_REPETITION = "repetition-{}"

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class StoredStage:
    """A finished stage as stored: its name, its index among ``of`` stages of that name (None for a
    stage of its own), the seconds it took to compute, and when it was stored (``time.time()``)."""

    name: str
    index: int | None
    of: int | None
    seconds: float
    stored_at: float
    machine: str = ""  # the machine that computed it (machine_identity()); "" in stages stored before


def _file_name(name: str, index: int | None) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.]+", "-", name).strip("-.") or "stage"
    return f"{slug}.json" if index is None else f"{slug}-{index}.json"


def _label(name: str, index: int | None, of: int | None) -> str:
    return name if index is None else f"{name} {index + 1}" + (f" of {of}" if of is not None else "")


def _parse(text: str) -> tuple[StoredStage, Any]:
    """A stage file's record and result; ValueError if it is not one."""
    record = json.loads(text)
    if not isinstance(record, dict) or not {"stage", "index", "of", "seconds", "stored_at", "result"} <= record.keys():
        raise ValueError("not a stored stage (fields stage, index, of, seconds, stored_at, result)")
    name, index, of, seconds, stored_at = (record[k] for k in ("stage", "index", "of", "seconds", "stored_at"))
    numbers_ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in (seconds, stored_at))
    indices_ok = all(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0) for v in (index, of))
    if not isinstance(name, str) or not numbers_ok or not indices_ok:
        raise ValueError("a stored stage's stage, index, of, seconds or stored_at is of the wrong type")
    machine = record.get("machine", "")
    if not isinstance(machine, str):
        raise ValueError("a stored stage's machine is not text")
    return StoredStage(name, index, of, float(seconds), float(stored_at), machine), record["result"]


class Stages:
    """The stages of one repetition, stored in ``directory`` (None: computed, never stored).

    ``resumed`` lists the stages read back instead of computed in this process, in order;
    ``resumed_seconds`` is what computing them took in earlier attempts, which a workload with a
    time budget counts as spent."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.resumed: list[StoredStage] = []

    @property
    def resumed_seconds(self) -> float:
        return sum(s.seconds for s in self.resumed)

    def stage(self, name: str, compute: Callable[[], T], *, index: int | None = None, of: int | None = None,
              this_machine: bool = False) -> T:
        """The result of stage ``name`` (the ``index``-th of ``of`` stages so named, e.g. one of
        several validation pairs): read back if an earlier attempt stored it, else ``compute()``,
        stored once it returns. Its result must be JSON (dicts, lists, str, numbers, bools, None).
        ``this_machine``: the result holds for the machine that computed it only (a calibration):
        a run resumed on another host computes it again."""
        label = _label(name, index, of)
        path = None if self.directory is None else self.directory / _file_name(name, index)
        if path is not None and path.exists():
            found = self._read(path, name, index, label)
            if found is not None and this_machine and found[0].machine != machine_identity():
                print(f"stage {label}: stored by {found[0].machine or 'another machine'}, computed again on "
                      f"{machine_identity()}", flush=True)
                found = None
            if found is not None:
                stored, result = found
                self.resumed.append(stored)
                print(f"stage {label}: reused from an earlier attempt (it took {stored.seconds:.1f} s)", flush=True)
                return result
        started = time.monotonic()
        value = compute()
        record = {"stage": name, "index": index, "of": of, "seconds": time.monotonic() - started,
                  "stored_at": time.time(), "machine": machine_identity(), "result": value}
        try:
            text = json.dumps(record, allow_nan=True)
        except (TypeError, ValueError) as err:
            raise TypeError(f"stage {label!r}: its result cannot be stored as JSON ({err}); return dicts, lists, "
                            f"strings, numbers, bools or None") from err
        if path is not None:
            write_atomic(path, text + "\n")
        return json.loads(text)["result"]

    def has(self, name: str, index: int | None = None) -> bool:
        """Whether stage ``name`` (its ``index``-th) is stored, readable, to be read back."""
        if self.directory is None:
            return False
        try:
            stored, _ = _parse((self.directory / _file_name(name, index)).read_text())
        except (OSError, ValueError):
            return False
        return (stored.name, stored.index) == (name, index)

    def stored(self) -> list[StoredStage]:
        """The stages stored in ``directory``, in the order they were stored; files that are not
        readable stages are left out here (``stage`` warns of them as it computes them again)."""
        if self.directory is None or not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.glob("*.json"):
            try:
                stored, _ = _parse(path.read_text())
            except (OSError, ValueError):
                continue
            if path.name == _file_name(stored.name, stored.index):
                found.append(stored)
        return sorted(found, key=lambda s: s.stored_at)

    @staticmethod
    def _read(path: Path, name: str, index: int | None, label: str) -> tuple[StoredStage, Any] | None:
        """The stored stage at ``path``, or None, with a warning, where it is damaged or another's."""
        try:
            stored, result = _parse(path.read_text())
            if (stored.name, stored.index) != (name, index):
                raise ValueError(f"it holds stage {_label(stored.name, stored.index, stored.of)!r}")
        except (OSError, ValueError) as err:
            warnings.warn(f"{path}: stored stage {label!r} unreadable ({err}); computing it again",
                          CorruptFileWarning, stacklevel=3)
            return None
        return stored, result


def current() -> Stages:
    """The stages of the repetition this process is in, where the harness's worker says
    (``RLSCOPE_STAGES_DIR``); stored nowhere without it. Keep the one object for a repetition
    where its ``resumed`` matter (a time budget)."""
    directory = os.environ.get(ENV_STAGES_DIR, "")
    return Stages(Path(directory) if directory else None)


def stage(name: str, compute: Callable[[], T], *, index: int | None = None, of: int | None = None,
          this_machine: bool = False) -> T:
    """``current().stage(...)``: stage ``name``'s stored result, or ``compute()``'s, stored."""
    return current().stage(name, compute, index=index, of=of, this_machine=this_machine)


def stages_key(config: Mapping[str, Any]) -> str:
    """A short hash of what a run was asked (its ``config.json``'s workload, parameters and
    repetitions): stages stored under another key are never read."""
    asked = {k: config.get(k) for k in ("workload", "params", "repetitions")}
    return hashlib.sha256(json.dumps(asked, sort_keys=True, default=str).encode()).hexdigest()[:16]


def repetition_dir(run_dir: Path, config: Mapping[str, Any], repetition: int) -> Path:
    """Where the stages of ``repetition`` of the run in ``run_dir``, asked ``config``, are stored."""
    return run_dir / STAGES_DIR / stages_key(config) / _REPETITION.format(repetition)


def describe(stored: list[StoredStage]) -> str:
    """Stored stages as a reader would name them: ``calibration, 3 of 5 validation pairs``."""
    groups: dict[str, list[StoredStage]] = {}
    for s in stored:
        groups.setdefault(s.name, []).append(s)
    parts = []
    for name, group in groups.items():
        if group[0].index is None:
            parts.append(name)
        else:
            of = group[-1].of
            parts.append(f"{len(group)} of {of} {name}" if of is not None else f"{len(group)} {name}")
    return ", ".join(parts)


def prune(run_dir: Path, keep: Mapping[str, Any] | None) -> None:
    """Remove the stages stored in ``run_dir`` except those of a run asked ``keep`` (None: all)."""
    root = run_dir / STAGES_DIR
    if not root.is_dir():
        return
    kept = None if keep is None else stages_key(keep)
    if kept is None:
        shutil.rmtree(root, ignore_errors=True)
        return
    for entry in root.iterdir():
        if entry.name == kept:
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
