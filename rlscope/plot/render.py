"""Draw an experiment's figures into PDF and PNG files."""

from __future__ import annotations

import importlib
import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: never open a window, never need a display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from rlscope.errors import ResultsError  # noqa: E402
from rlscope.files import read_json, write_atomic  # noqa: E402
from rlscope.plot import FIGURES  # noqa: E402

__all__ = ["draw_experiment", "draw_profile", "save_figure", "note_skipped", "shared_legend", "artifacts_name"]


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


def draw_experiment(experiment_dir: Path, artifacts_dir: Path) -> list[Path]:
    """Draw every figure the experiment's manifest lists; return the files written."""
    meta = read_json(experiment_dir / "experiment.json")
    if meta is None:
        raise ResultsError(f"{experiment_dir}: no experiment.json; run `rlscope run MANIFEST` first")
    results_csv = experiment_dir / "results.csv"
    try:
        results = pd.read_csv(results_csv)
    except FileNotFoundError as err:
        raise ResultsError(f"{results_csv}: missing; run `rlscope run {meta['path']}` first") from err
    except pd.errors.EmptyDataError:
        results = pd.DataFrame()
    if "status" not in results or not (results["status"] == "ok").any():
        raise ResultsError(f"{results_csv}: no successful runs to plot; "
                           f"see the run logs under {experiment_dir / 'runs'}")
    out_dir = artifacts_dir / artifacts_name(meta["experiment"])
    written: list[Path] = []
    for name in meta["figures"]:
        module_name, _, func_name = FIGURES[name].partition(":")
        draw = getattr(importlib.import_module(module_name), func_name)
        written += save_figure(draw(results, meta), out_dir, name)
    return written


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
