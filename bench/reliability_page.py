"""docs/results/reliability.md, generated from the measurements beside it.

Each section renders one JSON file that a bench script wrote (the command that makes it is in
the file and on the page): the bad-input probe (``bad_input_probe.py``), the CLI fuzzing
(``make fuzz``), the events lost when a profiled process is killed (``kill_loss.py``), the GPU
tracer's checksums and time-bound writes on a GPU (``gpu_trace_check.py``), the test suite on a
loaded machine (``loaded_suite.py``), and what Python 3.11 can see (``unseen_calls_py311.py``). Every
number on the page comes from those files. ``python bench/reliability_page.py`` rewrites the
page; ``--check`` exits 1 if it is not what the data gives (tests/test_results_pages.py).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
PAGE = RESULTS / "reliability.md"


def _load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"reliability_{name}.json").read_text())


def _provenance(data: dict[str, Any]) -> str:
    return (f"`{data['command']}` on {data['machine']}, {data['date']}, commit {data['commit']}.")


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def probe() -> list[str]:
    data = _load("probe")
    verdicts = Counter(c["verdict"] for c in data["cases"])
    out = ["## Malformed input at the command line", "",
           f"{len(data['cases'])} inputs a new user gets wrong, each fed to the CLI: "
           f"**{verdicts['clear']} refused with one message**, {verdicts['traceback']} with a traceback, "
           f"{verdicts['accepted']} silently accepted. {_provenance(data)}", ""]
    out += _table(["input", "verdict", "exit", "message (last line of stderr)"],
                  [[c["case"], c["verdict"], c["exit_code"], f"`{c['message'][:160]}`"] for c in data["cases"]])
    return out + [""]


def fuzz() -> list[str]:
    data = _load("fuzz")
    tests = data["tests"]
    total = sum(t["passing"] + t["failing"] for t in tests.values())
    failing = sum(t["failing"] for t in tests.values())
    out = ["## Fuzzing the command line", "",
           f"`tests/test_fuzz_cli.py` generates malformed manifests, `--set` values, damaged trace bytes, "
           f"`meta.json` of the wrong shape and malformed results tables, and checks that the CLI never "
           f"prints a traceback, refuses with one message and a non-zero exit, and changes no file it did not mean "
           f"to write. CI runs it with a fixed seed and {_ci_examples()} examples per test; this run had "
           f"{data['examples_per_test']} per test, seed {data['seed']}: **{total} examples, {failing} failing**, "
           f"in {data['seconds']:.0f} s. {_provenance(data)}", ""]
    out += _table(["test", "passing", "failing", "invalid (rejected by the strategy)"],
                  [[f"`{name}`", t["passing"], t["failing"], t["invalid"]] for name, t in tests.items()])
    if data["failures"]:
        out += ["", "Failing examples:", ""] + [f"```\n{f}\n```" for f in data["failures"]]
    found = _load("fuzz_findings")
    out += ["", f"Earlier runs found {len(found['findings'])} defects, fixed since:", ""]
    out += _table(["seed", "examples per test", "test", "failure", "fix"],
                  [[f["seed"], f["examples_per_test"], f"`{f['test']}`", f["failure"], f["fix"]]
                   for f in found["findings"]])
    return out + [""]


def _ci_examples() -> str:
    """The examples per test CI runs: the fuzz test's default."""
    text = (RESULTS.parents[1] / "tests" / "test_fuzz_cli.py").read_text()
    return re.search(r'"RLSCOPE_FUZZ_EXAMPLES", "(\d+)"', text).group(1)  # type: ignore[union-attr]


def kill() -> list[str]:
    data = _load("kill")
    settings = data["settings"]
    out = ["## Events lost to SIGKILL", "",
           f"{data['workload']}. A trace keeps what was written before the kill; "
           f"lost events are {data['lost_events_is']}. {_provenance(data)}", ""]
    rows = []
    for name, setting in settings.items():
        kills = setting["kills"]
        rows.append([f"time-bound writes {name} (`RLSCOPE_FLUSH_INTERVAL_S={setting['RLSCOPE_FLUSH_INTERVAL_S']}`)",
                     len(kills), f"{setting['median_lost_s']:.3f}", f"{setting['max_lost_s']:.3f}",
                     f"{setting['median_lost_events']:.0f}", setting["max_lost_events"]])
    out += _table(["setting", "kills", "median s lost", "max s lost", "median events lost", "max events lost"], rows)
    return out + [""]


def gpu() -> list[str]:
    data = _load("gpu")
    done, killed = data["finished"], data["killed"]
    return ["## GPU rows: checksums and SIGKILL", "",
            f"{data['workload']}. {_provenance(data)}", "",
            f"- The finished run: the tracer wrote {done['gpu_meta']['rows_written']} rows in "
            f"{done['crc_records']} writes; `gpu.rows.crc` holds a record for each, covering "
            f"{done['rows_in_records']} rows of the file's {done['rows_file']}, and `gpu.names.crc` "
            f"{done['names_crc_records']} records covering {done['bytes_in_name_records']} of the names' "
            f"{done['names_file_bytes']} bytes; all verified ({done['kernels']} kernels, {done['api']} CUDA API "
            f"calls, {done['gpu_meta']['dropped']} records dropped by CUPTI).",
            f"- The killed run: {killed['kept_steps']} of its {killed['recorded_steps']} iterations kept; its trace "
            f"ends {killed['lost_s_cpu']:.3f} s before the kill on the CPU side, {killed['lost_s_gpu_kernels']:.3f} s "
            f"for kernels and {killed['lost_s_gpu_api']:.3f} s for CUDA API calls.", ""]


def load() -> list[str]:
    data = _load("load")
    out = ["## The test suite on a loaded machine", "",
           f"The whole suite while `{data['stress']}` kept every core busy: "
           f"**{data['passed']} passed, {data['failed']} failed, {data['skipped']} skipped** in "
           f"{data['seconds'] / 60:.0f} min. {_provenance(data)}", "",
           *([f"Failed: {', '.join(f'`{f}`' for f in data['failures'])}.", ""] if data["failures"] else []),
           "Tests whose asserts depended on the machine's speed, and what they assert now:", ""]
    out += _table(["test", "asserts"], [[f"`{t['test']}`", t["asserts"]] for t in data["changed_tests"]])
    return out + [""]


def py311() -> list[str]:
    data = _load("py311")
    out = ["## What Python 3.11 cannot see", "",
           f"{data['subject']}. {_provenance(data)} ({data['run_with']}).", "",
           "Seen on 3.11: " + "; ".join(data["seen_on_3_11"]["seen"]) + ".", "",
           "Not seen on 3.11: " + "; ".join(data["seen_on_3_11"]["unseen"]) + ".", "",
           "A jitted training step under `rlscope prof`, per Python and with a forwarding wrapper:", ""]
    out += _table(["Python", "wrapped", "Backend %", "Python %", "Python->Backend calls per iteration",
                   "Python->Backend calls in the process"],
                  [[w["python"], w["wrapped"], w["backend_pct"], w["python_pct"], w["python_to_backend_per_iteration"],
                    w["process_python_to_backend_calls"]] for w in data["workload"]])
    scan = data["scan_at_stop"]
    out += ["", f"Recording what a 3.11 process could not see costs {scan['ms_median']} ms (median) at its end, "
                f"with {', '.join(scan['imported'])} imported. Decision: {data['decision']}", ""]
    return out


SECTIONS = (probe, fuzz, kill, gpu, load, py311)


def render() -> str:
    head = ["# Reliability: bad input, damaged traces, killed processes, loaded machines", "",
            "Generated by `python bench/reliability_page.py` from `docs/results/reliability_*.json`; "
            "edit those (by re-running their commands), not this page.", ""]
    body = [line for section in SECTIONS for line in section()]
    return "\n".join(head + body).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="Exit 1 if the page differs from what the data gives.")
    args = parser.parse_args()
    page = render()
    if args.check:
        return 0 if PAGE.exists() and PAGE.read_text() == page else 1
    PAGE.write_text(page)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
