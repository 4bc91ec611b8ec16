"""Verdicts: each claim's measured value against the paper's, and the measured reasons for a difference.

A verdict is one of ``VERDICTS``. "Not run" means the results that answer the claim are not
there (the experiment, the grid points, or a plateau the grid does not reach); every other
verdict comes with the number it was reached on and its spread over repetitions. A difference
("same direction, different size", "contradicted") is explained only by the claim's
``explain`` queries, each a measured number: a difference without one is flagged unexplained.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from rlscope.claims.query import Measured, Missing, Results, measure
from rlscope.claims.schema import Claim
from rlscope.claims.units import format_value
from rlscope.errors import ClaimError
from rlscope.plot.experiment import RESULTS_FILE, read_results

__all__ = ["VERDICTS", "REPRODUCED", "DIFFERENT", "CONTRADICTED", "NOT_RUN", "ClaimResult", "judge", "evaluate",
           "results_in"]

REPRODUCED = "reproduced"
DIFFERENT = "same direction, different size"
CONTRADICTED = "contradicted"
NOT_RUN = "not run"
VERDICTS = (REPRODUCED, DIFFERENT, CONTRADICTED, NOT_RUN)


@dataclasses.dataclass(frozen=True)
class ClaimResult:
    """A claim (of the manifest of ``experiment``) and what our results say of it."""

    experiment: str
    claim: Claim
    verdict: str
    ours: Measured | None
    reason: str
    evidence: tuple[str, ...]  # the experiments whose results.csv the claim and its explanations read

    @property
    def unexplained(self) -> bool:
        """A difference from the paper that no measured explanation accounts for."""
        return self.verdict in (DIFFERENT, CONTRADICTED) and not self.claim.explain


def judge(value: float, claim: Claim) -> tuple[str, str]:
    """The verdict on ``value`` (ours) for ``claim``, and why, in a few words."""
    expect, unit = claim.expect, claim.unit
    target = expect.target
    if expect.about is not None:
        if expect.factor is not None:
            low, high, how = target / expect.factor, target * expect.factor, f"within {expect.factor:g}x of"
        else:
            low, high = target * (1 - expect.tolerance), target * (1 + expect.tolerance)
            how = f"within ±{expect.tolerance:.0%} of"
        if claim.paper_text:  # the paper states a range, and the tolerance spans it
            how, theirs = "within", claim.paper_text
        else:
            theirs = format_value(target, unit)
        if low <= value <= high:
            return REPRODUCED, f"{how} the paper's {theirs}"
        miss = (f"outside the paper's {theirs}" if claim.paper_text else
                f"outside {format_value(low, unit)}–{format_value(high, unit)} ({how} the paper's {theirs})")
    else:
        # a bound the paper states, or, where it gives no number, the one the claim holds ours to
        whose = ("the paper's bound" if claim.paper_value is not None
                 else "the bound held to (the paper gives no number)")
        above = expect.at_least is not None
        if (value >= target) if above else (value <= target):
            return REPRODUCED, f"{'at least' if above else 'at most'} {whose}, {format_value(target, unit)}"
        miss = f"{'below' if above else 'above'} {whose}, {format_value(target, unit)}"
    reference = claim.reference()
    if reference is None:  # a share or an N: nothing says which side of it would be a reversal
        return DIFFERENT, f"{miss} (no value of 'no effect' to tell a reversal from a difference)"
    if target == reference:
        return CONTRADICTED, f"{miss}: the paper finds no effect ({format_value(reference, unit)}), ours has one"
    if (value - reference) * (target - reference) > 0:
        return DIFFERENT, miss
    side = "above" if value > reference else "below" if value < reference else "at"
    return CONTRADICTED, f"{miss}, and {side} {format_value(reference, unit)}, the other side from the paper"


def evaluate(claims: Iterable[tuple[str, Claim]], results: Results) -> list[ClaimResult]:
    """Each ``(experiment, claim)`` judged on ``results`` (experiment -> its table or None)."""
    out = []
    for experiment, claim in claims:
        try:
            out.append(_judged(experiment, claim, results))
        except ClaimError as err:
            raise ClaimError(f"claim {claim.id} of {experiment}'s manifest: {err}; fix its query in the manifest") \
                from err
    return out


def _judged(experiment: str, claim: Claim, results: Results) -> ClaimResult:
    evidence = tuple(claim.experiments(experiment))
    measured = measure(claim.query, experiment, results)
    if isinstance(measured, Missing):
        hint = "; run its manifest with `rlscope run MANIFEST --scale full`" if "has not run" in measured.reason else ""
        return ClaimResult(experiment, claim, NOT_RUN, None, measured.reason + hint, evidence)
    verdict, why = judge(measured.value, claim)
    if verdict != REPRODUCED:
        explained = [_explanation(text, experiment, results) for text in claim.explain]
        why = f"{why}. " + ("; ".join(explained) if explained else "No measured explanation yet")
    return ClaimResult(experiment, claim, verdict, measured, why, evidence)


def _explanation(explanation, experiment: str, results: Results) -> str:
    measured = measure(explanation.query, experiment, results)
    if isinstance(measured, Missing):
        return explanation.text.replace("{value}", f"(not measured: {measured.reason})")
    value = format_value(measured.value, explanation.unit)
    low, high = format_value(measured.low, explanation.unit), format_value(measured.high, explanation.unit)
    if measured.samples > 1 and low != high:
        value += f" [{low}–{high}]"
    return explanation.text.replace("{value}", value)


def results_in(output_dir: Path) -> Results:
    """The results tables of the experiments in ``output_dir`` (``<experiment>/results.csv``), read
    once each; None for an experiment with no results table. An unreadable table raises
    ResultsError (``rlscope.plot.experiment.read_results``)."""
    cache: dict[str, pd.DataFrame | None] = {}

    def table(experiment: str) -> pd.DataFrame | None:
        if experiment not in cache:
            directory = output_dir / experiment
            if not (directory / RESULTS_FILE).is_file():
                cache[experiment] = None
            else:
                frame = read_results(directory, f"rlscope run configs/{experiment}.yaml")
                cache[experiment] = frame if not frame.empty else None
        return cache[experiment]

    return table

