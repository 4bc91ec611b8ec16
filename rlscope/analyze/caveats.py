"""Caveats: what a process's trace could not record, said on the rows of the tables it falsifies.

Events left out as corrupt (``--drop-corrupt``) make every row of their process too low: all its
rows carry that caveat.

A process profiled with Python 3.11's profile hook cannot see calls into some targets (their
extension modules' ufuncs, nanobind and Cython callables: ``rlscope.collect.unseen``): the time
of those calls is counted as Python and the calls as no transition. Its Python rows, the rows of
those targets' layers and their transitions carry the caveat in a ``caveat`` column ("" on
every other row, and for traces that recorded no such field).

Where correction (``rlscope.calibrate.correct``) would remove more of an operation's layer than
was measured, even at the low end of the removal's 95% interval, the calibration's costs do not
fit the workload: the rows of that layer carry ``OVERCORRECTED``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from rlscope.collect.unseen import UNSEEN_CALLS

__all__ = ["CAVEAT", "OVERCORRECTED", "unseen_calls_caveat", "dropped_events_caveat", "add_caveat", "mark_rows",
           "markers", "marked_groups"]

CAVEAT = "caveat"
_LAYER = {"backend": "Backend", "simulator": "Simulator"}
OVERCORRECTED = ("calibration removes more than was measured, beyond its 95% interval: its costs are overestimated "
                 "for this workload (corrected to 0 here, excess_ns says by how much)")


def unseen_calls_caveat(meta: Mapping[str, Any]) -> tuple[str, set[str], set[str]]:
    """(caveat, CPU layers and transitions it concerns) for a process whose meta.json lists
    targets whose calls went unseen; ("", empty, empty) otherwise."""
    unseen = meta.get(UNSEEN_CALLS) or {}
    if not unseen:
        return "", set(), set()
    layers = {_LAYER.get(str(entry.get("category")), "Backend") for entry in unseen.values()}
    names = ", ".join(unseen)
    caveat = (f"Python {meta.get('python', '3.11')} does not see calls into {names} (nanobind, ufunc and Cython "
              f"callables): their time counts as Python, and they count no Python->{'/'.join(sorted(layers))} "
              f"transitions; Python >= 3.12 sees them")
    return caveat, {"Python", *layers}, {f"Python->{layer}" for layer in layers}


def dropped_events_caveat(dropped_events: int) -> str:
    """The caveat of a process whose trace lost ``dropped_events`` to corruption (``--drop-corrupt``)."""
    if not dropped_events:
        return ""
    return (f"{dropped_events:,} of this process's events were in corrupt parts of its trace and are left out "
            f"(rlscope analyze --drop-corrupt): its times and counts are too low")


def add_caveat(frame: pd.DataFrame, caveat: str, rows: Any = None) -> None:
    """Add ``caveat`` to the ``rows`` of ``frame`` (a boolean mask; every row by default), in
    place, after any caveat a row already has; a row that has it already keeps it once."""
    if caveat:
        chosen = [True] * len(frame) if rows is None else list(rows)
        frame[CAVEAT] = [old if not pick or caveat in old else f"{old}; {caveat}" if old else caveat
                         for old, pick in zip(frame[CAVEAT], chosen)]


def mark_rows(breakdown: pd.DataFrame, transitions: pd.DataFrame, meta: Mapping[str, Any],
              iterations: Mapping[str, int]) -> pd.DataFrame:
    """Add the ``caveat`` column to one process's breakdown (in place) and transitions; the
    transitions, where an operation counted none of the transitions the caveat concerns, with a
    row of count 0 that carries it (``iterations``: per phase). Returns the transitions."""
    caveat, layers, kinds = unseen_calls_caveat(meta)
    breakdown[CAVEAT] = np.where(breakdown["cpu"].isin(layers), caveat, "") if caveat else ""
    if caveat:
        keys = ["process", "thread", "phase", "operation", "transition"]
        wanted = breakdown[keys[:-1]].drop_duplicates().merge(pd.DataFrame({"transition": sorted(kinds)}), how="cross")
        found = wanted.merge(transitions[keys].drop_duplicates(), how="left", indicator=True)
        zeros = found[found["_merge"] == "left_only"][keys].reset_index(drop=True)
        if len(zeros):
            zeros["count"] = 0
            zeros["iterations"] = zeros["phase"].map(lambda phase: iterations.get(phase, 0)).astype(int)
            zeros["per_iteration"] = np.where(zeros["iterations"] > 0, 0.0, np.nan)
            transitions = pd.concat([transitions, zeros[transitions.columns]], ignore_index=True)
    transitions[CAVEAT] = np.where(transitions["transition"].isin(kinds), caveat, "") if caveat else ""
    return transitions


def markers(*frames: pd.DataFrame) -> dict[str, str]:
    """A marker per distinct caveat on the rows of ``frames``: "*", "**", ... in order of appearance."""
    texts = [t for f in frames if CAVEAT in f for t in f[CAVEAT].unique() if t]
    return {text: "*" * (i + 1) for i, text in enumerate(dict.fromkeys(texts))}


def marked_groups(frame: pd.DataFrame, keys: list[str], marks: Mapping[str, str]) -> dict[tuple, str]:
    """The marker of each group of ``frame``'s rows (by ``keys``) that holds a caveat."""
    if CAVEAT not in frame:
        return {}
    marked = frame[frame[CAVEAT].astype(bool)]
    groups = marked.groupby(keys, sort=False)[CAVEAT].first()
    return {key if isinstance(key, tuple) else (key,): marks[text] for key, text in groups.items()}
