"""The tables of docs/results/overhead.md, from the overhead experiment's results in
docs/results/overhead/ (``results.csv`` of ``configs/overhead_correction.yaml`` runs, one file
per run of it):

- ``cpu_quick_*.csv``: ``make artifacts-quick`` on the 2-core CPU machine, one validation each;
- ``cpu_full_*.csv``: ``bench/overhead_suite.sh`` at full scale on that machine;
- ``h100_full_budget*.csv``: ``bench/overhead_suite.sh`` at full scale on lent H100 machines.

Pooled whole-run pairs come from ``experiments/overhead/pooling.py``, as ``bench/pooled_pairs.py``
prints them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from tables_common import RESULTS, markdown_table

OVERHEAD = RESULTS / "overhead"
CPU_QUICK = {"cpu_quick_clean_clone.csv": "fresh clone, quiet", "cpu_quick_clean_clone_final.csv": "fresh clone, quiet",
             "cpu_quick_dev_1.csv": "development tree, quiet", "cpu_quick_dev_2.csv": "development tree, quiet",
             "cpu_quick_busy_machine.csv": "fresh clone, machine busy"}
CPU_QUICK_BUSY = "cpu_quick_busy_machine.csv"
CPU_FULL = "cpu_full_five_pairs.csv"  # all three CPU workloads, 2 repetitions
CPU_FULL_MORE = "cpu_full_gym_six_reps.csv"  # gym_numpy again, 6 repetitions
H100 = ("h100_full_budget.csv", "h100_full_budget_second_night.csv", "h100_full_budget_third_night.csv")
_WORKLOADS = {"gym_numpy": "gym_numpy", "sb3_ppo": "SB3 PPO", "sb3_a2c": "SB3 A2C", "jax_loop": "JAX loop",
              "sb3_ppo_cuda": "SB3 PPO on CUDA"}


@cache
def _pooling() -> Any:
    path = Path(__file__).resolve().parents[1] / "experiments" / "overhead" / "pooling.py"
    spec = importlib.util.spec_from_file_location("overhead_pooling", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(names: Iterable[str]) -> pd.DataFrame:
    """The validations (``status == ok``) of these results files, each row tagged with its file."""
    frames = [pd.read_csv(OVERHEAD / name).assign(file=name) for name in names]
    frame = pd.concat(frames, ignore_index=True)
    return frame[frame["status"] == "ok"]


def _pct(value: float, digits: int = 1) -> str:
    """A signed percentage, with a true minus sign as the page writes it."""
    text = f"{value:+.{digits}f}"
    return ("+" + text[1:] if float(text) == 0 else text.replace("-", "−")) + "%"


def _signed(value: float) -> str:
    text = f"{value:+.1f}"
    return "+0.0" if text == "-0.0" else text.replace("-", "−")


def _range(values: pd.Series, signed: bool = True) -> str:
    """min..max of a column (signed), min-max (unsigned), or one value; "—" where none is known."""
    values = values.dropna()
    if values.empty:
        return "—"
    low, high = values.min(), values.max()
    if not signed:
        return f"{low:.1f}%" if round(low, 1) == round(high, 1) else f"{low:.1f}-{high:.1f}%"
    return _pct(low) if round(low, 1) == round(high, 1) else f"{_signed(low)}..{_pct(high)}"


def _within(values: pd.Series) -> str:
    """A range with how many of its values lie within the target."""
    values = values.dropna()
    if values.empty:
        return "—"
    inside = int((values.abs() <= _pooling().TARGET_PCT).sum())
    return f"{_range(values)} ({inside} of {len(values)} within)"


def _column(rows: pd.DataFrame, name: str) -> pd.Series:
    return rows[name] if name in rows else pd.Series(dtype=float)


def _pooled(rows: pd.DataFrame) -> tuple[str, str]:
    """The pooled median of the validations' whole-run pairs with its 95% interval, and the verdict."""
    pooling = _pooling()
    groups = [pooling.row_pairs(row) for _, row in rows.iterrows()]
    if not any(groups):
        return "—", "—"
    p = pooling.pooled(groups)
    return (f"{_pct(p['median'])} [{_signed(p['low'])}, {_signed(p['high'])}] ({p['pairs']} pairs)",
            pooling.verdict(p))


def summary() -> str:
    """Per machine, scale and workload: the in-process checks' range over validations (how many
    within ±5%) and the whole runs' pooled median with its interval and verdict."""
    quiet = [name for name in CPU_QUICK if name != CPU_QUICK_BUSY]
    groups = [("2-core CPU, quick, quiet machine", quiet), ("2-core CPU, quick, one run beside other work",
                                                              list(CPU_QUICK)),
              ("2-core CPU, full", [CPU_FULL, CPU_FULL_MORE]), ("H100, full", list(H100))]
    out = []
    for label, names in groups:
        data = _read(names)
        for workload in dict.fromkeys(data["workload"]):
            rows = data[data["workload"] == workload]
            pooled, verdict = _pooled(rows)
            out.append([label, _WORKLOADS.get(workload, workload), len(rows),
                        _within(rows["window_corrected_error_pct"]),
                        _within(_column(rows, "session_corrected_error_pct")), pooled, verdict])
    return markdown_table(["machine, scale", "workload", "validations", "windows", "sessions",
                           "whole runs: pooled median [95% interval] (pairs)", "whole runs"], out)


def _pairs(row: pd.Series) -> str:
    pairs = _pooling().row_pairs(row)
    return f"{_pct(row['corrected_error_pct'])} ({', '.join(_signed(p) for p in pairs)})"


def _with_ci(row: pd.Series, prefix: str) -> str:
    value, ci = row.get(f"{prefix}_corrected_error_pct"), row.get(f"{prefix}_corrected_ci95_pct")
    if pd.isna(value):
        return "—"
    return _pct(value) if pd.isna(ci) else f"{_signed(value)} ± {ci:.1f}%"


def cpu_quick() -> str:
    """One row per quick validation: raw and corrected whole-run error (its pairs), noise, from the
    first step, windows and sessions (± their 95% interval), and the experiment's seconds."""
    out = []
    for _, row in _read(CPU_QUICK).iterrows():
        out.append([CPU_QUICK[row["file"]], _pct(row["raw_error_pct"]), _pairs(row), f"{row['noise_pct']:.1f}%",
                    _pct(row["steady_corrected_error_pct"]), _with_ci(row, "window"), _with_ci(row, "session"),
                    f"{row['run_seconds']:.0f}"])
    return markdown_table(["run", "whole: raw", "whole: corrected (pairs)", "noise", "from 1st step", "windows",
                           "sessions", "seconds"], out)


def cpu_full() -> str:
    """Per workload and repetition of the first full run, then the second's repetitions as ranges,
    and the seconds each run's validations took."""
    first, more = _read([CPU_FULL]), _read([CPU_FULL_MORE])
    out = [[_WORKLOADS[r["workload"]], f"{r['repetition']:.0f}", _pct(r["raw_error_pct"]), _pairs(r),
            f"{r['noise_pct']:.1f}%", _pct(r["steady_corrected_error_pct"]), _with_ci(r, "window"),
            _with_ci(r, "session")] for _, r in first.iterrows()]
    for workload in dict.fromkeys(more["workload"]):
        rows = more[more["workload"] == workload]
        reps = rows["repetition"]
        out.append([f"{_WORKLOADS[workload]} ({len(rows)} more)", f"{reps.min():.0f}-{reps.max():.0f}",
                    _range(rows["raw_error_pct"]), _range(rows["corrected_error_pct"]),
                    _range(rows["noise_pct"], signed=False), _range(rows["steady_corrected_error_pct"]),
                    _range(rows["window_corrected_error_pct"]), _range(rows["session_corrected_error_pct"])])
    table = markdown_table(["workload", "rep", "whole: raw", "whole: corrected (pairs)", "noise", "from 1st step",
                            "windows", "sessions"], out)
    minutes = [f"{data['run_seconds'].sum() / 60:.0f} min" for data in (first, more)]
    return table + f"\nThe validations took {minutes[0]} (first run) and {minutes[1]} (second).\n"


def h100() -> str:
    """Per workload over all H100 validations: ranges of each check, how many whole-run pairs a
    validation had, and the windows and sessions with how many lie within ±5%."""
    data = _read(H100)
    out = []
    for workload in dict.fromkeys(data["workload"]):
        rows = data[data["workload"] == workload]
        pairs = rows["whole_run_pairs"]
        out.append([_WORKLOADS[workload], len(rows), f"{pairs.min():.0f}-{pairs.max():.0f}",
                    _range(rows["raw_error_pct"]), _range(rows["corrected_error_pct"]),
                    _range(rows["noise_pct"], signed=False), _range(rows["steady_corrected_error_pct"]),
                    _within(rows["window_corrected_error_pct"]), _within(_column(rows, "session_corrected_error_pct"))])
    return markdown_table(["workload", "validations", "pairs each", "whole: raw", "whole: corrected", "noise",
                           "from 1st step", "windows", "sessions"], out)


def h100_notes() -> str:
    """What the H100 validations say about the whole-run scatter and the sessions check."""
    data = _read(H100)
    machines = list(dict.fromkeys(data["validated_on"]))
    calibrated = list(dict.fromkeys(data["calibrated_on"]))
    corr = ", ".join(f"{rows['raw_error_pct'].corr(rows['corrected_error_pct']):.3f} ({_WORKLOADS[w]})"
                     for w, rows in data.groupby("workload", sort=False))
    with_sessions = int(data["session_corrected_error_pct"].notna().sum())
    lines = [f"- {len(data)} validations on {len(machines)} machines, calibrated once per workload on machine "
             f"{', '.join(calibrated)}; the sessions check ran in {with_sessions} of them.",
             f"- Identical uninstrumented processes differ by {_range(data['noise_pct'], signed=False)} (noise), "
             f"and a validation's corrected error follows its raw error with correlation {corr}: the whole-run "
             "scatter is between processes, not in the correction."]
    sessions = data[data["session_corrected_error_pct"].notna()]
    for workload, rows in sessions.groupby("workload", sort=False):
        cal = rows.iloc[0]
        errors = rows["session_corrected_error_pct"]
        how = "over-corrects" if (errors < 0).all() else "under-corrects" if (errors > 0).all() else "scatters around"
        zero = ", which includes zero" if cal["continuous_ci95_ns"] >= abs(cal["continuous_ns"]) else ""
        lines.append(f"- The sessions check {how} the {_WORKLOADS[workload]} "
                     f"({', '.join(_pct(v) for v in errors)}); the calibration's continuous CUDA API cost, which a "
                     f"session pays and windows do not, is {cal['continuous_ns']:,.0f} ± "
                     f"{cal['continuous_ci95_ns']:,.0f} ns per call (95% interval){zero}; "
                     "the calibration is left as it is.")
    return "\n".join(lines) + "\n"


TABLES: dict[str, Callable[[], str]] = {
    "overhead_summary": summary, "overhead_cpu_quick": cpu_quick, "overhead_cpu_full": cpu_full,
    "overhead_h100": h100, "overhead_h100_notes": h100_notes,
}
