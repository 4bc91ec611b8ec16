"""Pooling whole-run pairs: which pairs a results row gives, and what pooling them says."""

import pandas as pd
import pytest

from experiments.overhead import pooling as pooled_pairs


def test_a_row_gives_its_listed_pairs_or_those_its_range_fixes():
    listed = pd.Series({"whole_run_pairs": 4, "corrected_error_pairs_pct": "[-1.9, 4.1, 7.0, 5.2]",
                        "corrected_error_min_pct": -1.9, "corrected_error_pct": 4.6, "corrected_error_max_pct": 7.0})
    assert pooled_pairs.row_pairs(listed) == [-1.9, 4.1, 7.0, 5.2]
    three = pd.Series({"whole_run_pairs": 3, "corrected_error_pairs_pct": float("nan"),
                       "corrected_error_min_pct": -0.4, "corrected_error_pct": 3.9, "corrected_error_max_pct": 24.8})
    assert pooled_pairs.row_pairs(three) == [-0.4, 3.9, 24.8]
    two = three.copy()
    two["whole_run_pairs"] = 2
    assert pooled_pairs.row_pairs(two) == [-0.4, 24.8]
    four_unlisted = three.copy()
    four_unlisted["whole_run_pairs"] = 4  # a median of four is not one of them: its pairs are unknown
    assert pooled_pairs.row_pairs(four_unlisted) == []
    steady = pd.Series({"whole_run_pairs": 1, "steady_corrected_error_pct": 2.5})
    assert pooled_pairs.row_pairs(steady, "steady_corrected_error") == [2.5]
    uncounted = pd.Series({"whole_run_pairs": float("nan"), "corrected_error_pct": 2.5})  # a row from before pairs
    assert pooled_pairs.row_pairs(uncounted) == []


def test_pooling_settles_only_when_the_interval_is_inside_or_outside_the_target():
    tight = pooled_pairs.pooled([[1.0, -1.0, 0.5, 2.0], [-0.5, 1.5, 0.0, 1.0]] * 4)
    assert tight["pairs"] == 32 and tight["validations"] == 8 and tight["median"] == pytest.approx(0.75)
    assert tight["low"] <= tight["median"] <= tight["high"]
    assert pooled_pairs.verdict(tight) == "within" and tight["within"] == 32
    assert pooled_pairs.verdict(pooled_pairs.pooled([[9.0, 10.0], [11.0, 12.0]] * 5)) == "outside"
    assert pooled_pairs.verdict(pooled_pairs.pooled([[-15.0, -4.0], [3.0, 8.0, 20.0]])) == "not settled"


def test_pairs_that_share_a_validation_count_as_one_sample_of_it():
    # The same 22 pairs, as 22 validations or as 2 that disagree: the second is less certain.
    low, high = [-6.0 + 0.4 * i for i in range(11)], [2.0 + 0.4 * i for i in range(11)]
    independent = pooled_pairs.pooled([[v] for v in low + high])
    clustered = pooled_pairs.pooled([low, high])
    assert clustered["high"] - clustered["low"] > independent["high"] - independent["low"]
    assert pooled_pairs.pooled([[], [1.0, 2.0]])["validations"] == 1  # a validation without pairs adds none
