"""What every generated results table shares: where the data is, Markdown tables, number formats."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.casestudies.profiled import steps_per_iteration  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
H100 = RESULTS / "h100"
DATACOLLECTION = RESULTS / "datacollection"
FRAMEWORK_LABELS = {"sb3": "SB3", "sb3_compile": "SB3 + compile", "sbx": "SBX"}  # the framework comparison's, in order


def markdown_table(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def short_sci(value: float) -> str:
    """Three significant digits, exponents written short: 5.77e11, 1.05e5, 19."""
    return re.sub(r"e([+-])0*(\d)", lambda m: f"e{'-' if m[1] == '-' else ''}{m[2]}", f"{value:.3g}")


def ok_results(name: str) -> pd.DataFrame:
    """The finished runs of an experiment's results table under ``h100/``."""
    frame = pd.read_csv(H100 / name / "results.csv")
    return frame[frame["status"] == "ok"]


def in_order(values: pd.Series) -> list[Any]:
    """Distinct values in the order the runs were made (the manifest's grid order)."""
    return list(dict.fromkeys(values))


def span(values: Any, form: str) -> str:
    """``low–high`` of the values in ``form``, or the one value where both print the same."""
    low, high = form.format(min(values)), form.format(max(values))
    return low if low == high else f"{low}–{high}"


# The case studies' operation and layer groups: table column -> operation, and -> layers.
OPERATION_GROUPS = {"inference": "inference", "simulation": "simulation", "backpropagation": "backpropagation",
                    "(unannotated)": "outside"}
LAYER_GROUPS = {"Python": ["Python"], "Backend": ["Backend"], "Simulator": ["Simulator"], "CUDA API": ["CUDA API"],
                "GPU busy": ["CPU + GPU", "GPU"]}


def group_shares(rep: pd.DataFrame, column: str) -> dict[str, float]:
    """One repetition's share (%) of each operation and layer group in ``column``'s seconds; for
    a corrected bound (``corrected_low_seconds`` or ``corrected_high_seconds``) the bound of the
    group's share: the group at that end against the rest at the other end."""
    from rlscope.analyze.shares import share_intervals

    bound = {"corrected_low_seconds": "low", "corrected_high_seconds": "high"}.get(column)
    groups = {out: rep["operation"] == op for op, out in OPERATION_GROUPS.items()}
    groups.update({out: rep["layer"].isin(layers) for out, layers in LAYER_GROUPS.items()})
    out = {}
    for name, mask in groups.items():
        if bound is None:
            out[name] = rep.loc[mask, column].sum() / rep[column].sum() * 100
            continue
        parts = {c: pd.Series([rep.loc[mask, c].sum(), rep.loc[~mask, c].sum()])
                 for c in ("corrected_seconds", "corrected_low_seconds", "corrected_high_seconds")}
        shares = share_intervals(parts["corrected_seconds"], parts["corrected_low_seconds"],
                                 parts["corrected_high_seconds"])
        out[name] = float(shares[1 if bound == "low" else 2].iloc[0]) * 100
    return out



def max_spread(shares: pd.DataFrame) -> float:
    """The largest difference between repetitions (rows) of any share (column), in points."""
    return float((shares.max() - shares.min()).max())


def env_steps_per_iteration(rows: pd.DataFrame) -> pd.Series:
    """Per row of a case study's results (one environment, rl-zoo3's hyperparameters), the
    environment steps of one of its iterations (``profiled.steps_per_iteration``: PPO's rollout
    of 512, so 10 iterations make 5,120 steps for 5,000 asked): per-iteration counts over these
    are per step."""
    return rows["algorithm"].map(lambda algorithm: steps_per_iteration(algorithm, 1))
