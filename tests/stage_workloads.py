"""A tiny workload in checkpointed stages (rlscope.stages), shaped like overhead_correction's: a
calibration, validation pairs and a windows run; it can SIGKILL itself, or its runner too (the
machine going away), part way through a stage."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from rlscope.stages import stage


def _computed(counters: str, label: str, kill_in: str, kill_at: int, kill_runner: bool, value: Any) -> Any:
    """Count the computation of stage ``label`` in ``counters/computed.txt``; the ``kill_at``-th time
    ``kill_in`` is computed (once: a marker file remembers it), SIGKILL the process part way."""
    with (Path(counters) / "computed.txt").open("a") as f:
        f.write(f"{label}\n")
    times = (Path(counters) / "computed.txt").read_text().split().count(label)
    marker = Path(counters) / f"killed-{label}"
    if label == kill_in and times == kill_at and not marker.exists():
        marker.touch()
        if kill_runner:
            os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    return value


def staged(counters: str, pairs: int = 3, scale: float = 1.0, kill_in: str = "", kill_at: int = 1,
           kill_runner: bool = False) -> dict[str, Any]:
    """Stages ``calibration``, ``pairs`` validation pairs and ``windows run``, each counted as it is
    computed; the result depends on every stage's."""
    def work(label: str, value: Any) -> Any:
        return _computed(counters, label, kill_in, kill_at, kill_runner, value)

    calibration = stage("calibration", lambda: work("calibration", {"cost": 1.5 * scale, "runs": (1, 2)}))
    errors = [stage("validation pairs", lambda i=i: work(f"pair-{i}", {"error": i * calibration["cost"]}),
                    index=i, of=pairs) for i in range(pairs)]
    windows = stage("windows run", lambda: work("windows", [[0, 10, 2], [1, 12, 2]]))
    return {"cost": calibration["cost"], "calibration_runs": len(calibration["runs"]),
            "errors_pairs": json.dumps([e["error"] for e in errors]), "whole_run_pairs": len(errors),
            "window_rows": len(windows)}
