"""Curves of a results table that holds runs of several sessions (machines), never averaged.

A grid too long for one session is completed in others, on other hosts (``rlscope run`` merges
them; the ``session`` column says which run made each row). CPU-bound rates differ between hosts,
so a figure must not average two hosts' runs at one point, nor join one host's points to
another's as if they were one curve. Each curve takes its points from the session that ran most
of its x values (as ``rlscope claims`` reads a plateau); the other sessions' points are drawn
apart: hollow markers, each session's joined by a dotted line, named in the legend. Where the
curves' own sessions differ, each curve's legend label names its session.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

__all__ = ["split_sessions", "draw_other_sessions", "session_tag", "NO_SESSION"]

NO_SESSION = "(no session recorded)"


def session_tag(session: str) -> str:
    """A session's short name for a legend: its host (``host A``) where it names one."""
    found = re.search(r"host [A-Za-z0-9]+", session)
    return found.group(0) if found else session


def split_sessions(rows: pd.DataFrame, curve: str, x: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(main, other)``: per value of ``curve``, the rows of the session that ran the most of its
    ``x`` values (ties: the session named first), and the rest. A table without a ``session``
    column, or with one session, is all main; rows with no session are a session of their own."""
    if "session" not in rows:
        return rows, rows.iloc[0:0]
    rows = rows.assign(session=rows["session"].fillna(NO_SESSION).astype(str))
    if rows["session"].nunique() <= 1:
        return rows, rows.iloc[0:0]
    counts = rows.groupby([curve, "session"])[x].nunique().reset_index(name="points")
    counts = counts.sort_values([curve, "points", "session"], ascending=[True, False, True])
    primary = counts.drop_duplicates(curve).set_index(curve)["session"]
    main = rows["session"] == rows[curve].map(primary)
    return rows[main], rows[~main]


def draw_other_sessions(ax: Axes, other: pd.DataFrame, curve: str, x: str, y: str, colors: Mapping[str, str],
                        markers: Mapping[str, str] | None = None) -> None:
    """Draw ``other`` (from ``split_sessions``): per curve and session, the mean over repetitions
    at each x as hollow markers (``markers[curve]``, default a circle) in the curve's colour,
    joined by a dotted line; a legend entry names the sessions. Nothing for an empty frame."""
    if other.empty:
        return
    for (name, _), rows in other.groupby([curve, "session"], sort=True):
        points = rows.groupby(x)[y].mean().sort_index()
        ax.plot(points.index, points.values, linestyle=":", marker=(markers or {}).get(name, "o"),
                markerfacecolor="none", color=colors.get(name, "#333333"), linewidth=1)
    handles, labels = ax.get_legend_handles_labels()
    sessions = "\n".join(f"  {session}" for session in sorted(other["session"].unique()))
    handles.append(Line2D([], [], linestyle=":", marker="o", markerfacecolor="none", color="#555555"))
    labels.append(f"hollow, dotted: runs of another session,\nnot averaged in:\n{sessions}")
    legend = ax.get_legend()
    title = legend.get_title().get_text() if legend is not None else None
    ax.legend(handles, labels, title=title, fontsize=7, title_fontsize=8)
