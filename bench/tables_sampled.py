"""The tables of docs/results/sampled.md, from ``bench/sampled_validation.py``'s JSON beside it."""

from __future__ import annotations

import json
from collections.abc import Callable

from tables_common import RESULTS, markdown_table

SAMPLED = RESULTS / "sampled"


def synthetic_schedules() -> str:
    """The estimator on made-up runs, per way of placing windows: coverage of the 95% intervals,
    mean error and its spread, the median half-width, and how many windows saw an evaluation."""
    data = json.loads((SAMPLED / "synthetic.json").read_text())
    expected = data["evaluation_share_of_windows_expected"]
    rows = [[schedule, f"{r['coverage']:.1%}", f"{r['mean_error']:+.4f}", f"{r['error_sd']:.4f}",
             f"{r['median_half_width']:.4f}", f"{r['windows_seeing_an_evaluation']:.1%} (expected {expected:.0%})",
             r["seeds"]] for schedule, r in data["schedules"].items()]
    return markdown_table(["windows placed by", "intervals covering the truth", "mean error", "error's sd",
                           "median half-width", "windows seeing an evaluation", "runs"], rows)


def full_trace_subsampled() -> str:
    """A fully traced CPU run sampled afterwards once per seed: per share of at least 5%, the
    full trace's share, coverage, estimates within max(0.5 points, 5% relative), mean error and
    median half-width."""
    data = json.loads((SAMPLED / "gym_numpy_cpu.json").read_text())
    rows = []
    for process in data["processes"]:
        for r in process["shares"]:
            rows.append([f"{r['operation']} / {r['resources']}", f"{r['full_share']:.1%}", f"{r['coverage']:.0%}",
                         f"{r['within_tolerance']:.0%}", f"{r['mean_error']:+.4f}", f"{r['median_half_width']:.4f}"])
    caption = (f"{data['processes'][0]['iterations']:,} iterations, {data['seeds']} sampled runs of about "
               f"{data['processes'][0]['windows_per_run']:.0f} windows each (window {data['spec']['window']}, "
               f"block {data['spec']['block']}, warmup {data['spec']['warmup']}, settle {data['spec']['settle']})\n\n")
    return caption + markdown_table(["operation / resources", "full trace", "intervals covering it",
                                     "within max(0.5 points, 5%)", "mean error", "median half-width"], rows)


def size_and_cost() -> str:
    """``bench/sampled_size.py``: per mode, the loop's time over the unprofiled one (median
    [range] over rounds), trace bytes per iteration and per hour of this loop, peak memory."""
    data = json.loads((SAMPLED / "size_gym_numpy_cpu.json").read_text())
    rows = []
    for mode, r in data["summary"].items():
        low, high = r["over_off_range"]
        rows.append([mode, f"{r['over_off']:.2f}x [{low:.2f}, {high:.2f}]", f"{r['wall_s']:.2f}",
                     f"{r['bytes_per_iteration']:.1f}", f"{r['mb_per_hour']:,.0f}", f"{r['max_rss_mb']:.0f}"])
    caption = (f"{data['workload']}, {data['steps']:,} iterations, {data['rounds']} rounds, "
               f"sample {data['sample']}\n\n")
    return caption + markdown_table(["mode", "time over unprofiled", "seconds", "trace bytes per iteration",
                                     "trace MB per hour of this loop", "peak memory (MB)"], rows)


TABLES: dict[str, Callable[[], str]] = {"sampled_synthetic": synthetic_schedules,
                                        "sampled_full_trace": full_trace_subsampled,
                                        "sampled_size": size_and_cost}
