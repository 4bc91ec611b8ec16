"""Draw an experiment's figures into PDF and PNG files."""

from __future__ import annotations

import dataclasses
import importlib
import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: never open a window, never need a display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from rlscope.errors import ResultsError  # noqa: E402
from rlscope.files import write_atomic, write_json_atomic  # noqa: E402
from rlscope.plot import FIGURES  # noqa: E402
from rlscope.plot.experiment import RESULTS_FILE, missing_columns, read_experiment, read_results  # noqa: E402

__all__ = ["draw_experiment", "draw_profile", "save_figure", "note_skipped", "shared_legend", "artifacts_name",
           "FigureFailure", "FIGURES_STATUS"]

FIGURES_STATUS = "figures.json"  # beside an experiment's figures: each one drawn or why not


def artifacts_name(experiment: str) -> str:
    """The folder under ``OUTPUT/artifacts/`` an experiment's figures go to: named as its
    ``experiments/experiment_<name>.sh`` script, as the papers' artifact scripts name them."""
    return f"experiment_{experiment}"


def note_skipped(fig: plt.Figure, results: pd.DataFrame, label_column: str) -> None:
    """Say under the figure which runs were skipped here, and why (e.g. "needs a GPU")."""
    skipped = results[results["status"] == "skipped"]
    if not skipped.empty:
        reasons = sorted({f"{r[label_column]}: {r['reason']}" for _, r in skipped.iterrows()})
        fig.text(0.01, -0.02, "not run here — " + "; ".join(reasons), fontsize=7, va="top", wrap=True)


def shared_legend(fig: plt.Figure, axes: Any, title: str, order: tuple[str, ...]) -> None:
    """One legend for all panels: every label any panel drew, in ``order``."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    labels = [label for label in order if label in handles]
    fig.legend([handles[label] for label in labels], labels, title=title, loc="upper right", fontsize=8,
               title_fontsize=8)


def save_figure(fig: plt.Figure, out_dir: Path, name: str) -> list[Path]:
    """Write ``fig`` as PDF and PNG (atomically) and close it."""
    written = []
    for suffix in ("pdf", "png"):
        buffer = io.BytesIO()
        fig.savefig(buffer, format=suffix, dpi=150, bbox_inches="tight")
        path = out_dir / f"{name}.{suffix}"
        write_atomic(path, buffer.getvalue())
        written.append(path)
    plt.close(fig)
    return written


@dataclasses.dataclass(frozen=True)
class FigureFailure:
    """A figure that could not be drawn, and why: the other figures are drawn all the same."""

    name: str
    reason: str


def draw_experiment(experiment_dir: Path, artifacts_dir: Path) -> tuple[list[Path], list[FigureFailure]]:
    """Draw every figure the experiment's manifest lists; return the files written and the
    figures that failed. Each figure is drawn on its own: one that lacks a column or fails to draw
    is reported (also in ``FIGURES_STATUS`` beside the figures, for the report) and the rest go on."""
    meta = read_experiment(experiment_dir)
    results = read_results(experiment_dir, f"rlscope run {meta['path']}")
    if not (results["status"] == "ok").any():
        raise ResultsError(f"{experiment_dir / RESULTS_FILE}: no successful runs to plot; "
                           f"see the run logs under {experiment_dir / 'runs'}")
    out_dir = artifacts_dir / artifacts_name(meta["experiment"])
    written: list[Path] = []
    failures: list[FigureFailure] = []
    for name in meta["figures"]:
        missing = missing_columns(results, name)
        if missing:
            failures.append(FigureFailure(name, f"results.csv lacks {', '.join(missing)}, which it is drawn from; "
                                                f"the workload {meta['workload']} did not return "
                                                f"{'it' if len(missing) == 1 else 'them'}"))
            continue
        module_name, _, func_name = FIGURES[name].function.partition(":")
        draw = getattr(importlib.import_module(module_name), func_name)
        try:
            figure = draw(results, meta)
        except Exception as err:  # a figure's own bug or odd data: reported, and the other figures are drawn
            plt.close("all")
            failures.append(FigureFailure(name, f"{type(err).__name__}: {err}"))
            continue
        written += save_figure(figure, out_dir, name)
    for failure in failures:  # a figure drawn by an earlier run would be read as this one's
        for suffix in ("pdf", "png"):
            (out_dir / f"{failure.name}.{suffix}").unlink(missing_ok=True)
    status = {f.name: {"status": "failed", "reason": f.reason} for f in failures}
    status.update({p.stem: {"status": "ok", "reason": ""} for p in written})
    write_json_atomic(out_dir / FIGURES_STATUS, status)
    return written, failures


def draw_profile(trace_dir: Path, out_dir: Path) -> list[Path]:
    """Draw the figures of an analysed trace (breakdown, transitions, and GPU utilisation where
    the trace has GPU activity) from the tables `rlscope analyze` wrote."""
    from rlscope.analyze import ANALYSIS_DIR, read_tables
    from rlscope.plot.breakdown import time_breakdown, transition_counts
    from rlscope.plot.utilisation import utilisation_over_time

    tables = read_tables(trace_dir / ANALYSIS_DIR, trace_dir)
    written = save_figure(time_breakdown(tables["breakdown"]), out_dir, "time_breakdown")
    written += save_figure(transition_counts(tables["transitions"]), out_dir, "transitions")
    if not tables["utilisation"].empty:
        written += save_figure(utilisation_over_time(tables["utilisation"]), out_dir, "gpu_utilisation")
    return written
