"""Analyses of trace bundles: pure functions of the trace, each returning a tidy DataFrame."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from rlscope.analyze.attribution import attribute_gpu, read_attributed
from rlscope.analyze.gpu import gpu_by_operation, utilisation_timeline
from rlscope.analyze.jax_scopes import SCOPE_TABLE_COLUMNS, scope_table
from rlscope.analyze.overlap import analyze_process, breakdown, transitions
from rlscope.analyze.sampled import SAMPLED_COLUMNS, analyze_sampled, is_sampled
from rlscope.errors import ResultsError
from rlscope.files import write_atomic
from rlscope.trace.reader import ProcessTrace, read_trace

__all__ = ["analyze_trace", "analyze_processes", "read_attributed", "write_tables", "read_tables", "breakdown",
           "transitions", "ANALYSIS_DIR", "TABLES"]

ANALYSIS_DIR = "analysis"
TABLES = ("breakdown", "transitions", "gpu", "utilisation", "sampled", "jax_scopes")
_ADDED_LATER = {"jax_scopes": SCOPE_TABLE_COLUMNS}  # tables older analyses lack, read as empty
_COLUMNS_ADDED_LATER = {"jax_scopes": {"kernel_names": ""}}  # columns older analyses lack, and their value


def analyze_trace(directory: Path, drop_corrupt: bool = False) -> dict[str, pd.DataFrame]:
    """Every table over every process of the trace at ``directory`` (``analyze_processes``);
    ``drop_corrupt``: analyse the chunks before a corrupt one rather than stop at it."""
    return analyze_processes(read_trace(directory, drop_corrupt=drop_corrupt))


def analyze_processes(processes: list[ProcessTrace]) -> dict[str, pd.DataFrame]:
    """Every table over ``processes``: breakdown, transitions, gpu (work per operation),
    utilisation (GPU-bound vs NVML over time; these two are empty for a trace without GPU
    activity), sampled (the shares of sampled processes, with intervals: ``analyze.sampled``;
    empty for others) and jax_scopes (kernel time per jax.named_scope of processes profiled with
    --jax-scopes: ``analyze.jax_scopes``). A sampled process's breakdown and transitions are of
    its windows."""
    processes = [attribute_gpu(p) for p in processes]  # once; a no-op for processes already attributed
    tables = [analyze_sampled(p) if is_sampled(p) else (*analyze_process(p), None)
              for p in processes]
    sampled = [s for _, _, s in tables if s is not None]
    return {
        "breakdown": pd.concat([b for b, _, _ in tables], ignore_index=True),
        "transitions": pd.concat([t for _, t, _ in tables], ignore_index=True),
        "gpu": pd.concat([gpu_by_operation(p) for p in processes], ignore_index=True),
        "utilisation": pd.concat([utilisation_timeline(p) for p in processes], ignore_index=True),
        "sampled": pd.concat(sampled, ignore_index=True) if sampled else pd.DataFrame(columns=SAMPLED_COLUMNS),
        "jax_scopes": _concat([scope_table(p) for p in processes], SCOPE_TABLE_COLUMNS),
    }


def _concat(frames: list[pd.DataFrame], columns: tuple[str, ...]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(columns))


def write_tables(tables: dict[str, pd.DataFrame], out_dir: Path) -> list[Path]:
    """Write each table as CSV (to read) and Parquet (to load fast), atomically."""
    written = []
    for name, frame in tables.items():
        text = io.StringIO()
        frame.to_csv(text, index=False)
        write_atomic(out_dir / f"{name}.csv", text.getvalue())
        blob = io.BytesIO()
        frame.to_parquet(blob, index=False)
        write_atomic(out_dir / f"{name}.parquet", blob.getvalue())
        written += [out_dir / f"{name}.csv", out_dir / f"{name}.parquet"]
    return written


def read_tables(out_dir: Path, trace_dir: Path) -> dict[str, pd.DataFrame]:
    """The tables ``write_tables`` wrote; a missing or unreadable one is a ``ResultsError`` that
    names the file and the command that rebuilds it (nothing is recomputed silently)."""
    tables = {}
    for name in TABLES:
        path = out_dir / f"{name}.parquet"
        try:
            tables[name] = pd.read_parquet(path)
            for column, value in _COLUMNS_ADDED_LATER.get(name, {}).items():
                if column not in tables[name]:
                    tables[name][column] = value
        except FileNotFoundError as err:
            if name in _ADDED_LATER:  # an analysis written before the table existed: it had none
                tables[name] = pd.DataFrame(columns=list(_ADDED_LATER[name]))
                continue
            raise ResultsError(f"{path}: missing; run `rlscope analyze {trace_dir}` first") from err
        except (OSError, ValueError) as err:
            raise ResultsError(f"{path}: unreadable ({err}); rebuild it with `rlscope analyze {trace_dir}`") from err
    return tables
