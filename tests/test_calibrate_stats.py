"""The distribution-free interval of a median."""

from __future__ import annotations





def test_median_interval_is_distribution_free_and_ignores_outliers():
    from rlscope.calibrate.stats import median_ci95

    assert median_ci95(list(range(1, 11))) == (5.5, 3.5)  # between the 2nd and 9th of 10
    assert median_ci95([1.0, 2.0, 3.0, 4.0, 5.0])[1] is None  # 5 values: no 95% interval exists
    assert median_ci95([100.0] * 9 + [1e6]) == (100.0, 0.0)


def test_median_interval_of_many_blocks():
    from rlscope.calibrate.stats import median_ci95

    median, half = median_ci95([float(i) for i in range(2001)])  # a long calibration: thousands of blocks
    assert median == 1000.0 and 40 < half < 50  # about 1.96 * sqrt(2001) / 2 order statistics each side


def test_the_median_interval_comes_from_order_statistics_and_needs_six_values() -> None:
    from rlscope.calibrate.stats import median_interval95

    assert median_interval95([1.1, 1.2, 1.3, 1.4, 1.5]) is None
    # six values: P(all on one side) = 2/64 < 5%, so the extremes bound the median
    assert median_interval95([1.6, 1.1, 1.3, 1.2, 1.5, 1.4]) == (1.1, 1.6)
    # 33 values: the 11th and 23rd smallest (sign test, 96.5% coverage)
    assert median_interval95([float(v) for v in range(33, 0, -1)]) == (11.0, 23.0)
