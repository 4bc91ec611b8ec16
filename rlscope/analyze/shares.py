"""Shares of a whole whose parts are known only within intervals (corrected times, for one)."""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import pandas as pd

__all__ = ["share_intervals"]

Parts = TypeVar("Parts", pd.Series, pd.DataFrame)


def share_intervals(point: Parts, low: Parts, high: Parts) -> tuple[Parts, Parts, Parts]:
    """Each part's share of the sum of ``point``, and the bounds of that share while every part
    may lie anywhere in its interval [``low``, ``high``]: the lowest share is the part at its
    low end against all others at their high ends, ``low / (low + sum(others' high))``, and the
    highest the other way round. A bound, not a 95% interval of the share: it assumes nothing
    about how the parts' errors go together, and it holds ``low share <= share <= high share``
    wherever each part's ``low <= point <= high``.

    Parts run along a Series' index, or along a DataFrame's columns (one whole per row); ``low``
    and ``high`` are aligned to ``point``. A whole of zero gives NaN shares."""
    frame = isinstance(point, pd.DataFrame)
    p = point.to_numpy(dtype=np.float64)
    lo = low.reindex_like(point).to_numpy(dtype=np.float64)
    hi = high.reindex_like(point).to_numpy(dtype=np.float64)
    axis = 1 if frame else 0
    with np.errstate(invalid="ignore", divide="ignore"):
        share = p / p.sum(axis=axis, keepdims=True)
        low_share = lo / (lo + (hi.sum(axis=axis, keepdims=True) - hi))
        high_share = hi / (hi + (lo.sum(axis=axis, keepdims=True) - lo))
    # the sums of the others differ from the point's by rounding only where the intervals are empty
    low_share, high_share = np.fmin(low_share, share), np.fmax(high_share, share)

    def like(values: np.ndarray) -> Parts:
        if frame:
            return pd.DataFrame(values, index=point.index, columns=point.columns)
        return pd.Series(values, index=point.index, name=point.name)

    return like(share), like(low_share), like(high_share)
