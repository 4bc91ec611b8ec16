"""Figures drawn from an experiment's results.csv; one module per figure family.

The registry maps a figure name (as manifests list it) to where it is drawn and what it needs:
``params``, the run parameters it is drawn over (a manifest that lists the figure must have them,
checked when the manifest loads), and ``columns``, what the workload must return (checked when
results.csv is read, before drawing). Modules are imported only when drawn, so validating a
manifest does not import matplotlib.
"""

from __future__ import annotations

import dataclasses

__all__ = ["FIGURES", "Figure"]


@dataclasses.dataclass(frozen=True)
class Figure:
    function: str  # module:function(results, meta) -> matplotlib Figure
    params: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()


FIGURES: dict[str, Figure] = {
    "throughput_vs_envs": Figure("rlscope.plot.throughput:throughput_vs_envs", ("backend", "num_envs"),
                                 ("samples_per_s",)),
    "overhead_correction": Figure("rlscope.plot.overhead:overhead_correction", ("workload",)),
    "breakdown_vs_fused_steps": Figure("rlscope.plot.datacollection:breakdown_vs_fused_steps",
                                       ("backend", "fused_steps"), ("table", "layer")),
    "transitions_vs_fused_steps": Figure("rlscope.plot.datacollection:transitions_vs_fused_steps",
                                         ("backend", "fused_steps"), ("table", "transition", "per_iteration")),
    "fusion_throughput": Figure("rlscope.plot.datacollection:fusion_throughput",
                                ("backend", "num_envs", "fused_steps"), ("steps_per_s",)),
    "fusion_speedup_grid": Figure("rlscope.plot.datacollection:fusion_speedup_grid",
                                  ("backend", "fused_steps", "state_factor"), ("compute_factor", "fusion_speedup")),
    "simulator_comparison": Figure("rlscope.plot.datacollection:simulator_comparison", ("environment", "num_envs"),
                                   ("steps_per_s",)),
    "casestudy_breakdown": Figure("rlscope.plot.casestudies:casestudy_breakdown", (), ("table", "operation", "layer")),
    "casestudy_time": Figure("rlscope.plot.casestudies:casestudy_time", (), ("table", "iterations", "seconds")),
    "casestudy_transitions": Figure("rlscope.plot.casestudies:casestudy_transitions", (),
                                    ("table", "operation", "transition", "per_iteration")),
    "jitted_training": Figure("rlscope.plot.jitted:jitted_training", ("framework", "environment"),
                              ("table", "uninstrumented_learn_s", "env_steps_per_s")),
    "scale_up_gpu": Figure("rlscope.plot.scale_up:scale_up_gpu", ("workers",)),
    "scale_up_breakdown": Figure("rlscope.plot.scale_up:scale_up_breakdown", ("workers",),
                                 ("table", "role", "operation")),
}
