"""The tables of docs/results/profiler.md, from the JSON records of ``bench/profiler_suite.sh
PYTHON OUT``: one folder per machine under docs/results/profiler/, each holding what the suite's
benchmarks wrote with ``--json`` (``disabled_api.json``, ``profiling_overhead.json``,
``analysis_throughput.json``; ``bench/run_record.py`` adds the host).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from typing import Any

from tables_common import RESULTS, markdown_table

PROFILER = RESULTS / "profiler"
DISABLED_TARGET_NS = 200  # per enter/exit of a disabled operation
OVERHEAD_TARGET = 1.3  # annotations + transitions over the uninstrumented loop
THROUGHPUT_TARGET = 5e6  # events analysed per second
_MODES = {"off": "uninstrumented", "hook": "hook only (nothing recorded)", "annotations": "annotations",
          "transitions": "annotations + transitions"}


def _records(benchmark: str) -> list[dict[str, Any]]:
    """Each machine's record of ``benchmark``, in folder order."""
    return [json.loads(p.read_text()) for p in sorted(PROFILER.glob(f"*/{benchmark}.json"))]


def _machine(record: dict[str, Any]) -> str:
    """The machine as a row names it: cores, CPU, Python, and the cores it was pinned to, if any."""
    host = record["host"]
    python = record.get("loop", {}).get("python", host["python"])
    label = f"{host['cores']}-core {host['machine']} ({host['cpu']}), Python {python}"
    allowed = host.get("allowed_cores")
    if allowed is not None and len(allowed) < host["cores"]:
        label += f", pinned to core{'s' if len(allowed) > 1 else ''} {','.join(map(str, allowed))}"
    return label


def _when(record: dict[str, Any]) -> str:
    host = record["host"]
    return f"{host['date']}, {host['commit'] or 'commit unknown'}"


def machines() -> str:
    """Which machine, interpreter and checkout gave each benchmark's record."""
    out = []
    for benchmark in ("disabled_api", "profiling_overhead", "analysis_throughput"):
        for record in _records(benchmark):
            loop = record.get("loop", {})
            packages = ", ".join(f"{p} {loop[p]}" for p in ("torch", "gymnasium", "numpy") if p in loop)
            out.append([f"`{benchmark}.py`", _machine(record), _when(record), packages or "—"])
    return markdown_table(["benchmark", "machine", "date, commit", "loop's packages"], out)


def disabled_api() -> str:
    """ns per enter/exit (or call) with profiling off: the best repeat of each statement less the
    best repeat of ``pass``."""
    out = []
    for record in _records("disabled_api"):
        best = {name: min(seconds) for name, seconds in record["seconds"].items()}
        ns = {name: 1e9 * (best[name] - best["base"]) / record["iterations"] for name in best if name != "base"}
        met = "met" if ns["operation"] < DISABLED_TARGET_NS else "missed"
        out.append([_machine(record), f"{ns['operation']:.0f} ns ({met})", f"{ns['reused']:.0f} ns",
                    f"{ns['step']:.0f} ns", f"{record['iterations']:,} x best of {len(record['seconds']['base'])}"])
    return markdown_table(["machine", f"`with rlscope.operation(name)` (target < {DISABLED_TARGET_NS} ns)",
                           "reused object", "`rlscope.step()`", "iterations"], out)


def profiling_overhead() -> str:
    """Per machine and mode: median and minimum loop seconds over rounds with their ratios to the
    uninstrumented loop's, µs per step (median), and the median time to close the trace."""
    out = []
    for record in _records("profiling_overhead"):
        loops, stops, steps = record["loop_s"], record["stop_s"], record["steps"]
        base_median, base_min = statistics.median(loops["off"]), min(loops["off"])
        for mode, label in _MODES.items():
            median, low = statistics.median(loops[mode]), min(loops[mode])
            ratios = f"{median / base_median:.2f}", f"{low / base_min:.2f}"
            if mode == "transitions":
                ratios = tuple(f"**{r}**" for r in ratios)
            out.append([_machine(record), label, f"{median:.3f}", ratios[0], f"{low:.3f}", ratios[1],
                        f"{1e6 * median / steps:.1f}", f"{statistics.median(stops[mode]):.3f}"])
    table = markdown_table(["machine", "mode", "median loop s", "ratio", "min loop s", "ratio", "µs per step",
                            "close trace s"], out)
    notes = []
    for record in _records("profiling_overhead"):
        loops = record["loop_s"]
        worst = max(statistics.median(loops["transitions"]) / statistics.median(loops["off"]),
                    min(loops["transitions"]) / min(loops["off"]))
        verdict = "met" if worst <= OVERHEAD_TARGET else "missed"
        notes.append(f"{_machine(record)}: {record['steps']:,} steps, {record['rounds']} rounds, profile hook "
                     f"{record['loop'].get('profile_hook', '?')}; target ≤ {OVERHEAD_TARGET}x with everything on: "
                     f"**{verdict}**.")
    return table + "".join(f"\n{n}\n" for n in notes)


def analysis_throughput() -> str:
    """Per machine and trace size: best of the repeats of read + analyse and of the analysis alone,
    and the events per second each gives."""
    out = []
    for record in _records("analysis_throughput"):
        for size in record["sizes"]:
            events = size["events"]
            full, alone = min(size["read_analyze_s"]), min(size["analyze_s"])
            rate = events / full
            met = "met" if rate >= THROUGHPUT_TARGET else "missed"
            out.append([_machine(record), f"{events / 1e6:.1f}M", f"{full:.2f} s", f"{rate / 1e6:.1f}M ({met})",
                        f"{alone:.2f} s", f"{events / alone / 1e6:.1f}M"])
    return markdown_table(["machine", "events", "read + analyze", f"events/s (target ≥ {THROUGHPUT_TARGET / 1e6:g}M)",
                           "analyze only", "events/s"], out)


TABLES: dict[str, Callable[[], str]] = {
    "profiler_machines": machines, "profiler_disabled_api": disabled_api,
    "profiler_overhead": profiling_overhead, "profiler_analysis_throughput": analysis_throughput,
}
