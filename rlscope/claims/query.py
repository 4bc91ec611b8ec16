"""A claim's query over results tables: the number it gives, with its spread, or why there is none.

Every number is computed per repetition (results' ``repetition`` column) and per value of the
query's ``across`` column; what is reported is the median over ``across`` of the median over
repetitions, and the spread is the smallest and largest of all of them. Only rows whose status
is ok count: a run that failed or ran out of memory is not a measurement.

A table that holds runs of several sessions (a ``session`` column: another day or machine) is
never compared across them: a ratio takes both sides from the sessions they share (none shared
is "not run"), and a plateau reads the curve of the session that ran most of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from rlscope.claims.units import format_value
from rlscope.claims.schema import PlateauQuery, RatioQuery, Rows, SpreadQuery, ValueQuery
from rlscope.errors import ClaimError

__all__ = ["Measured", "Missing", "Results", "measure"]

# experiment name -> its results table, or None where that experiment has not run
Results = Callable[[str], "pd.DataFrame | None"]
_REP = "repetition"
_SESSION = "session"


@dataclasses.dataclass(frozen=True)
class Measured:
    """A query's answer: ``value`` and the smallest and largest per repetition (and ``across``)."""

    value: float
    low: float   # the smallest and largest of the same number taken repetition by repetition
    high: float
    samples: int  # repetitions behind it (1: no spread to show)


@dataclasses.dataclass(frozen=True)
class Missing:
    """Why a query has no answer (the claim is then "not run")."""

    reason: str


def measure(query: Any, own: str, results: Results) -> Measured | Missing:
    """The answer to ``query`` (a ``rlscope.claims.schema`` query) over ``results``; ``own`` is the
    experiment a ``Rows`` without ``experiment`` reads. A column the results lack is "not run"
    (the runs did not measure it); ClaimError where the query is wrong for the table ("one"
    matches several rows)."""
    free = [query.across] if query.across else []
    if isinstance(query, RatioQuery):
        num = _side(query.numerator, own, results, free)
        den = _side(query.denominator, own, results, free)
        if isinstance(num, Missing):
            return num
        if isinstance(den, Missing):
            return den
        values = _ratio(num, den, free)
        if values.empty and not num.empty and not den.empty:
            shared = f"{query.across} value or " if query.across else ""
            return Missing(f"numerator and denominator share no {shared}session (they were measured apart)")
        return _summary(values, free, query.across_reduce)
    if isinstance(query, ValueQuery):
        side = _side(query.of, own, results, free)
        return side if isinstance(side, Missing) else _summary(side, free, query.across_reduce)
    if isinstance(query, PlateauQuery):
        return _plateau(query, own, results, free)
    if isinstance(query, SpreadQuery):
        side = _side(query.of, own, results, [*free, query.along])
        if isinstance(side, Missing):
            return side
        keys = [c for c in side.columns if c not in ("value", query.along)]
        grouped = side.groupby(keys, dropna=False) if keys else [((), side)]
        rows = []
        for key, curve in grouped:
            if curve[query.along].nunique() < 2:
                continue
            if (curve["value"] <= 0).any():
                return Missing(f"{query.of.metric} is not above zero everywhere along {query.along}: a spread "
                               f"(largest over smallest) needs positive values")
            key = key if isinstance(key, tuple) else (key,)
            rows.append({**dict(zip(keys, key)), "value": curve["value"].max() / curve["value"].min()})
        if not rows:
            return Missing(f"fewer than two {query.along} values were run")
        return _summary(pd.DataFrame(rows), free, query.across_reduce)
    raise TypeError(f"not a claim query: {query!r}")


def _describe(rows: Rows, own: str) -> str:
    where = ", ".join(f"{k}={'|'.join(map(str, v)) if isinstance(v, list) else v}" for k, v in rows.where.items())
    return f"{rows.experiment or own}" + (f" ({where})" if where else "")


def _select(rows: Rows, own: str, results: Results) -> tuple[pd.DataFrame, pd.DataFrame] | Missing:
    """The rows matching ``rows.where``: those that finished ok, and all of them."""
    name = rows.experiment or own
    table = results(name)
    if table is None:
        return Missing(f"{name} has not run")
    for column in [*rows.where, rows.metric, *([rows.divide_by] if rows.divide_by else [])]:
        if column not in table.columns:  # e.g. a GPU measure of runs made on a CPU, or no run finished
            return Missing(f"{name}'s results have no column {column!r}: its runs did not measure it")
    mask = pd.Series(True, index=table.index)
    for column, wanted in rows.where.items():
        mask &= _isin(table[column], wanted if isinstance(wanted, list) else [wanted])
    every = table[mask]
    ok = every[every["status"] == "ok"] if "status" in every.columns else every
    return ok, every


def _isin(column: pd.Series, wanted: list[Any]) -> pd.Series:
    """Whether each cell is one of ``wanted``: 1 matches 1.0, "1" matches nothing numeric, true
    matches only a boolean (a CSV reads booleans back as booleans)."""
    out = pd.Series(False, index=column.index)
    for value in wanted:
        if isinstance(value, bool):
            out |= column.map(lambda cell, v=value: isinstance(cell, (bool, np.bool_)) and bool(cell) == v)
        elif isinstance(value, (int, float)):
            numeric = pd.to_numeric(column, errors="coerce")
            out |= np.isclose(numeric, value, rtol=1e-12, atol=0) & numeric.notna()
        else:
            out |= column.astype(str) == value
    return out


def _side(rows: Rows, own: str, results: Results, free: list[str]) -> pd.DataFrame | Missing:
    """Per repetition and ``free`` value, the rows' number: a frame of those columns and ``value``."""
    selected = _select(rows, own, results)
    if isinstance(selected, Missing):
        return selected
    ok, every = selected
    if ok.empty:
        failed = every["status"].value_counts().to_dict() if "status" in every.columns and not every.empty else {}
        how = f" ({', '.join(f'{n} {s}' for s, n in failed.items())})" if failed else ""
        return Missing(f"no finished run of {_describe(rows, own)}{how}")
    for column in free:
        if column not in ok.columns:
            raise ClaimError(f"{rows.experiment or own}'s results have no column {column!r} (a claim's query "
                             f"goes across or along it)")
    keys = [c for c in (_SESSION, _REP) if c in ok.columns] + free
    values = pd.to_numeric(ok[rows.metric], errors="coerce")
    if rows.divide_by:
        values = values / pd.to_numeric(ok[rows.divide_by], errors="coerce")
    if rows.absolute:
        values = values.abs()
    if values.isna().any():
        return Missing(f"{_describe(rows, own)} has no number in {rows.metric!r} for some runs")
    frame = ok[keys].assign(value=values)
    if not keys:
        frame = frame.assign(_all=0)
        keys = ["_all"]
    if rows.sum_by:  # first the rows of each group summed (e.g. one algorithm's layers), then combined
        if rows.sum_by not in ok.columns:
            raise ClaimError(f"{rows.experiment or own}'s results have no column {rows.sum_by!r} (a claim's "
                             f"query sums by it)")
        frame = frame.assign(_group=ok[rows.sum_by]).groupby([*keys, "_group"], dropna=False)["value"].sum()
        frame = frame.reset_index().drop(columns=["_group"])
    grouped = frame.groupby(keys, dropna=False)["value"]
    if rows.combine == "one":
        sizes = grouped.size()
        if (sizes > 1).any():
            raise ClaimError(f"a claim's query on {_describe(rows, own)} matches {int(sizes.max())} rows per "
                             f"repetition where it needs one; narrow its 'where' or set 'combine' "
                             f"(sum, max, min, median, mean)")
        out = grouped.first()
    else:
        out = grouped.agg(rows.combine)
    return out.reset_index().drop(columns=["_all"], errors="ignore")


def _ratio(num: pd.DataFrame, den: pd.DataFrame, free: list[str]) -> pd.DataFrame:
    """numerator/denominator per repetition where both sides ran the same repetitions, else of
    the medians over repetitions (two experiments' repetitions are not paired)."""
    if _SESSION in num.columns and _SESSION in den.columns:
        shared = set(num[_SESSION]) & set(den[_SESSION])
        num, den = num[num[_SESSION].isin(shared)], den[den[_SESSION].isin(shared)]
    elif _SESSION in num.columns or _SESSION in den.columns:  # one table of several sessions, one of one
        num, den = num.drop(columns=[_SESSION], errors="ignore"), den.drop(columns=[_SESSION], errors="ignore")
    paired = _REP in num.columns and _REP in den.columns and set(num[_REP]) == set(den[_REP])
    if not paired:
        by = [_SESSION, *free] if _SESSION in num.columns and _SESSION in den.columns else free
        num, den = (_median_over_repetitions(s, by) for s in (num, den))
    keys = [c for c in num.columns if c != "value"]
    if keys:
        both = num.merge(den, on=keys, suffixes=("_num", "_den"))
    else:
        both = pd.DataFrame({"value_num": num["value"].to_numpy()[:1], "value_den": den["value"].to_numpy()[:1]})
    both["value"] = both["value_num"] / both["value_den"]
    return both.drop(columns=["value_num", "value_den"])


def _median_over_repetitions(side: pd.DataFrame, free: list[str]) -> pd.DataFrame:
    if not free:
        return pd.DataFrame({"value": [side["value"].median()]})
    return side.groupby(free, dropna=False)["value"].median().reset_index()


def _summary(values: pd.DataFrame, free: list[str], across_reduce: str = "median") -> Measured | Missing:
    """``across_reduce`` over ``free`` of the median over repetitions; its spread is the same
    reduction taken repetition by repetition (the smallest and largest of those). A value that is
    not finite (a zero denominator) is no measurement."""
    finite = values[np.isfinite(values["value"].astype(float))]
    if finite.empty:
        return Missing("no finite value: a denominator is zero or a measurement is missing")
    value = float(_median_over_repetitions(finite, free)["value"].agg(across_reduce))
    runs = [c for c in (_SESSION, _REP) if c in finite.columns]
    if not runs:
        return Measured(value=value, low=value, high=value, samples=1)
    per_run = finite.groupby(runs, dropna=False)["value"].agg(across_reduce if free else "median")
    return Measured(value=value, low=float(per_run.min()), high=float(per_run.max()), samples=len(per_run))


def _plateau(query: PlateauQuery, own: str, results: Results, free: list[str]) -> Measured | Missing:
    side = _side(query.of, own, results, [*free, query.along])
    if isinstance(side, Missing):
        return side
    if _SESSION in side.columns:  # the session that ran most of the curve
        points = side.groupby(_SESSION)[query.along].nunique()
        side = side[side[_SESSION] == points.idxmax()]
    curve = side.groupby([*free, query.along], dropna=False)["value"].median().reset_index()
    groups = curve.groupby(free, dropna=False) if free else [((), curve)]
    plateaus = []
    for _, points in groups:
        points = points.sort_values(query.along)
        if len(points) < 2:
            return Missing(f"only one {query.along} value was run")
        reached = points[points["value"] >= (1 - query.within) * points["value"].max()]
        first = reached[query.along].iloc[0]
        last = points[query.along].iloc[-1]
        if first == last:
            before = points["value"].iloc[-2]
            why = _beyond(query, own, results, last)
            return Missing(f"still rising at the last {query.along} in the results, {format_value(last, 'N')} "
                           f"({points['value'].iloc[-1] / before:.2g}x the point before){why}")
        plateaus.append(float(first))
    value = float(pd.Series(plateaus).agg(query.across_reduce))
    per_run = _plateaus_per_run(side, free, query)
    if not per_run:
        return Measured(value=value, low=value, high=value, samples=1)
    return Measured(value=value, low=min(per_run), high=max(per_run), samples=len(per_run))


def _plateaus_per_run(side: pd.DataFrame, free: list[str], query: PlateauQuery) -> list[float]:
    """The plateau read repetition by repetition (reduced over ``free`` as the claim is), for its
    spread; a repetition whose curve has not reached it counts as its last point."""
    if _REP not in side.columns:
        return []
    out = []
    for _, run in side.groupby(_REP):
        found = []
        for _, points in (run.groupby(free, dropna=False) if free else [((), run)]):
            points = points.sort_values(query.along)
            reached = points[points["value"] >= (1 - query.within) * points["value"].max()]
            found.append(float(reached[query.along].iloc[0]))
        out.append(float(pd.Series(found).agg(query.across_reduce)))
    return out


def _beyond(query: PlateauQuery, own: str, results: Results, last: float) -> str:
    """Why the curve stops where it does, if runs further along it did not finish."""
    selected = _select(query.of, own, results)
    if isinstance(selected, Missing):
        return ""
    _, every = selected
    if "status" not in every.columns or query.along not in every.columns:
        return ""
    further = every[(pd.to_numeric(every[query.along], errors="coerce") > last) & (every["status"] != "ok")]
    if further.empty:
        return "; nothing further along was run (the manifest's grid or its exclusions stop there)"
    row = further.sort_values(query.along).iloc[0]
    reason = str(row.get("reason", "")).strip()
    reason = "" if reason in ("", "nan") else f": {reason}"
    return f"; {format_value(float(row[query.along]), 'N')} did not finish ({row['status']}{reason})"[:200]
