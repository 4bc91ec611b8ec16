"""A paper's claim as a manifest states it: what the paper says, the query over our results
that measures the same quantity, and what counts as reproduced.

A claim lives in the manifest of the experiment whose results answer it (``claims:``); its
query may also read another experiment's results (``experiment:``), e.g. an explanation that
counts kernels in the transitions experiment. Queries are small and declarative on purpose: a
reader checks a claim by reading four lines of YAML, not a function.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr,
                      StringConstraints, model_validator)

__all__ = ["Claim", "Explanation", "Expect", "Rows", "Query", "RatioQuery", "ValueQuery", "PlateauQuery",
           "SpreadQuery", "PAPERS", "UNITS"]

PAPERS = {
    "datacollection": "Optimizing Data Collection in Deep RL",
    "rlscope": "RL-Scope",
}
# How a claim's numbers are written: "x" a ratio, "percent" a share (0.38 -> 38%), "N" a number
# of environments (2^k), "seconds" a time (written in µs or ms where smaller), "count" and
# "samples/s" plain numbers.
UNITS = ("x", "percent", "N", "count", "samples/s", "seconds")

Scalar = Union[StrictBool, StrictInt, StrictFloat, StrictStr]
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][\w]*$")]
Number = Union[StrictInt, StrictFloat]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Rows(_Model):
    """Some rows of one experiment's ``results.csv`` (status ok only), and the number they give per
    repetition: ``metric`` (divided by the row's ``divide_by`` column, if given: e.g. kernels per
    iteration over the steps per iteration) of the rows that match ``where``, summed per value of
    ``sum_by`` if given, combined by ``combine`` ("one": the selection must leave exactly one row
    per repetition and ``across`` value; "mean" with ``sum_by: algorithm``: the mean over
    algorithms of each one's total)."""

    experiment: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")] | None = None
    where: dict[Name, Scalar | list[Scalar]] = {}
    metric: Name
    divide_by: Name | None = None
    absolute: StrictBool = False  # the metric's size, whatever its sign (an error in either direction)
    sum_by: Name | None = None  # sum the rows of each value of this column first (one algorithm's layers)
    combine: Literal["one", "sum", "max", "min", "median", "mean"] = "one"


def _grid_column(name: str | None) -> str | None:
    if name in ("session", "repetition"):
        raise ValueError(f"{name!r} is how runs are told apart, not a grid column to go across or along")
    return name


GridColumn = Annotated[Name, AfterValidator(_grid_column)]


class _Query(_Model):
    # A column left free: one value per its value, reduced by across_reduce ("max": a claim that
    # holds for every value, e.g. "at most 5% on all simulators", is judged on the largest).
    across: GridColumn | None = None
    across_reduce: Literal["median", "max", "min"] = "median"


class RatioQuery(_Query):
    """``numerator`` over ``denominator``, repetition by repetition where both sides have them."""

    kind: Literal["ratio"]
    numerator: Rows
    denominator: Rows


class ValueQuery(_Query):
    """The rows' number itself (a share, a count per step, a throughput)."""

    kind: Literal["value"]
    of: Rows


class PlateauQuery(_Query):
    """The smallest ``along`` (e.g. num_envs) whose value reaches ``1 - within`` of the curve's
    maximum; a curve still rising at its last point has not reached its plateau."""

    kind: Literal["plateau"]
    of: Rows
    along: GridColumn
    within: Annotated[float, Field(gt=0, lt=1)] = 0.1


class SpreadQuery(_Query):
    """How much the value changes along ``along``: its largest over its smallest value (1 = it
    does not depend on ``along``)."""

    kind: Literal["spread"]
    of: Rows
    along: GridColumn


Query = Annotated[Union[RatioQuery, ValueQuery, PlateauQuery, SpreadQuery], Field(discriminator="kind")]


class Expect(_Model):
    """What counts as reproduced: ``about`` the paper's value (within ``tolerance``, relative, or
    within a ``factor`` either way), or a bound (``at_least``/``at_most``). A miss on the
    same side of ``reference`` (the value of "no effect": 1 for a ratio) as the paper's value is
    "same direction, different size"; on the other side, or any effect where the paper claims
    none (its value equals ``reference``), "contradicted". Without a reference every miss is
    "same direction, different size"."""

    about: Number | None = None
    tolerance: Annotated[float, Field(gt=0)] = 0.25
    factor: Annotated[float, Field(gt=1)] | None = None
    at_least: Number | None = None
    at_most: Number | None = None
    reference: Number | None = None

    @model_validator(mode="after")
    def _one_target(self) -> "Expect":
        given = [name for name in ("about", "at_least", "at_most") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of about, at_least, at_most (got {', '.join(given) or 'none'})")
        return self

    @property
    def target(self) -> float:
        """The paper's side of the comparison: the value or the bound."""
        return float(next(v for v in (self.about, self.at_least, self.at_most) if v is not None))


class Explanation(_Model):
    """A measured quantity that explains a difference: ``text`` with ``{value}`` where the
    measured number goes (written in ``unit``)."""

    text: Annotated[str, StringConstraints(min_length=1)]
    query: Query
    unit: Literal[UNITS] = "count"  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _has_value(self) -> "Explanation":
        if "{value}" not in self.text:
            raise ValueError("an explanation's text must say where its measured number goes: '{value}'")
        return self


class Claim(_Model):
    """One claim of one paper, and how our results answer it."""

    id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][\w.-]*$")]
    paper: Literal[tuple(PAPERS)]  # type: ignore[valid-type]
    figure: Annotated[str, StringConstraints(min_length=1)]
    text: Annotated[str, StringConstraints(min_length=1)]
    paper_value: Number | None = None  # None: the paper states a bound or a shape, not a number
    paper_text: Annotated[str, StringConstraints(min_length=1)] | None = None  # what the paper says, where a
    # number would misquote it (a range such as "1.9-4.8x": ``expect`` then spans the range)
    unit: Literal[UNITS] = "x"  # type: ignore[valid-type]
    query: Query
    expect: Expect
    explain: list[Explanation] = []

    def reference(self) -> float | None:
        """The value of "no effect" for this claim (``Expect.reference``; 1 for ratios and spreads)."""
        if self.expect.reference is not None:
            return float(self.expect.reference)
        return 1.0 if isinstance(self.query, (RatioQuery, SpreadQuery)) else None

    def experiments(self, own: str) -> list[str]:
        """The experiments whose results this claim and its explanations read (``own``: the
        manifest's experiment, the default)."""
        names: list[str] = []
        for query in [self.query, *(e.query for e in self.explain)]:
            for rows in _rows(query):
                name = rows.experiment or own
                if name not in names:
                    names.append(name)
        return names


def _rows(query: Any) -> list[Rows]:
    if isinstance(query, RatioQuery):
        return [query.numerator, query.denominator]
    return [query.of]
