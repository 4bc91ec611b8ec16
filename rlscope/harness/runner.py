"""Run a manifest's sweep: one subprocess per run, resumable, with results gathered into a CSV.

Layout written under ``OUTPUT/<experiment>/``::

    experiment.json            the resolved manifest (what `rlscope plot` reads)
    results.csv                one row per run x repetition (x the workload's own "rows", if it
                               returns any; skipped runs: one row, status=skipped; a run that failed
                               or timed out after finishing some repetitions: those, status=failed
                               or timeout)
    runs/<run-id>/config.json  what the run was asked to do
    runs/<run-id>/log.txt      everything it printed
    runs/<run-id>/partial.json the repetitions finished so far, saved by the worker after each (gone once
                               result.json is written)
    runs/<run-id>/stages/      the stages the workload finished of the repetition it is in
                               (rlscope.stages; gone once the run is complete)
    runs/<run-id>/result.json  its metrics, written atomically by the worker; for a run that failed
                               or timed out, by the runner from partial.json
    runs/<run-id>/DONE         written last, only after a clean exit: a run is complete iff DONE exists
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from tqdm import tqdm

from rlscope._version import __version__
from rlscope.harness.executors import Executor, LocalExecutor
from rlscope.errors import ManifestError
from rlscope.files import last_line, read_json, write_atomic, write_json_atomic
from rlscope.outputs import output_lock
from rlscope.harness.manifest import GridPoint, Manifest
from rlscope.harness.process import kill_worker, start_worker, worker_env
from rlscope.harness.worker import PARTIAL_FILE, resolve_workload
from rlscope.stages import Stages, describe, prune, repetition_dir

__all__ = ["RunOutcome", "SweepSummary", "run_sweep", "run_sweeps", "collect_results"]

Status = Literal["ok", "skipped", "failed", "timeout", "reused"]


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    run_id: str
    run_dir: Path
    status: Status
    seconds: float
    message: str = ""

    @property
    def log(self) -> Path:
        return self.run_dir / "log.txt"


@dataclasses.dataclass
class SweepSummary:
    experiment_dir: Path
    results_csv: Path
    outcomes: list[RunOutcome]
    total: int
    interrupted: bool = False

    @property
    def failures(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.status in ("failed", "timeout")]

    def count(self, status: Status) -> int:
        return sum(o.status == status for o in self.outcomes)


def _config(manifest: Manifest, point: GridPoint) -> dict[str, Any]:
    return {
        "experiment": manifest.experiment,
        "scale": manifest.scale,
        "run_id": point.run_id,
        "workload": manifest.workload,
        "params": dict(point.params),
        "repetitions": manifest.repetitions,
        "timeout_s": manifest.timeout_s,
        "rlscope_version": __version__,
    }


def _asked_the_same(run_dir: Path, config: Mapping[str, Any]) -> bool:
    """Whether the run in ``run_dir`` was asked exactly what we would ask it now."""
    old = read_json(run_dir / "config.json") or {}
    return all(old.get(k) == config[k] for k in ("workload", "params", "repetitions"))


def _finished_repetitions(run_dir: Path, config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The repetitions an earlier, unfinished attempt at this run completed: those results.csv
    keeps for it, or, where the runner itself was stopped before it could keep them (the machine
    went away), those its worker saved in partial.json (none for a complete run, whose files a
    rerun replaces)."""
    if (run_dir / "DONE").exists():
        return []
    saved = _kept_result(run_dir, config) if (run_dir / "result.json").exists() else None
    if saved is None and _asked_the_same(run_dir, config):
        saved = read_json(run_dir / PARTIAL_FILE)
    finished = saved.get("repetitions") if isinstance(saved, dict) else None
    if not isinstance(finished, list) or not all(isinstance(row, dict) for row in finished):
        return []
    return finished if len(finished) < config["repetitions"] else []


def _is_complete(run_dir: Path, config: Mapping[str, Any]) -> bool:
    """A run is reusable if it finished and was asked exactly what we would ask it now."""
    if not (run_dir / "DONE").exists():
        return False
    return _asked_the_same(run_dir, config) and read_json(run_dir / "result.json") is not None


@dataclasses.dataclass(frozen=True)
class _Run:
    """A run of one of the sweeps that share the executor (``sweep``: its manifest's index)."""

    sweep: int
    point: GridPoint


@dataclasses.dataclass(frozen=True)
class _Sweep:
    manifest: Manifest
    experiment_dir: Path

    @property
    def runs_dir(self) -> Path:
        return self.experiment_dir / "runs"


class _Launcher:
    """Starts run subprocesses of every sweep and remembers them so Ctrl-C can stop them all."""

    def __init__(self, sweeps: list[_Sweep], force: bool = False, note: Callable[[str], None] = print) -> None:
        self.sweeps = sweeps
        self.force = force  # start every run afresh, not from the repetitions an earlier attempt finished
        self.note = note  # says what a run resumed from an earlier attempt
        self._live: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._in_hand = 0  # launches between their start and their outcome, DONE included
        self.stopping = False

    def __call__(self, run: _Run, slot_env: Mapping[str, str]) -> RunOutcome:
        """Execute ``run`` here, in a worker subprocess with ``slot_env`` added to its environment."""
        with self._lock:
            self._in_hand += 1
        try:
            return self._launch(run, slot_env)
        finally:
            with self._lock:
                self._in_hand -= 1
                self._settled.notify_all()

    def _run_dir(self, run: _Run) -> Path:
        return self.sweeps[run.sweep].runs_dir / run.point.run_id

    def _manifest(self, run: _Run) -> Manifest:
        return self.sweeps[run.sweep].manifest

    def prepare(self, run: _Run) -> tuple[Path, dict[str, Any]]:
        """The run's directory, cleared of a previous attempt's outcome, with its config.json.

        An earlier attempt that was asked the same and stopped part-way (interrupted, timed out,
        failed in a later repetition) hands on the repetitions it finished, as the config's
        ``finished_repetitions``: the worker goes on from there, so a long run cut off by Ctrl-C
        or a machine's time limit loses only the repetition it was in (``--force`` starts afresh).
        Of that repetition, the stages the workload stored (:mod:`rlscope.stages`) are kept, so
        it loses only the stage it was in; the stages of a run asked something else are removed.
        """
        run_dir = self._run_dir(run)
        run_dir.mkdir(parents=True, exist_ok=True)
        config = _config(self._manifest(run), run.point)
        finished = [] if self.force else _finished_repetitions(run_dir, config)
        prune(run_dir, None if self.force else config)
        for stale in ("DONE", "result.json", PARTIAL_FILE):
            (run_dir / stale).unlink(missing_ok=True)
        if finished:
            config["finished_repetitions"] = finished
        write_json_atomic(run_dir / "config.json", config)
        resumed = [f"{len(finished)} of {config['repetitions']} repetitions"] if finished else []
        resumed += [describe(Stages(repetition_dir(run_dir, config, len(finished))).stored())]
        if any(resumed):
            name = f"{self.sweeps[run.sweep].manifest.experiment}/" if len(self.sweeps) > 1 else ""
            self.note(f"  resumed {name}{run.point.run_id}: {', '.join(filter(None, resumed))} from an earlier attempt")
        return run_dir, config

    def _launch(self, run: _Run, slot_env: Mapping[str, str]) -> RunOutcome:
        run_dir, _ = self.prepare(run)
        env = worker_env(run_dir, slot_env)
        started = time.perf_counter()
        with open(run_dir / "log.txt", "wb") as log:
            # Checked and started under the lock stop_all takes: no run starts after it has looked.
            with self._lock:
                if self.stopping:
                    return RunOutcome(run.point.run_id, run_dir, "failed", 0.0, "interrupted before it started")
                proc = start_worker(run_dir, env, log)
                self._live.add(proc)
            try:
                returncode: int | None = proc.wait(timeout=self._manifest(run).timeout_s)
            except subprocess.TimeoutExpired:
                kill_worker(proc)
                returncode = None
            finally:
                with self._lock:
                    self._live.discard(proc)
        return self.settle(run, returncode, time.perf_counter() - started)

    def settle(self, run: _Run, returncode: int | None, seconds: float) -> RunOutcome:
        """The outcome of a worker that exited with ``returncode`` (None: killed at the timeout),
        its files in the run directory; DONE is written here, last, for a clean exit only."""
        run_dir = self._run_dir(run)
        if returncode is None:
            reason = f"killed after {self._manifest(run).timeout_s:g} s (raise timeout_s in the manifest)"
            return self._unfinished(run, "timeout", seconds, reason)
        result = read_json(run_dir / "result.json")
        if returncode != 0 or result is None:
            reason = "interrupted" if self.stopping else f"exit code {returncode}: {last_line(run_dir / 'log.txt')}"
            return self._unfinished(run, "failed", seconds, reason)
        write_atomic(run_dir / "DONE", f"{result['status']} {time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
        prune(run_dir, None)  # complete: nothing left to resume
        return RunOutcome(run.point.run_id, run_dir, result["status"], seconds, result.get("reason", ""))

    def lost(self, run: _Run, seconds: float, reason: str) -> RunOutcome:
        """The outcome of a run whose worker never reported back (its machine went away): failed,
        with the reason also in its log, where the summary points."""
        write_atomic(self._run_dir(run) / "log.txt", f"{reason}\n")
        return self._unfinished(run, "failed", seconds, reason)

    def _unfinished(self, run: _Run, status: Status, seconds: float, reason: str) -> RunOutcome:
        """The outcome of a run that did not finish, keeping the repetitions it did finish: they
        go to result.json under the run's status (no DONE, so a resume runs it again)."""
        run_dir = self._run_dir(run)
        # result.json is there if the worker got past its last repetition but then did not exit cleanly.
        saved = read_json(run_dir / "result.json") or read_json(run_dir / PARTIAL_FILE) or {}
        finished = saved.get("repetitions") or []
        # Written even with no repetition finished (but not for a run the user interrupted), so
        # results.csv has a row saying why it failed (out of GPU memory, killed at the timeout): a
        # claim over the grid can tell a point that was not run from one that cannot run here.
        if finished or not self.stopping:
            write_json_atomic(run_dir / "result.json", {"status": status, "reason": reason, "repetitions": finished})
        if finished:
            reason += (f"; the {len(finished)} of {self._manifest(run).repetitions} repetitions it finished "
                       f"are in results.csv as {status}")
        return RunOutcome(run.point.run_id, run_dir, status, seconds, reason)

    def stop_all(self) -> None:
        """Kill the runs in flight, then wait until every launch has settled.

        A run whose subprocess exited just before the kill still writes its DONE; waiting for it
        keeps results.csv, rebuilt next, in step with the runs a resume will reuse.
        """
        with self._lock:
            self.stopping = True
            live = list(self._live)
        for proc in live:
            kill_worker(proc)
        with self._lock:
            self._settled.wait_for(lambda: self._in_hand == 0)


def run_sweep(
    manifest: Manifest,
    output_dir: Path,
    *,
    executor: Executor | None = None,
    force: bool = False,
    progress: bool = True,
) -> SweepSummary:
    """Execute every run of ``manifest`` not already complete and rebuild ``results.csv``
    (:func:`run_sweeps` with one manifest)."""
    return run_sweeps([manifest], output_dir, executor=executor, force=force, progress=progress)[0]


def run_sweeps(
    manifests: Sequence[Manifest],
    output_dir: Path,
    *,
    executor: Executor | None = None,
    force: bool = False,
    progress: bool = True,
    on_finished: Callable[[Manifest, SweepSummary], None] | None = None,
) -> list[SweepSummary]:
    """Execute every run of each manifest not already complete, through one executor, and
    rebuild each manifest's ``results.csv`` as its last run ends (then ``on_finished`` is called).

    Runs start in the order of the manifests, but the executor's slots are shared: a manifest's
    long runs go on while the next manifest's fill the other slots. Failing runs do not stop
    anything. On Ctrl-C the runs in flight are killed, every finished run is kept, results.csv is
    written for every manifest, and each unfinished summary has ``interrupted`` set.
    """
    seen: dict[str, Path] = {}
    for manifest in manifests:
        if manifest.experiment in seen:
            raise ManifestError(f"{manifest.path}: experiment {manifest.experiment!r} is also that of "
                                f"{seen[manifest.experiment]} (given twice?); its runs would share "
                                f"OUTPUT/{manifest.experiment}/: give each manifest once, each its own name")
        seen[manifest.experiment] = manifest.path
        resolve_workload(manifest.workload)  # fail once, clearly, before starting N subprocesses
    sweeps = [_Sweep(manifest, output_dir / manifest.experiment) for manifest in manifests]
    with contextlib.ExitStack() as locks:
        for sweep in sweeps:  # every lock first: --force removes nothing another rlscope is writing
            locks.enter_context(output_lock(sweep.experiment_dir, f"rlscope run {sweep.manifest.path}"))
        for sweep in sweeps:
            _claim(sweep, force)
        return _run_locked(sweeps, executor, force, progress, on_finished)


def _claim(sweep: _Sweep, force: bool) -> None:
    """Refuse an experiment directory that holds the runs of another workload (a manifest of the
    same experiment name): its results would be read as this one's. ``force`` removes them."""
    earlier = read_json(sweep.experiment_dir / "experiment.json")
    if not isinstance(earlier, dict) or earlier.get("workload") in (None, sweep.manifest.workload):
        return
    if not force:
        raise ManifestError(f"{sweep.experiment_dir} holds runs of workload {earlier['workload']} (manifest "
                            f"{earlier.get('path')}), not {sweep.manifest.workload}; add --force to replace them, "
                            f"or give --output another directory")
    shutil.rmtree(sweep.runs_dir, ignore_errors=True)
    for name in ("experiment.json", "results.csv"):
        (sweep.experiment_dir / name).unlink(missing_ok=True)


def _run_locked(sweeps: list[_Sweep], executor: Executor | None, force: bool, progress: bool,
                on_finished: Callable[[Manifest, SweepSummary], None] | None) -> list[SweepSummary]:
    """``run_sweeps``, with every sweep's directory claimed and locked."""
    outcomes: list[list[RunOutcome]] = [[] for _ in sweeps]
    totals: list[int] = []
    todo: list[_Run] = []
    for index, sweep in enumerate(sweeps):
        sweep.runs_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(sweep.experiment_dir / "experiment.json", sweep.manifest.to_json())
        points = list(sweep.manifest.points())
        totals.append(len(points))
        for point in points:
            run_dir = sweep.runs_dir / point.run_id
            if not force and _is_complete(run_dir, _config(sweep.manifest, point)):
                outcomes[index].append(RunOutcome(point.run_id, run_dir, "reused", 0.0))
            else:
                todo.append(_Run(index, point))

    summaries: dict[int, SweepSummary] = {}

    def finish(index: int, interrupted: bool = False, report: bool = True) -> None:
        sweep = sweeps[index]
        results_csv = sweep.experiment_dir / "results.csv"
        buffer = io.StringIO()
        collect_results(sweep.manifest, sweep.experiment_dir).to_csv(buffer, index=False)
        write_atomic(results_csv, buffer.getvalue())
        summaries[index] = SweepSummary(sweep.experiment_dir, results_csv, outcomes[index], totals[index], interrupted)
        if on_finished is not None and report:
            on_finished(sweep.manifest, summaries[index])

    for index in range(len(sweeps)):
        if len(outcomes[index]) == totals[index]:
            finish(index)
    executor = executor or LocalExecutor()
    several = len(sweeps) > 1
    bar = tqdm(total=sum(totals), initial=sum(map(len, outcomes)), unit="run", dynamic_ncols=True,
               desc="runs" if several else sweeps[0].manifest.experiment, disable=not progress)
    launcher = _Launcher(sweeps, force, note=bar.write)
    sweep_of = {sweeps[run.sweep].runs_dir / run.point.run_id: run.sweep for run in todo}
    stream: Iterator[RunOutcome] = executor.run_all(todo, launcher)
    try:
        for outcome in stream:
            index = sweep_of[outcome.run_dir]
            outcomes[index].append(outcome)
            bar.update(1)
            if outcome.status in ("failed", "timeout"):
                name = f"{sweeps[index].manifest.experiment}/" if several else ""
                bar.write(f"  failed: {name}{outcome.run_id} ({outcome.message}); log: {outcome.log}")
            if len(outcomes[index]) == totals[index]:
                bar.clear()
                finish(index)
    except BaseException as err:  # Ctrl-C, or on_finished failed (a figure): no run goes on unwatched
        launcher.stop_all()
        stream.close()  # type: ignore[attr-defined]
        stopped = isinstance(err, KeyboardInterrupt)
        for index in range(len(sweeps)):
            if index not in summaries:
                finish(index, interrupted=True, report=stopped)
        if not stopped:
            raise
    finally:
        bar.close()
    return [summaries[index] for index in range(len(sweeps))]


def _kept_result(run_dir: Path, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """What goes into results.csv from a run: a complete run's result, or the repetitions that a
    run which failed or timed out had finished, if it was asked what we would ask it now."""
    result = read_json(run_dir / "result.json")
    if result is None or not _asked_the_same(run_dir, config):
        return None
    if (run_dir / "DONE").exists() or result.get("status") in ("failed", "timeout"):
        return result
    return None


def collect_results(manifest: Manifest, experiment_dir: Path) -> pd.DataFrame:
    """One tidy row per finished run x repetition, with the run's parameters as columns."""
    rows: list[dict[str, Any]] = []
    for point in manifest.points():
        result = _kept_result(experiment_dir / "runs" / point.run_id, _config(manifest, point))
        if result is None:
            continue
        base = {"run_id": point.run_id, **point.params, "status": result["status"], "reason": result.get("reason", "")}
        for rep in result.get("repetitions") or [{}]:
            # A workload that measures a sub-grid in one process returns it under "rows".
            shared = {k: v for k, v in rep.items() if k != "rows"}
            rows.extend({**base, **shared, **sub} for sub in rep.get("rows") or [{}])
    return pd.DataFrame(rows)
