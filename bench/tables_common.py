"""What every generated results table shares: where the data is, Markdown tables, number formats."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

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
