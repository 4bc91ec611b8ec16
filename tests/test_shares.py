"""Shares of parts known within intervals: the bounds hold the point, whatever the parts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rlscope.analyze.shares import share_intervals


def test_a_shares_bounds_take_the_other_parts_at_their_opposite_ends():
    point = pd.Series({"Python": 6.0, "CUDA API": 0.0, "GPU": 4.0})
    low = pd.Series({"Python": 5.0, "CUDA API": 0.0, "GPU": 4.0})
    high = pd.Series({"GPU": 4.0, "Python": 7.0, "CUDA API": 1.0})  # aligned by label
    share, lo, hi = share_intervals(point, low, high)
    assert share.to_dict() == pytest.approx({"Python": 0.6, "CUDA API": 0.0, "GPU": 0.4})
    assert lo["Python"] == pytest.approx(5 / (5 + 1 + 4)) and hi["Python"] == pytest.approx(7 / (7 + 0 + 4))
    assert lo["CUDA API"] == 0 and hi["CUDA API"] == pytest.approx(1 / (1 + 5 + 4))
    assert lo["GPU"] == pytest.approx(4 / (4 + 7 + 1)) and hi["GPU"] == pytest.approx(4 / (4 + 5 + 0))


def test_rows_of_a_frame_are_wholes_of_their_own_and_bounds_hold_their_point():
    rng = np.random.default_rng(3)
    point = pd.DataFrame(rng.uniform(0, 10, (40, 4)), columns=list("abcd"))
    low = point - pd.DataFrame(rng.uniform(0, 3, (40, 4)), columns=list("abcd"))
    high = point + pd.DataFrame(rng.uniform(0, 3, (40, 4)), columns=list("abcd"))
    share, lo, hi = share_intervals(point, low.clip(lower=0), high)
    assert np.allclose(share.sum(axis=1), 1.0)
    assert ((0 <= lo) & (lo <= share) & (share <= hi) & (hi <= 1)).all().all()
    exact = share_intervals(point, point, point)  # no uncertainty: bounds are the point, but for rounding
    assert np.allclose(exact[1], exact[0], rtol=1e-12) and np.allclose(exact[2], exact[0], rtol=1e-12)
    assert ((exact[1] <= exact[0]) & (exact[0] <= exact[2])).all().all()


def test_a_whole_of_zero_has_no_shares():
    zero = pd.Series({"a": 0.0, "b": 0.0})
    share, lo, hi = share_intervals(zero, zero, zero)
    assert share.isna().all() and lo.isna().all() and hi.isna().all()
