"""What figures and the report read from an experiment directory, checked as it is read.

``experiment.json`` (the resolved manifest `rlscope run` saves) and ``results.csv`` (its rows)
are read only through here: a file that is missing, garbled or of the wrong shape is one
``ResultsError`` naming the file, the field or column, and what to run again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError

from rlscope.errors import ResultsError, schema_problem
from rlscope.plot import FIGURES

__all__ = ["ExperimentRecord", "read_experiment", "read_results", "missing_columns", "EXPERIMENT_FILE",
           "RESULTS_FILE", "RUN_COLUMNS"]

EXPERIMENT_FILE = "experiment.json"
RESULTS_FILE = "results.csv"
RUN_COLUMNS = ("run_id", "status", "reason")  # every row of results.csv has them


class ExperimentRecord(BaseModel):
    """The fields of ``experiment.json`` that later stages use (it holds the whole manifest)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    experiment: str
    path: str
    workload: str
    scale: Literal["quick", "full"]
    description: str = ""
    params: dict[str, Any] = {}
    grid: dict[str, list[Any]]
    figures: list[Literal[tuple(FIGURES)]] = []  # type: ignore[valid-type]


def read_experiment(directory: Path) -> dict[str, Any]:
    """``directory/experiment.json`` as a dict of checked fields."""
    path = directory / EXPERIMENT_FILE
    rerun = "run the manifest again with `rlscope run MANIFEST`"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise ResultsError(f"{directory}: no {EXPERIMENT_FILE}; {rerun} (it writes one per experiment)") from err
    except (OSError, ValueError) as err:
        raise ResultsError(f"{path}: unreadable or not JSON ({err}); {rerun}") from err
    try:
        return ExperimentRecord.model_validate(data).model_dump()
    except ValidationError as err:
        raise ResultsError(f"{path}: {schema_problem(err)}; {rerun}") from err


def read_results(directory: Path, rerun: str) -> pd.DataFrame:
    """``directory/results.csv``; empty (no rows yet) is an empty frame. ``rerun``: the command that
    writes it, for the message when it is missing or garbled."""
    path = directory / RESULTS_FILE
    try:
        results = pd.read_csv(path)
    except FileNotFoundError as err:
        raise ResultsError(f"{path}: missing; run `{rerun}` first") from err
    except pd.errors.EmptyDataError:
        return pd.DataFrame(columns=list(RUN_COLUMNS))
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as err:
        raise ResultsError(f"{path}: not a readable CSV table ({str(err).strip()}); `{rerun}` writes it again "
                           f"from the runs' result files") from err
    absent = [c for c in RUN_COLUMNS if c not in results]
    if absent:
        raise ResultsError(f"{path}: lacks the column(s) {', '.join(absent)} every results table has; "
                           f"`{rerun}` writes it again from the runs' result files")
    return results


def missing_columns(results: pd.DataFrame, figure: str) -> list[str]:
    """The columns figure ``figure`` needs that ``results`` lacks."""
    return [c for c in (*FIGURES[figure].params, *FIGURES[figure].columns) if c not in results]
