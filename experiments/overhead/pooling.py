"""Pool the whole-run pairs of several overhead validations per workload.

One validation's median of a few whole-run pairs is uncertain by about as much as the ±5%
target on a host whose identical runs differ by 8-15%. Validations of one workload at the same
lengths are samples of the same error, so their pairs can be pooled until the median is known
well enough to say whether it is within the target (``bench/pooled_pairs.py`` prints this for
results files).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

__all__ = ["TARGET_PCT", "row_pairs", "pooled", "verdict"]

TARGET_PCT = 5.0
RESAMPLES = 5_000


def row_pairs(row: pd.Series, column: str = "corrected_error") -> list[float]:
    """One validation's pair errors in percent, from its list or, for rows that predate it and had
    at most 3 pairs, from its minimum, median and maximum; empty where they cannot be known."""
    cell = row.get(f"{column}_pairs_pct")
    if isinstance(cell, str) and cell.strip():
        return [float(v) for v in json.loads(cell)]
    count = row.get("whole_run_pairs")
    count = 0 if pd.isna(count) else int(count)
    low, mid, high = (row.get(f"{column}_{k}pct") for k in ("min_", "", "max_"))
    if count == 1 and pd.notna(mid):
        return [float(mid)]
    if count == 2 and pd.notna(low) and pd.notna(high):
        return [float(low), float(high)]
    if count == 3 and pd.notna(low) and pd.notna(mid) and pd.notna(high):
        return [float(low), float(mid), float(high)]
    return []


def pooled(groups: list[list[float]], seed: int = 0) -> dict[str, float]:
    """Median of the pooled pairs and its 95% interval from a two-level bootstrap: validations
    resampled, then pairs within each. Why two levels: a validation's pairs share its
    calibration (and its stretch of the host's mood), so they are not independent; resampling
    single pairs would claim more certainty than the validations give."""
    groups = [np.asarray(g, dtype=np.float64) for g in groups if len(g)]
    values = np.concatenate(groups)
    rng = np.random.default_rng(seed)
    medians = np.empty(RESAMPLES)
    for i in range(RESAMPLES):
        chosen = rng.integers(len(groups), size=len(groups))
        medians[i] = np.median(np.concatenate([rng.choice(groups[k], size=len(groups[k])) for k in chosen]))
    low, high = np.percentile(medians, [2.5, 97.5])
    return {"pairs": len(values), "validations": len(groups), "median": float(np.median(values)),
            "low": float(low), "high": float(high), "within": int((np.abs(values) <= TARGET_PCT).sum())}


def verdict(p: dict[str, float]) -> str:
    """Whether the pooled median is known to be within the target, outside it, or neither."""
    if -TARGET_PCT <= p["low"] and p["high"] <= TARGET_PCT:
        return "within"
    if p["low"] > TARGET_PCT or p["high"] < -TARGET_PCT:
        return "outside"
    return "not settled"
