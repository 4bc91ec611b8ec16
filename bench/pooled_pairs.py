"""Every whole-run pair of several overhead validations, pooled per workload: how many, their
median with a bootstrap 95% interval (validations resampled, then their pairs), and how many
lie within ±5%.

On a host whose identical runs differ by 8-15%, one validation's median of 2-5 pairs is
uncertain by about ±5 points, as wide as the target. Validations of the same workload at the
same lengths (another repetition, another machine of the kind, the same calibration or not)
are each a sample of the same error, so their pairs can be pooled until the median is known
well enough to say whether it is within ±5%:

    python bench/pooled_pairs.py docs/results/overhead/h100_full_budget*.csv

Rows from before ``corrected_error_pairs_pct`` existed still give their pairs where they had
at most 3: then the minimum, median and maximum are all of them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="results.csv files of the overhead experiment")
    args = parser.parse_args()
    frame = pd.concat([pd.read_csv(p) for p in args.results], ignore_index=True)
    frame = frame[frame["status"] == "ok"]
    for column, title in (("corrected_error", "whole runs"), ("steady_corrected_error", "from the first step")):
        print(f"# {title}: pooled pairs per workload (percent; target ±{TARGET_PCT:g})")
        for workload, rows in frame.groupby("workload"):
            groups = [row_pairs(row, column) for _, row in rows.iterrows()]
            unknown = sum(1 for g in groups if not g)
            if unknown == len(groups):
                print(f"{workload}: no pairs known")
                continue
            p = pooled(groups)
            print(f"{workload}: {p['pairs']} pairs from {p['validations']} validations, median {p['median']:+.1f} "
                  f"(95% interval {p['low']:+.1f}..{p['high']:+.1f}: {verdict(p)}), {p['within']} pairs within"
                  + (f"; {unknown} validations' pairs unknown" if unknown else ""))


if __name__ == "__main__":
    main()
