"""Throughput figures of the data-collection study (paper "Optimizing Data Collection", Fig. 4)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from rlscope.plot.render import note_skipped
from rlscope.plot.sessions import draw_other_sessions, session_tag, split_sessions

__all__ = ["throughput_vs_envs", "backend_label", "backend_palette", "BACKEND_COLORS"]

_BACKEND_NAMES = {
    "gymnasium": "gymnasium, N envs in a Python loop",
    "numpy": "NumPy vectorised",
    "cpp": "C++ multi-threaded",
    "torch": "PyTorch vectorised (eager)",
    "torch_graph": "PyTorch, K steps in a CUDA graph",
    "jax": "JAX / XLA (lax.scan over K steps)",
    "cuda": "CUDA kernel (K steps per launch)",
    "cuda_fused_policy": "CUDA kernel with the policy fused in",
}
# One colour per implementation in every figure of the study (seaborn's colour-blind palette).
BACKEND_COLORS = dict(zip(_BACKEND_NAMES, sns.color_palette("colorblind", len(_BACKEND_NAMES)).as_hex()))
_CPU_SIMULATORS = ("gymnasium", "numpy", "cpp")  # they step on the CPU whatever the policy's device
_MARKERS = ("o", "X", "s", "P", "D", "^", "v")  # per steps-per-call K, the same for every session


def backend_label(row: Mapping[str, Any]) -> str:
    """Legend text naming the implementation and where it ran: a CPU simulator with its policy on
    a GPU says both."""
    name = _BACKEND_NAMES.get(row["backend"], str(row["backend"]))
    device = row["device"] if "device" in row and isinstance(row["device"], str) else None
    extra = []
    if device is not None:
        on_cpu = row["backend"] in _CPU_SIMULATORS and device != "cpu"
        extra.append(f"simulator cpu, policy {device}" if on_cpu else device)
    if row["backend"] == "cpp" and "threads" in row and row["threads"] == row["threads"]:
        extra.append(f"{int(row['threads'])} threads")
    if row["backend"] == "cuda_fused_policy":
        precision = row.get("precision")
        extra.append("fp16 tensor cores" if precision == "fp16" else "fp32")
        if row.get("record") in (True, "True", "true"):
            extra.append("records the trajectory")
    return f"{name} ({', '.join(extra)})" if extra else name


def backend_palette(frame: pd.DataFrame) -> dict[str, str]:
    """Each implementation label of ``frame`` (its ``implementation`` column) in its backend's colour;
    several labels of one backend (the fused kernel's precisions) get shades of it, dark to full."""
    pairs = frame[["implementation", "backend"]].drop_duplicates()
    palette: dict[str, str] = {}
    for backend, labels in pairs.groupby("backend")["implementation"]:
        base = BACKEND_COLORS.get(backend, "#333333")
        ordered = sorted(labels)
        shades = [base] if len(ordered) == 1 else sns.dark_palette(base, len(ordered) + 1).as_hex()[1:]
        palette.update(zip(ordered, shades))
    return palette


def throughput_vs_envs(results: pd.DataFrame, meta: Mapping[str, Any]) -> Figure:
    """Samples/s against N parallel environments, log-log: one colour per implementation, one
    line style per K (steps per call), so K = 1 and K = 1000 are separate lines."""
    ok = results[results["status"] == "ok"].copy()
    ok["implementation"] = ok.apply(backend_label, axis=1)
    style = None
    ok["curve"] = ok["implementation"]
    if "fused_steps" in ok:
        ok["K"] = [f"K = {int(k)}" for k in ok["fused_steps"]]
        ok["curve"] = ok["implementation"] + ", " + ok["K"]
        style = "K"
    palette = backend_palette(ok)
    main, other = split_sessions(ok, "curve", "num_envs")
    if "session" in main and main["session"].nunique() > 1:  # the curves' own sessions differ: say whose
        tags = main["session"].map(session_tag)
        main = main.assign(implementation=main["implementation"] + " [" + tags + "]")
        palette.update({label: palette[base] for label, base in
                        zip(main["implementation"], main["implementation"].str.rsplit(" [", n=1).str[0])})
    shapes = dict(zip(pd.unique(ok[style]), _MARKERS)) if style else {}
    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    sns.lineplot(data=main, x="num_envs", y="samples_per_s", hue="implementation", style=style,
                 markers=shapes or True, palette=palette, errorbar="sd", ax=ax)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("parallel environments N")
    ax.set_ylabel("data collection throughput (samples / s)")
    policy = "MLP policy inference in the loop"
    subtitle = meta.get("subtitle", f"{meta.get('scale', '')} scale, mean ± sd over repetitions")
    ax.set_title(f"CartPole data collection throughput vs N ({policy})\n{subtitle}", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(title="implementation (device); steps per call", fontsize=7, title_fontsize=8)
    curve_colors = dict(zip(ok["curve"], ok["implementation"].map(palette)))
    curve_markers = dict(zip(ok["curve"], ok[style].map(shapes))) if style else None
    draw_other_sessions(ax, other, "curve", "num_envs", "samples_per_s", curve_colors, curve_markers)
    note_skipped(fig, results, "backend")
    fig.tight_layout()
    return fig
