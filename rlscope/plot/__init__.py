"""Figures drawn from an experiment's results.csv; one module per figure family.

The registry maps a figure name (as manifests list it) to ``module:function``; modules are
imported only when drawn, so validating a manifest does not import matplotlib.
"""

FIGURES: dict[str, str] = {
    "throughput_vs_envs": "rlscope.plot.throughput:throughput_vs_envs",
    "overhead_correction": "rlscope.plot.overhead:overhead_correction",
    "breakdown_vs_fused_steps": "rlscope.plot.datacollection:breakdown_vs_fused_steps",
    "transitions_vs_fused_steps": "rlscope.plot.datacollection:transitions_vs_fused_steps",
    "fusion_throughput": "rlscope.plot.datacollection:fusion_throughput",
    "fusion_speedup_grid": "rlscope.plot.datacollection:fusion_speedup_grid",
    "simulator_comparison": "rlscope.plot.datacollection:simulator_comparison",
    "casestudy_breakdown": "rlscope.plot.casestudies:casestudy_breakdown",
    "casestudy_time": "rlscope.plot.casestudies:casestudy_time",
    "casestudy_transitions": "rlscope.plot.casestudies:casestudy_transitions",
    "scale_up_gpu": "rlscope.plot.scale_up:scale_up_gpu",
    "scale_up_breakdown": "rlscope.plot.scale_up:scale_up_breakdown",
}

__all__ = ["FIGURES"]
