"""Figures drawn from an experiment's results.csv; one module per figure family.

The registry maps a figure name (as manifests list it) to ``module:function``; modules are
imported only when drawn, so validating a manifest does not import matplotlib.
"""

FIGURES: dict[str, str] = {
    "throughput_vs_envs": "rlscope.plot.throughput:throughput_vs_envs",
    "overhead_correction": "rlscope.plot.overhead:overhead_correction",
}

__all__ = ["FIGURES"]
