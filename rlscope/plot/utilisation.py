"""GPU utilisation over time: what nvidia-smi says against how much the GPU actually worked."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

__all__ = ["utilisation_over_time"]

_STYLE = {
    "nvidia-smi utilization.gpu": ("#c44e52", "-"),
    "SM utilisation (GPM)": ("#dd8452", "--"),
    "GPU-bound (kernels+copies)": ("#4c72b0", "-"),
}


def utilisation_over_time(utilisation: pd.DataFrame, title: str = "") -> Figure:
    """One panel per process x device: the three measures in percent against seconds."""
    panels = list(utilisation.groupby(["process", "device"], sort=False))
    fig, axes = plt.subplots(len(panels), 1, figsize=(8.0, 3.2 * len(panels)), squeeze=False, sharex=True)
    for ax, ((process, device), group) in zip(axes[:, 0], panels):
        for measure, (color, style) in _STYLE.items():
            line = group[group["measure"] == measure].sort_values("time_s")
            if line.empty:
                continue
            mean = line["percent"].mean()
            ax.plot(line["time_s"], line["percent"], style, color=color, label=f"{measure} (mean {mean:.0f}%)")
        ax.set_ylim(0, 105)
        ax.set_ylabel("utilisation (%)")
        ax.set_title(f"{process} · GPU {device}", fontsize=10)
        ax.legend(loc="upper left", fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time since profiling started (s)")
    fig.suptitle(title or "GPU utilisation: nvidia-smi vs time the GPU was actually busy")
    fig.tight_layout()
    return fig
