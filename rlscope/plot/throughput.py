"""Throughput figures of the data-collection study (paper "Optimizing Data Collection", Fig. 4)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from rlscope.plot.render import note_skipped

__all__ = ["throughput_vs_envs", "backend_label"]

_BACKEND_NAMES = {
    "gymnasium": "gymnasium, N envs in a Python loop",
    "numpy": "NumPy vectorised",
    "cpp": "C++ multi-threaded",
    "torch": "PyTorch vectorised (eager)",
    "torch_graph": "PyTorch, K steps in a CUDA graph",
    "jax": "JAX / XLA (lax.scan over K steps)",
    "cuda": "CUDA kernel (K steps per launch)",
}


def backend_label(row: Mapping[str, Any]) -> str:
    """Legend text naming the implementation and where it ran."""
    name = _BACKEND_NAMES.get(row["backend"], str(row["backend"]))
    extra = [str(row["device"])] if "device" in row and isinstance(row["device"], str) else []
    if row["backend"] == "cpp" and "threads" in row and row["threads"] == row["threads"]:
        extra.append(f"{int(row['threads'])} threads")
    return f"{name} ({', '.join(extra)})" if extra else name


def throughput_vs_envs(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Samples/s against N parallel environments, log-log, one line per implementation."""
    ok = results[results["status"] == "ok"].copy()
    ok["implementation"] = ok.apply(backend_label, axis=1)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    sns.lineplot(data=ok, x="num_envs", y="samples_per_s", hue="implementation", style="implementation",
                 markers=True, dashes=False, errorbar="sd", ax=ax)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("parallel environments N")
    ax.set_ylabel("data collection throughput (samples / s)")
    policy = "MLP policy inference in the loop"
    ax.set_title(f"CartPole data collection throughput vs N ({policy})\n"
                 f"{meta.get('scale', '')} scale, mean ± sd over repetitions", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(title="implementation (device)", fontsize=8, title_fontsize=8)
    note_skipped(fig, results, "backend")
    fig.tight_layout()
    return fig
