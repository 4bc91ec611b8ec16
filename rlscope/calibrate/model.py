"""The calibration record: per-event costs, how sure they are, and where they were measured.

Each layer of instrumentation (``CONFIGS``: annotations, Python->native transitions, CUDA API
tracing, GPU activity records) adds time; divided by that layer's events it is a cost per
event (``EVENTS`` says which transitions-table rows count the events and which CPU layer they
inflate). A ``Calibration`` is frozen and saved as versioned JSON: a file of another version is
refused with a message rather than read into the wrong fields.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic import with_config as pydantic_config

from rlscope._version import __version__
from rlscope.errors import RlscopeError, schema_problem
from rlscope.files import write_json_atomic
from rlscope.machine import machine_identity

__all__ = ["CALIBRATION_FILE", "CALIBRATION_VERSION", "PROFILER_LAYER", "CONFIGS", "GPU_CONFIGS", "WINDOWS", "STARTUP",
           "PROFILED_STARTUP", "RESIDUAL", "EVENTS",
           "EVENT_TYPES", "CPU_EVENTS", "WINDOW_COLUMNS", "MIN_EVENTS", "Calibration", "CalibrationError",
           "CalibrationWarning", "event_counts", "machine_fingerprint"]

CALIBRATION_FILE = "calibration.json"
CALIBRATION_VERSION = 1
PROFILER_LAYER = "Profiler"  # the breakdown's CPU layer of rlscope's own trace writes

# name -> (transitions, GPU layers, event type whose cost this configuration adds); the first is
# the uninstrumented run (rlscope measures only the process's wall time, records nothing).
CONFIGS: dict[str, tuple[bool | None, str, str | None]] = {
    "uninstrumented": (None, "0", None),
    "annotations": (False, "0", "annotation"),
    "transitions": (True, "0", "python_call"),
    "cuda_api": (True, "runtime,driver", "cuda_api"),
    "gpu_activities": (True, "runtime,driver,kernels", "gpu_activity"),
}
GPU_CONFIGS = ("cuda_api", "gpu_activities")

# What else a calibration runs, by the ``config`` its records carry: one process alternating the
# layers in windows; uninstrumented and profiled runs to the first rlscope.step() (start-up
# pairs); and the CUPTI residual probe (``rlscope.calibrate.residual``).
WINDOWS = "windows"
STARTUP = "startup"
PROFILED_STARTUP = "startup-profiled"
RESIDUAL = "cupti-residual"

# event type -> (transitions-table rows counted, CPU layer whose time it inflates)
EVENTS: dict[str, tuple[tuple[str, ...], str]] = {
    "annotation": (("Annotations",), "Python"),
    "python_call": (("Python->Backend", "Python->Simulator"), "Python"),
    "cuda_api": (("Backend->CUDA",), "CUDA API"),
    "gpu_activity": (("GPU kernels",), "CUDA API"),
}
EVENT_TYPES = tuple(EVENTS)
CPU_EVENTS = ("annotation", "python_call")  # paid in interpreter time: they scale with the machine's speed
# One alternating window: its level, its duration less trace writes, its iterations, its events.
WINDOW_COLUMNS = ("level", "duration_ns", "iterations", *EVENT_TYPES)

# A layer with fewer events than this in a calibration run gets no cost: the run-to-run noise of
# a whole process's wall time (tens of ms) divided by a handful of events is meaningless.
MIN_EVENTS = 1000


class CalibrationError(RlscopeError):
    """A calibration file is missing, corrupt or of another version."""


class CalibrationWarning(UserWarning):
    """A calibration may not fit the trace it corrects, or has no confidence interval."""


@pydantic_config(ConfigDict(extra="forbid", strict=True))
@dataclasses.dataclass(frozen=True)
class Calibration:
    """Per-event costs (ns) with 95% confidence half-widths, and where they were measured.

    Everything but the costs says how far to trust them: ``blocks`` of alternating windows (0:
    costs from whole runs), the machine's speed while calibrating (``iteration_ns``,
    ``cpu_events_per_iteration``: the correction scales CPU-side costs by a trace's speed against
    it), how the costs' errors go together (``correlation``; a pair absent counts as 1, which
    makes their intervals add up), and how uncertain a corrected iteration is
    (``uncertainty_pct``). ``startup_ns`` is what profiling adds to a process's start-up beyond
    its counted events; ``cupti_residual_ns`` and ``continuous_ns`` are the parts of the CUDA API
    cost that windows cannot see (already added to ``costs_ns["cuda_api"]``); None where not
    measured.
    """

    costs_ns: dict[str, float]
    ci95_ns: dict[str, float | None]
    repetitions: int
    machine: dict[str, Any]
    command: tuple[str, ...]
    runs: tuple[dict[str, Any], ...]  # the measurements the costs were derived from, one per calibration run
    blocks: int = 0
    iteration_ns: float = 0.0
    cpu_events_per_iteration: float = 0.0
    correlation: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    uncertainty_pct: float | None = None
    startup_ns: float | None = None
    startup_ci95_ns: float | None = None
    cupti_residual_ns: float | None = None
    cupti_residual_ci95_ns: float | None = None
    continuous_ns: float | None = None
    continuous_ci95_ns: float | None = None
    version: int = CALIBRATION_VERSION

    def save(self, path: Path) -> None:
        write_json_atomic(path, dataclasses.asdict(self))

    @classmethod
    def load(cls, path: Path) -> Calibration:
        """Read a ``calibration.json``; a missing, corrupt or other-version file is a ``CalibrationError``."""
        redo = "make one with `rlscope calibrate -- python train.py ARGS`"
        try:
            text = Path(path).read_text()
            data = json.loads(text)
        except (OSError, ValueError) as err:
            raise CalibrationError(f"{path}: not a calibration file ({err}); {redo}") from err
        version = data.get("version", 1) if isinstance(data, dict) else None
        if version != CALIBRATION_VERSION:
            raise CalibrationError(f"{path}: calibration format version {version}, this rlscope reads version "
                                   f"{CALIBRATION_VERSION}; calibrate again with this version ({redo})")
        try:
            return _CALIBRATION_FILE.validate_json(text)
        except ValidationError as err:
            raise CalibrationError(f"{path}: not a version {CALIBRATION_VERSION} calibration: {schema_problem(err)}; "
                                   f"{redo}") from err

    def check_fits(self, meta: dict[str, Any]) -> None:
        """Warn when the trace comes from another machine or rlscope version."""
        trace_machine = {"host": meta.get("host"), "machine": meta.get("machine"),
                         "rlscope": meta.get("rlscope_version")}
        for key, value in trace_machine.items():  # what either side does not record is not compared
            if value is not None and key in self.machine and self.machine[key] != value:
                warnings.warn(f"calibration measured with {key}={self.machine.get(key)!r}, trace has {value!r}: "
                              f"costs per event may not carry over; calibrate on this machine and version",
                              CalibrationWarning, stacklevel=3)


# The file's schema is the record's fields and types; JSON lists become the tuples the record holds.
_CALIBRATION_FILE = TypeAdapter(Calibration)


def event_counts(transitions: pd.DataFrame) -> dict[str, int]:
    """Events of each type in a trace, from its transitions table."""
    totals = transitions.groupby("transition")["count"].sum() if not transitions.empty else pd.Series(dtype=int)
    return {event: int(sum(totals.get(row, 0) for row in rows)) for event, (rows, _) in EVENTS.items()}


def machine_fingerprint() -> dict[str, Any]:
    """What a calibration's costs belong to: costs carry over between runs on one machine and
    rlscope version, not to another (``machine``: ``rlscope.machine.machine_identity``, which
    tells apart machines of one host name)."""
    return {"host": platform.node(), "machine": machine_identity(), "rlscope": __version__,
            "python": platform.python_version(),
            "processor": platform.processor() or platform.machine()}
