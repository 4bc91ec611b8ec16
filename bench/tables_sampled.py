"""The tables of docs/results/sampled.md, from ``bench/sampled_validation.py``'s JSON beside it."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable

import gpu_overhead
from tables_common import RESULTS, markdown_table

from rlscope.collect.sampling import SampleSpec

SAMPLED = RESULTS / "sampled"


def synthetic_schedules(record: str = "synthetic.json") -> str:
    """The estimator on made-up runs, per way of placing windows: coverage of the 95% intervals,
    mean error and its spread, the median half-width, and how many windows saw an evaluation."""
    data = json.loads((SAMPLED / record).read_text())
    expected = data["evaluation_share_of_windows_expected"]
    rows = [[schedule, f"{r['coverage']:.1%}", f"{r['mean_error']:+.4f}", f"{r['error_sd']:.4f}",
             f"{r['median_half_width']:.4f}", f"{r['windows_seeing_an_evaluation']:.1%} (expected {expected:.0%})",
             r["seeds"]] for schedule, r in data["schedules"].items()]
    return f"{data['iterations']:,} iterations per run\n\n" + markdown_table(
        ["windows placed by", "intervals covering the truth", "mean error", "error's sd", "median half-width",
         "windows seeing an evaluation", "runs"], rows)


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


def size_and_cost(record: str = "size_gym_numpy_cpu.json") -> str:
    """``bench/sampled_size.py``: per mode, the loop's time over the unprofiled one (median
    [range] over rounds), trace bytes per iteration and per hour of this loop, peak memory."""
    data = json.loads((SAMPLED / record).read_text())
    rows = []
    for mode, r in data["summary"].items():
        low, high = r["over_off_range"]
        late = r.get("trace_mb_per_hour_late", math.nan)
        rows.append([mode, f"{r['over_off']:.2f}x [{low:.2f}, {high:.2f}]", f"{r['wall_s']:.2f}",
                     f"{r['bytes_per_iteration']:.1f}", f"{r['mb_per_hour']:,.0f}",
                     "run too short" if math.isnan(late) else f"{late:,.0f}", f"{r['max_rss_mb']:.0f}"])
    tree = data.get("tree") or data.get("host", {}).get("commit", "")
    caption = (f"{data['workload']}, {data['steps']:,} iterations, {data['rounds']} rounds, "
               f"sample {data['sample']}" + (f", tree {tree}" if tree else "") + "\n\n")
    table = markdown_table(["mode", "time over unprofiled", "seconds", "trace bytes per iteration",
                            "trace MB per hour of this loop", "the same over the run's second half",
                            "peak memory (MiB)"], rows)
    full, sampled = data["summary"].get("full"), data["summary"].get("sampled")
    spec = dict(part.split("=") for part in data["sample"].split(","))
    notes = []
    if full and sampled and full["bytes_per_iteration"]:
        notes.append(f"The sampled run writes {sampled['bytes_per_iteration'] / full['bytes_per_iteration']:.1%} of "
                     f"the full trace's bytes per iteration; its windows hold "
                     f"{int(spec['window']) / int(spec['block']):.1%} of the iterations (window / block).")
    budget = int(spec.get("budget", SampleSpec.budget))
    late = sampled.get("trace_mb_per_hour_late", math.nan) if sampled else math.nan
    if budget and not math.isnan(late):
        notes.append(f"Trace budget {budget:,} MB an hour: over their second halves the sampled runs wrote "
                     f"{late:,.0f} MB per hour of the loop (median), {late / budget:.0%} of it; over the whole run "
                     f"{sampled['mb_per_hour']:,.0f}, the start-up and the first second's windows included.")
    return caption + table + "".join(f"\n{note}\n" for note in notes)


def _gpu_runs() -> list[dict]:
    """``bench/sampled_size.py``'s JSON of the GPU loops (``sampled/size_*_h100*.json``), in name order."""
    return [json.loads(path.read_text()) for path in sorted(SAMPLED.glob("size_*_h100*.json"))]


def _setting(data: dict) -> str:
    """The code that ran, the trace budget and the rounds. ``compare`` records the first two; the
    records written before it did (082adc9 and ef4ae9f, both sent to a lent machine whose git
    metadata lagged) had them added from the session's notes. Those at 082adc9 predate the budget."""
    budget = data["budget_mb_per_hour"]
    return (f"{data['tree']}, " + (f"budget {budget} MB/h" if budget is not None else "no budget, before it existed")
            + f", {data['rounds']} rounds, CUPTI buffers {buffers(data)}")


def gpu_cost() -> str:
    """Per GPU record and mode: time over the unprofiled loop (median [range] over rounds), trace
    bytes per iteration and per hour of the loop, peak memory and CUPTI's dropped records. Runs of
    seconds: memory's growth is the long runs' table's."""
    rows, captions = [], []
    records = _gpu_runs()
    for data in records:
        captions.append(f"{data['workload']} ({_setting(data)}): {data['iterations']:,.0f} iterations, "
                        f"{data['rounds']} rounds, sample {data['sample']}")
        for mode, r in data["summary"].items():
            low, high = r["over_off_range"]
            seconds = [run["wall_s"] for run in data["runs"] if run["mode"] == mode]
            rows.append([data["workload"], _setting(data), mode, f"{r['over_off']:.2f}x [{low:.2f}, {high:.2f}]",
                         f"{r['wall_s']:.1f} [{min(seconds):.1f}, {max(seconds):.1f}]",
                         f"{r['bytes_per_iteration']:,.0f}", f"{r['mb_per_hour']:,.0f}",
                         f"{r['max_rss_mb']:,.0f}", f"{r['dropped_records']:,}"])
    pooled = {}  # the same loop and setting in several records: their rounds together
    for data in records:
        if data["budget_mb_per_hour"] is not None:
            pooled.setdefault(data["workload"], []).extend(data["summary"]["sampled"]["over_off_each"])
    notes = [f"{loop}, sampled within the budget, every round of the records above: median "
             f"{statistics.median(ratios):.2f}x, range [{min(ratios):.2f}, {max(ratios):.2f}], "
             f"{sum(r <= 1.05 for r in ratios)} of {len(ratios)} rounds at or below 1.05x"
             for loop, ratios in sorted(pooled.items()) if len(ratios) > 3]
    return "; ".join(captions) + "\n\n" + markdown_table(
        ["loop", "tree, trace budget, rounds", "mode", "time over unprofiled", "seconds [range]",
         "trace bytes per iteration",
         "trace MB per hour of this loop", "peak memory (MiB)", "dropped records"], rows) + "".join(
        f"\n{note}.\n" for note in notes)


def gpu_shares() -> str:
    """Per GPU record with full and sampled runs and share of at least 5% of the iteration in the
    full traces: the full trace's share and the sampled run's estimate (medians over rounds), the
    sampled runs' windows, how many rounds' estimates are within max(0.5 points, 5% relative) of
    their own round's full trace and how many intervals cover it; and the first full trace
    sampled afterwards, once per seed: coverage and within."""
    rows = []
    for data in _gpu_runs():
        after = {}
        for process in (data.get("subsampled") or {}).get("processes", []):
            for r in process["shares"]:
                after[f"{r['operation']} / {r['resources']}"] = r
        windows = [r["windows"] for r in data["runs"] if r["mode"] == "sampled" and "windows" in r]
        for r in data["shares"]:
            if not r["rounds"]:
                continue
            late = after.get(r["share"])
            with_interval = r.get("rounds_with_interval", r["rounds"])
            half = "no interval" if math.isnan(r["half_width"]) else f"± {r['half_width']:.1%}" + (
                f" ({with_interval} of {r['rounds']} rounds had one)" if with_interval < r["rounds"] else "")
            rows.append([data["workload"], _setting(data), r["share"], f"{r['full']:.1%}",
                         f"{r['sampled']:.1%} {half}", f"{statistics.median(windows):.0f}" if windows else "",
                         f"{r['within_tolerance']}/{r['rounds']}", f"{r['covered']}/{r['rounds']}",
                         f"{late['coverage']:.0%} / {late['within_tolerance']:.0%} of {late['runs']}" if late else ""])
    return markdown_table(["loop", "tree, trace budget, rounds", "operation / resources", "full trace",
                           "sampled run (95% half-width)", "windows per sampled run",
                           "rounds within max(0.5 points, 5%)", "rounds whose interval covers it",
                           "full trace sampled afterwards: covered / within"], rows)


# The commit from which sampled sessions ask CUPTI for smaller buffers (and records say which size)
SMALL_BUFFERS_FROM = "00bd671"


def buffers(data: dict) -> str:
    """The CUPTI activity buffer size a ``sampled_size.py`` record's processes asked for: records
    list it since f0ffd20; one without it is older than 00bd671 (no record was made between), when
    every session asked for 8 MiB; none on a machine without a GPU."""
    if data.get("gpu") == "none":  # the two records at 082adc9 leave the GPU out: both ran on an H100
        return "no GPU"
    sizes = data.get("cupti_buffer_bytes")
    if sizes is None:
        return f"8 MiB (before {SMALL_BUFFERS_FROM})"
    return ", ".join(f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB" for size in sizes)


def long_runs() -> str:
    """``sampled_size.py long``'s records (``sampled/long_*.json``): per run, its length and
    windows, the trace's rate over the whole run and over its second half against the budget,
    resident and GPU memory once settled and at the session's end (with the resident range
    between), and CUPTI's dropped records."""
    rows = []
    for path in sorted(SAMPLED.glob("long_*.json")):
        data = json.loads(path.read_text())
        rss_first, rss_last = data["rss_mb_settled_last"]
        low, high = data["rss_mb_range_settled"]
        if "gpu_mb_settled_last" not in data:
            raise SystemExit(f"{path}: no GPU memory in the record")
        gpu_first, gpu_last = data["gpu_mb_settled_last"]
        gpu_mb = "no GPU" if math.isnan(gpu_first) else f"{gpu_first:,.0f} -> {gpu_last:,.0f}"
        rows.append([data["workload"], data["gpu"] if data["gpu"] != "none" else f"{data['host']['cores']}-core CPU",
                     f"{data['host']['date']}, {data['tree']}", data["sample"], buffers(data),
                     f"{data['wall_s'] / 60:.1f}",
                     f"{data['iterations']:,}",
                     f"{data['windows']:,}", f"{data['trace_mb_per_hour']:.0f}",
                     f"{data['trace_mb_per_hour_late']:.0f}", f"{rss_first:,.1f} -> {rss_last:,.1f}",
                     f"{high - low:.1f}", f"{data['rss_mb_per_hour']:+,.0f}", gpu_mb, f"{data['dropped_records']:,}"])
    table = markdown_table(["loop", "machine", "date, tree", "sample", "CUPTI buffers", "minutes", "iterations",
                           "windows",
                           "trace MB/h, whole run", "trace MB/h, second half", "resident MB, settled -> end",
                           "resident range after settling (MB)", "resident growth fitted over the second half (MB/h)",
                           "GPU MB, settled -> end", "dropped records"], rows)
    return table + "".join(f"\n{line}\n" for line in detach_memory_lines())


def detaches(sample: str) -> bool:
    """Whether a record's sample spec let go of CUPTI between windows (``detach=1``, a setting of
    branch detach-between-windows only: main's ``parse_sample`` does not know it)."""
    return "detach=1" in sample.split(",")


def detach_memory_lines() -> list[str]:
    """Per GPU run with ``detach=1``, its GPU memory growth fitted over the second half beside
    that of the GPU runs that kept CUPTI attached: each detach and attach may leave memory
    behind, which a run of hours multiplies."""
    runs = [json.loads(path.read_text()) for path in sorted(SAMPLED.glob("long_*.json"))]
    measured = [run for run in runs if run["gpu"] != "none" and math.isfinite(run["gpu_mb_per_hour"])]
    detached = [run for run in measured if detaches(run["sample"])]
    attached = [run for run in measured if not detaches(run["sample"])]

    def per_hour(values: list[float]) -> str:
        low, high = (round(min(values)), round(max(values)))  # rounded ints: no "-0"
        return f"{low:+,d} MB/h" if low == high else f"{low:+,d} to {high:+,d} MB/h"

    lines = []
    for run in detached:
        first, last = run["gpu_mb_settled_last"]
        line = (f"{run['workload']} with detach=1 ({run['tree']}, {run['windows']:,} windows in "
                f"{run['wall_s'] / 60:.1f} min): GPU memory {first:,.1f} -> {last:,.1f} MB after settling, fitted "
                f"growth {per_hour([run['gpu_mb_per_hour']])}")
        if attached:
            line += (f"; the {len(attached)} GPU runs that kept CUPTI attached: "
                     f"{per_hour([r['gpu_mb_per_hour'] for r in attached])}")
        lines.append(line + ".")
    return lines


# bench/gpu_overhead.py compare's CSVs of the cost between windows, each with its OUT.json beside it
BETWEEN_RUNS = ("between_h200.csv", "between_nogpu_h200.csv", "between_detached_h200.csv")
_BETWEEN_MODES = {"sampled-between": "sampled session between windows (CUPTI attached with every kind off, "
                                     "NVML sampler running)",
                  "sampled-between-no-gpu": "the same without the GPU layer (no CUPTI, no NVML sampler)",
                  "sampled-between-detached": "the same with the GPU layer after letting go of CUPTI (detach=1, "
                                              "branch detach-between-windows; NVML sampler running)"}


def between_cost() -> str:
    """Per record, loop and mode of ``gpu_overhead.py``'s in-process comparison: the time per
    iteration over the unprofiled segments beside it, median [range] over rounds (processes,
    each the median over its groups, as ``gpu_overhead.summarize`` takes them), and per loop and
    mode every round of the records together, with the median's 95% interval where there are
    enough rounds (``median_interval95``)."""
    import pandas as pd

    from rlscope.calibrate.stats import median_interval95

    rows: list[list] = []
    pooled: dict[tuple[str, str], dict[tuple[str, int], list[float]]] = {}
    for name in BETWEEN_RUNS:
        made = json.loads((SAMPLED / name).with_suffix(".json").read_text())
        how = (f"`{made['command']}`, {made['gpu']}, {made['host']['date']}, tree {made['tree']}"
               + (f"; {made['note']}" if made.get("note") else ""))
        records = pd.read_csv(SAMPLED / name).to_dict("records")
        for entry in gpu_overhead.summarize(records):
            for mode, label in _BETWEEN_MODES.items():
                if mode not in entry:
                    continue
                low, high = entry[f"{mode}_range"]
                rows.append([entry["loop"], label, f"{entry[mode]:.3f}x [{low:.3f}, {high:.3f}]",
                             entry[f"{mode}_rounds"], how])
        for row in records:  # per round, as summarize takes it
            if row["mode"] not in _BETWEEN_MODES:
                raise SystemExit(f"{SAMPLED / name}: mode {row['mode']!r} is not one this table shows "
                                 f"({', '.join(_BETWEEN_MODES)})")
            pooled.setdefault((row["loop"], row["mode"]), {}).setdefault((name, row["round"]), []).append(
                row["on_us"] / row["off_us"])
    notes = []
    for loop in sorted({loop for loop, _ in pooled}):  # rounds that ran both: attached against never attached
        attached, never = pooled.get((loop, "sampled-between"), {}), pooled.get((loop, "sampled-between-no-gpu"), {})
        both = sorted(set(attached) & set(never))
        if both:
            more = sum(statistics.median(attached[r]) > statistics.median(never[r]) for r in both)
            notes.append(f"{loop}, round by round where both ran: the session with the GPU layer cost more than "
                         f"the one without it in {more} of {len(both)} rounds")
    for (loop, mode), by_round in sorted(pooled.items()):
        ratios = [statistics.median(groups) for groups in by_round.values()]
        interval = median_interval95(ratios)
        notes.append(f"{loop}, {_BETWEEN_MODES[mode].split(' (')[0]}, every round of the records together: median "
                     f"{statistics.median(ratios):.3f}x"
                     + (f", its 95% interval [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")
                     + f", range [{min(ratios):.3f}, {max(ratios):.3f}], {sum(r <= 1.05 for r in ratios)} of "
                     f"{len(ratios)} rounds at or below 1.05x")
    return markdown_table(["loop", "mode", "time per iteration over unprofiled segments, median [range]", "rounds",
                           "run"], rows) + "".join(f"\n{note}.\n" for note in notes)


def long_shares() -> str:
    """Per long run held against full-trace references (``sampled_size.py long
    --reference-rounds``): per share of at least 5% of the iteration in the references' median
    (the profiler's own time left out of both), that median and the references' range, the long
    run's estimate over all its windows with its 95% interval, and whether it is within max(0.5
    points, 5% relative) and covered; and how many references are within that tolerance of their
    own median."""
    rows, by_run = [], []
    for path in sorted(SAMPLED.glob("long_*.json")):
        data = json.loads(path.read_text())
        if "reference" not in data:
            continue
        ref = data["reference"]
        by_run.append((f"{data['workload']} on {data['gpu']} ({data['tree']}, {buffers(data)} buffers, "
                       f"{data['windows']} windows)", ref["agreement"]))
        for r in ref["agreement"]:
            low, high = r["full_range"]
            rows.append([data["workload"], data["gpu"], f"{data['windows']} windows, {data['wall_s'] / 60:.1f} min, "
                         f"{data['sample']}, {data['tree']}", buffers(data),
                         f"{ref['rounds']} x {ref['steps']:,}", r["share"], f"{r['full']:.1%} [{low:.1%}, {high:.1%}]",
                         f"{r['estimate']:.1%} [{r['low']:.1%}, {r['high']:.1%}]",
                         "yes" if r["within_tolerance"] else "no", "yes" if r["covered"] else "no",
                         f"{r['full_runs_within_tolerance']} of {ref['rounds']}"])
    def missed(r: list[dict]) -> str:
        """The shares outside the tolerance: by how much, against the tolerance; and the intervals
        that miss."""
        out = [f"{x['share']} {(x['estimate'] - x['full']) * 100:+.2f} points ({x['estimate'] / x['full'] - 1:+.1%}), "
               f"tolerance {max(0.005, 0.05 * x['full']) * 100:.2f} points" for x in r if not x["within_tolerance"]]
        uncovered = [x["share"] for x in r if not x["covered"]]
        return ("; outside the tolerance: " + "; ".join(out) if out else "") + \
            ("; intervals missing the references: " + ", ".join(uncovered) if uncovered else "")

    counts = [f"{data_workload}: {within} of {len(r)} estimates within the tolerance, {covered} of {len(r)} "
              f"intervals covering the full traces' median{missed(r)}"
              for data_workload, r in by_run
              for within, covered in [(sum(x["within_tolerance"] for x in r), sum(x["covered"] for x in r))]]
    return markdown_table(["loop", "machine", "sampled run", "CUPTI buffers", "full references (iterations)",
                           "operation / resources",
                           "full traces: median [range]", "sampled run: estimate [95% interval]",
                           "within max(0.5 points, 5%)", "interval covers it", "full traces within it of their median"],
                          rows) + "".join(f"\n{line}.\n" for line in counts)


def buffer_requests() -> str:
    """``sampled/requests_*.json`` (``sampled_size.py long`` with ``RLSCOPE_CUPTI_BUFFER_KIB``):
    per run, the activity buffers' size and CUPTI's buffer requests over the run, each on the
    thread whose record needed a buffer: how many, their median and total time, per window; then
    where they fell, for the records that count it (``requests_by_place``)."""
    rows = []
    for path in sorted(SAMPLED.glob("requests_*.json")):
        data = json.loads(path.read_text())
        request = data["cupti_overhead"].get("overhead: activity buffer request", {"count": 0, "median_us": math.nan,
                                                                                   "total_ms": 0.0})
        rows.append([data["workload"], data["gpu"], f"{data['host']['date']}, {data['tree']}", data["sample"],
                     buffers(data), f"{data['windows']:,}", f"{request['count']:,}", f"{request['median_us']:,.0f}",
                     f"{request['total_ms']:.1f}", f"{request['total_ms'] * 1e3 / max(data['windows'], 1):,.0f}"])
    table = markdown_table(["loop", "machine", "date, tree", "sample", "CUPTI buffers", "windows", "buffer requests",
                           "median request (us)", "all requests (ms)", "all requests' time per window (us)"], rows)
    return table + "\n" + requests_by_place()


def requests_by_place() -> str:
    """The runs whose records say where CUPTI's buffer requests fell (``cupti_overhead``'s
    ``main_thread`` and ``in_windows``, since the bench counts them): on the training thread,
    inside windows, and the requests' time inside windows per window, the part that can move a
    window's shares."""
    rows = []
    for path in sorted([*SAMPLED.glob("requests_*.json"), *SAMPLED.glob("long_*.json")]):
        data = json.loads(path.read_text())
        request = data.get("cupti_overhead", {}).get("overhead: activity buffer request", {})
        if not {"main_thread", "in_windows", "in_windows_ms"} <= request.keys():
            continue
        rows.append([data["workload"], f"{data['host']['date']}, {data['tree']}", data["sample"], buffers(data),
                     f"{data['windows']:,}", f"{request['count']:,}", f"{request['main_thread']:,}",
                     f"{request['in_windows']:,}", f"{request['in_windows_ms']:.1f}",
                     f"{request['in_windows_ms'] * 1e3 / max(data['windows'], 1):,.1f}"])
    if not rows:
        return ""
    return markdown_table(["loop", "date, tree", "sample", "CUPTI buffers", "windows", "buffer requests",
                           "on the training thread", "inside windows", "their time inside windows (ms)",
                           "per window (us)"], rows)


TABLES: dict[str, Callable[[], str]] = {"sampled_buffer_requests": buffer_requests,
                                        "sampled_between": between_cost, "sampled_long_shares": long_shares,
                                        "sampled_gpu_cost": gpu_cost, "sampled_gpu_shares": gpu_shares,
                                        "sampled_long": long_runs,
                                        "sampled_synthetic": synthetic_schedules,
                                        "sampled_synthetic_long": lambda: synthetic_schedules("synthetic_long.json"),
                                        "sampled_full_trace": full_trace_subsampled,
                                        "sampled_size": size_and_cost,
                                        "sampled_size_budget": lambda: size_and_cost("size_gym_numpy_cpu_budget.json")}
