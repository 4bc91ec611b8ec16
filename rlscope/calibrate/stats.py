"""Confidence intervals for calibration's costs: means, medians, and sums of correlated costs."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["mean_ci95", "median_ci95", "median_interval95", "joint_half_width"]

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def mean_ci95(values: list[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its 95% confidence interval (Student's t; None for one value)."""
    if len(values) < 2:
        return float(np.mean(values)), None
    return float(np.mean(values)), float(_T975[min(len(values), 31) - 2] * np.std(values, ddof=1)
                                         / math.sqrt(len(values)))


def median_interval95(values: list[float]) -> tuple[float, float] | None:
    """The distribution-free 95% confidence interval of the median: the order statistics that
    binomial tails of 2.5% give (the sign test's interval), so no assumption of a normal or
    symmetric spread. None for fewer than 6 values, where no such interval exists."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    n = len(ordered)
    # k: how many order statistics each side lie outside the interval, the largest with
    # P(Binomial(n, 1/2) < k) <= 2.5%; in integers (40 * count <= 2**n), exact for any n.
    k, count = 0, 0
    while 40 * (count + math.comb(n, k)) <= 2 ** n:
        count += math.comb(n, k)
        k += 1
    if k == 0:
        return None
    return float(ordered[k - 1]), float(ordered[n - k])


def median_ci95(values: list[float]) -> tuple[float, float | None]:
    """Median and half the width of its distribution-free 95% confidence interval
    (``median_interval95``; None for fewer than 6 values).

    Why the median: on a shared machine a window now and then loses milliseconds to another
    process, and such outliers set the mean of a few hundred blocks off by more than the cost's
    own spread; the median ignores them."""
    median = float(np.median(values))
    interval = median_interval95(values)
    return median, None if interval is None else (interval[1] - interval[0]) / 2


def joint_half_width(weighted: dict[str, float], correlation: dict[str, dict[str, float]]) -> float:
    """The 95% half-width of a sum of costs times counts, from each term's own half-width
    (``weighted``: event -> count x the cost's half-width) and the costs' correlations:
    ``sqrt(w' R w)``. A pair without a coefficient counts as 1, so their half-widths add up."""
    events = list(weighted)
    total = sum(weighted[a] * weighted[b] * (1.0 if a == b else correlation.get(a, {}).get(b, 1.0))
                for a in events for b in events)
    return math.sqrt(max(total, 0.0))
