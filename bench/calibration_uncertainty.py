"""How uncertain a corrected iteration is, with the costs' intervals added up (a bound, which
calibration reported until 2026-11-23) and combined by the costs' correlation (what it reports
now), from the alternating windows kept in calibration files.

    python bench/calibration_uncertainty.py output/calibration/*/calibration.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlscope.analyze.calibration import Calibration, correction_uncertainty_pct, cost_correlation


def compare(path: Path) -> str:
    """One calibration's costs, their correlations and both uncertainties, as text."""
    calibration = Calibration.load(path)
    windows = [w for run in calibration.runs if run["config"] == "windows" for w in run["windows"]]
    if not windows:
        return f"{path}: no alternating windows (a calibration from whole runs)"
    correlation = cost_correlation(windows)
    added = correction_uncertainty_pct(windows, calibration.ci95_ns, {})
    joint = correction_uncertainty_pct(windows, calibration.ci95_ns, correlation)
    costs = ", ".join(f"{e} {c:.0f} ± {calibration.ci95_ns.get(e) or float('nan'):.0f} ns"
                      for e, c in calibration.costs_ns.items())
    pairs = ", ".join(f"{a}/{b} {r:+.2f}" for a, row in correlation.items() for b, r in row.items() if a < b)
    fmt = "{:.2f}%".format
    return (f"{path}: {calibration.blocks} blocks\n  costs: {costs}\n  correlations: {pairs or 'none'}\n"
            f"  a corrected iteration uncertain to: intervals added ±{fmt(added) if added is not None else '?'}, "
            f"combined ±{fmt(joint) if joint is not None else '?'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("calibrations", nargs="+", type=Path, help="calibration.json files")
    for path in parser.parse_args().calibrations:
        print(compare(path))


if __name__ == "__main__":
    main()
