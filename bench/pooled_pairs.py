"""Every whole-run pair of several overhead validations, pooled per workload: how many, their
median with a bootstrap 95% interval (validations resampled, then their pairs), and how many
lie within ±5% (``experiments/overhead/pooling.py``); then the in-process checks' range per
workload (alternating windows and sessions, one value per validation):

    python bench/pooled_pairs.py docs/results/overhead/h100_full_budget*.csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.overhead.pooling import TARGET_PCT, pooled, row_pairs, verdict  # noqa: E402


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
    print(f"# in-process checks: corrected error per validation (percent; target ±{TARGET_PCT:g})")
    for workload, rows in frame.groupby("workload"):
        for column, title in (("window_corrected_error_pct", "windows"), ("session_corrected_error_pct", "sessions")):
            values = rows[column].dropna() if column in rows else pd.Series(dtype=float)
            if len(values):
                within = int((values.abs() <= TARGET_PCT).sum())
                print(f"{workload} {title}: {values.min():+.1f}..{values.max():+.1f} over {len(values)} validations, "
                      f"{within} within")


if __name__ == "__main__":
    main()
