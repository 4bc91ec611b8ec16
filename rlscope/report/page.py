"""One static HTML page for an output directory of `rlscope run`: every experiment's figures, its
key numbers, its failed and skipped runs with their reasons and logs, and the environment.

The page is self-contained (figures are embedded as PNG data), so it can be mailed or attached
to a paper's artifact; links to PDFs and run logs are relative, and work beside the output
directory. It reads only what the runs and ``rlscope plot`` wrote: it recomputes nothing.
"""

from __future__ import annotations

import base64
import html
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rlscope.analyze.caveats import markers
from rlscope.claims.render import as_html
from rlscope.claims.verdict import ClaimResult
from rlscope.errors import ResultsError
from rlscope.files import last_line, read_json, write_atomic
from rlscope.plot.experiment import EXPERIMENT_FILE, RESULTS_FILE, RUN_COLUMNS, read_experiment, read_results
from rlscope.plot.render import FIGURES_STATUS, artifacts_name
from rlscope.report.environment import environment

__all__ = ["write_report", "REPORT_FILE", "MAX_KEY_COLUMNS"]

REPORT_FILE = "report.html"
MAX_KEY_COLUMNS = 8  # numbers per run in an experiment's table: more would not fit a page
_NOT_NUMBERS = {"repetition", "run_seconds"}
# Counts the figures the browser could draw, so a reader (and the tests) can tell a broken page.
_IMAGE_CHECK = ("<script>addEventListener('load', () => { const all = [...document.images]; "
                "document.body.dataset.imagesLoaded = all.filter(i => i.complete && i.naturalWidth > 0).length "
                "+ '/' + all.length; });</script>")
_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 12px; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #eee; }
.failed { color: #b00; } .skipped { color: #777; } .ok { color: #070; } .caveat { color: #a50; }
section { border-top: 2px solid #ddd; margin-top: 2em; }
"""


@dataclass
class Experiment:
    """One experiment directory, as the page shows it."""

    name: str
    directory: Path
    meta: dict[str, Any]
    results: pd.DataFrame | None
    runs: pd.DataFrame  # one row per run: run_id, status, reason (unfinished runs too)
    figures: list[Path] = field(default_factory=list)
    figure_failures: dict[str, str] = field(default_factory=dict)  # figure -> why it was not drawn
    problem: str = ""  # why its experiment.json or results.csv could not be read, if so


def write_report(output_dir: Path, repo: Path | None = None, claims: Sequence[ClaimResult] = ()) -> Path:
    """Write ``output_dir/report.html``; its path. ``repo``: the checkout whose commit the page
    names (default: the folder holding ``output_dir``). ``claims``: the papers' claims judged on
    these results (``rlscope.claims.verdict.evaluate``), shown after the environment and the
    contents, before the experiments. A directory holding no experiment is a ``ResultsError``
    that says what to run first."""
    experiments = _experiments(output_dir)
    if not experiments:
        raise ResultsError(f"{output_dir}: holds no experiment (no */experiment.json); "
                           f"run `rlscope run configs/<manifest>.yaml --output {output_dir}` first")
    body = [f"<h1>rlscope results</h1><p>{_e(str(output_dir.resolve()))}, written "
            f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}</p>", _environment_table(repo or output_dir.resolve().parent),
            _contents(experiments)]
    if claims:
        body.append(f"<section id='claims'><h2>The papers' claims</h2>{as_html(claims)}</section>")
    body += [_section(e, output_dir) for e in experiments]
    page = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>rlscope results</title>"
            f"<style>{_STYLE}</style></head><body>{''.join(body)}{_IMAGE_CHECK}</body></html>\n")
    path = output_dir / REPORT_FILE
    write_atomic(path, page)
    return path


def _experiments(output_dir: Path) -> list[Experiment]:
    """Every experiment directory under ``output_dir``; one whose files cannot be read is still
    listed, with the reason, so that the page shows it rather than failing for all of them."""
    found = []
    for meta_path in sorted(output_dir.glob(f"*/{EXPERIMENT_FILE}")):
        directory = meta_path.parent
        empty = pd.DataFrame(columns=list(RUN_COLUMNS))
        try:
            meta = read_experiment(directory)
        except ResultsError as err:
            found.append(Experiment(directory.name, directory, {}, None, empty, problem=str(err)))
            continue
        name = meta["experiment"]
        results, problem = None, ""
        if (directory / RESULTS_FILE).exists():
            try:
                results = read_results(directory, f"rlscope run {meta['path']}")
            except ResultsError as err:
                problem = str(err)
        drawn = output_dir / "artifacts" / artifacts_name(name)
        figures = [drawn / f"{figure}.png" for figure in meta["figures"] if (drawn / f"{figure}.png").exists()]
        status = read_json(drawn / FIGURES_STATUS)
        failed = {str(k): str(v.get("reason", "")) for k, v in status.items()
                  if isinstance(v, dict) and v.get("status") == "failed"} if isinstance(status, dict) else {}
        runs = pd.concat([_runs(results), _unfinished(directory, meta, results)], ignore_index=True)
        found.append(Experiment(name, directory, meta, results, runs, figures, failed, problem))
    return found


def _e(text: Any) -> str:
    return html.escape(str(text))


def _environment_table(repo: Path | None) -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in environment(repo).items())
    return f"<h2>Environment</h2><p>where this page was written (the runs' own device and Python are in " \
           f"their tables)</p><table>{rows}</table>"


def _unfinished(directory: Path, meta: dict[str, Any], results: pd.DataFrame | None) -> pd.DataFrame:
    """Runs of this scale that left nothing in results.csv (failed before any repetition finished,
    or killed): ``failed``, with their log's last line as the reason."""
    listed = set() if results is None or results.empty else set(results["run_id"].astype(str))
    rows = []
    for run_dir in sorted((directory / "runs").glob("*/")):
        config = read_json(run_dir / "config.json") or {}
        if run_dir.name in listed or (run_dir / "DONE").exists() or config.get("scale") != meta.get("scale"):
            continue
        rows.append({"run_id": run_dir.name, "status": "failed",
                     "reason": f"did not finish: {last_line(run_dir / 'log.txt')}"})
    return pd.DataFrame(rows, columns=["run_id", "status", "reason"])


def _runs(results: pd.DataFrame | None) -> pd.DataFrame:
    """One row per run in results.csv: its id, status and reason."""
    if results is None or results.empty:
        return pd.DataFrame(columns=["run_id", "status", "reason"])
    return results.drop_duplicates("run_id")[["run_id", "status", "reason"]].astype(object).fillna("")


def _counts(runs: pd.DataFrame) -> str:
    if runs.empty:
        return "no finished runs yet"
    counts = runs["status"].value_counts()
    return ", ".join(f"<span class='{_e(s)}'>{n} {_e(s)}</span>" for s, n in counts.items())


def _contents(experiments: list[Experiment]) -> str:
    items = "".join(f"<li><a href='#{_e(e.name)}'>{_e(e.name)}</a>: {_e(e.meta.get('description', ''))} "
                    f"({_e(e.meta.get('scale', ''))} scale): {_counts(e.runs)}</li>" for e in experiments)
    return f"<h2>Experiments</h2><ul>{items}</ul>"


def _section(experiment: Experiment, output_dir: Path) -> str:
    meta = experiment.meta
    parts = [f"<section id='{_e(experiment.name)}'><h2>{_e(experiment.name)}</h2>",
             f"<p>{_e(meta.get('description', ''))}; {_e(meta.get('scale', ''))} scale; manifest "
             f"<code>{_e(meta.get('path', ''))}</code>; runs: {_counts(experiment.runs)}</p>"]
    if experiment.problem:
        parts.append(f"<p class='failed'>{_e(experiment.problem)}</p>")
    parts += [_figure(path, output_dir) for path in experiment.figures]
    parts += [f"<p class='failed'>Figure {_e(name)} not drawn: {_e(reason)}</p>"
              for name, reason in experiment.figure_failures.items()]
    if not experiment.figures and not experiment.figure_failures:
        parts.append(f"<p>No figures: draw them with <code>rlscope plot {_e(experiment.directory)}</code>.</p>")
    parts.append(_key_numbers(experiment))
    parts.append(_not_ok(experiment, output_dir))
    return "".join(parts) + "</section>"


def _figure(path: Path, output_dir: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    pdf = path.with_suffix(".pdf")
    link = f" (<a href='{_e(pdf.relative_to(output_dir))}'>PDF</a>)" if pdf.exists() else ""
    return (f"<figure><img src='data:image/png;base64,{data}' alt='{_e(path.stem)}'>"
            f"<figcaption>{_e(path.stem)}{link}</figcaption></figure>")


def _key_numbers(experiment: Experiment) -> str:
    """Per finished run: its grid values and the run-level numbers it returned (mean over
    repetitions), the first ``MAX_KEY_COLUMNS`` of them."""
    results = experiment.results
    if results is None or results.empty or not (results["status"] == "ok").any():
        return ""
    ok = results[results["status"] == "ok"]
    grid = [c for c in experiment.meta.get("grid", {}) if c in ok]
    numeric = [c for c in ok.select_dtypes("number").columns if c not in grid and c not in _NOT_NUMBERS]
    # Run-level numbers hold one value per run and repetition; per-row tables (shares, counts) vary.
    keys = ["run_id", "repetition"] if "repetition" in ok else ["run_id"]
    constant = ok.groupby(keys)[numeric].nunique(dropna=False).le(1).all() if numeric else pd.Series(dtype=bool)
    columns = [c for c in numeric if constant.get(c, False) and ok[c].notna().any()][:MAX_KEY_COLUMNS]
    table = ok.drop_duplicates(keys).groupby("run_id", sort=False).agg(
        {**{c: "first" for c in grid}, **{c: "mean" for c in columns}})
    marks, notes = _caveats(ok)
    head = "".join(f"<th>{_e(c)}</th>" for c in grid + columns) + ("<th>caveat</th>" if marks else "")
    rows = "".join("<tr>" + "".join(f"<td>{_e(row[c])}</td>" for c in grid)
                   + "".join(f"<td class='n'>{_number(row[c])}</td>" for c in columns)
                   + (f"<td class='caveat'>{_e(marks.get(run_id, ''))}</td>" if marks else "") + "</tr>"
                   for run_id, row in table.iterrows())
    return f"<h3>Key numbers per run</h3><table><tr>{head}</tr>{rows}</table>{notes}"


def _caveats(ok: pd.DataFrame) -> tuple[dict[Any, str], str]:
    """The runs whose results carry a caveat (the analysis's ``caveat`` column, e.g. calls that
    Python 3.11 could not see): a marker per run, and the paragraphs that explain the markers."""
    if "caveat" not in ok:
        return {}, ""
    caveats = ok["caveat"].map(lambda value: value if isinstance(value, str) else "")  # read back as NaN where empty
    marked = ok.assign(caveat=caveats)[caveats != ""]
    symbol = markers(marked)  # the analysis's markers: "*" for the first caveat, "**" for the next...
    marks = {run_id: " ".join(dict.fromkeys(symbol[t] for t in group["caveat"]))
             for run_id, group in marked.groupby("run_id", sort=False)}
    notes = "".join(f"<p class='caveat'>{_e(mark)} {_e(text)}</p>" for text, mark in symbol.items())
    return marks, notes


def _number(value: Any) -> str:
    return "" if pd.isna(value) else f"{value:.4g}"


def _not_ok(experiment: Experiment, output_dir: Path) -> str:
    runs = experiment.runs[experiment.runs["status"] != "ok"]
    if runs.empty:
        return ""
    rows = []
    for run in runs.itertuples(index=False):
        log = experiment.directory / "runs" / str(run.run_id) / "log.txt"
        link = f"<a href='{_e(log.relative_to(output_dir))}'>log</a>" if log.exists() else ""
        rows.append(f"<tr><td>{_e(run.run_id)}</td><td class='{_e(run.status)}'>{_e(run.status)}</td>"
                    f"<td>{_e(run.reason)}</td><td>{link}</td></tr>")
    return (f"<h3>Runs that did not finish ok</h3><table><tr><th>run</th><th>status</th><th>reason</th>"
            f"<th>log</th></tr>{''.join(rows)}</table>")
