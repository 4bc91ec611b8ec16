"""Run the whole test suite while ``stress-ng`` keeps every core busy, and record the outcome.

``python bench/loaded_suite.py`` (Debian's ``stress-ng`` installed) starts ``stress-ng --cpu N``
with N the machine's cores, runs ``pytest`` with this interpreter, stops the load however the
run ends, and writes the counts, the time and the failures to docs/results/reliability_load.json
(keeping its list of the tests made independent of the machine's speed, which is what the run
checks), from which docs/results/reliability.md is generated. Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "results" / "reliability_load.json")
    parser.add_argument("pytest_args", nargs="*", default=[], help="Extra pytest arguments.")
    args = parser.parse_args()
    if shutil.which("stress-ng") is None:
        sys.exit("stress-ng is not installed: apt-get install -y stress-ng")
    cores = os.cpu_count() or 1
    stress = ["stress-ng", "--cpu", str(cores), "--timeout", "0"]
    load = subprocess.Popen(stress, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args.pytest_args]
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    finally:
        os.killpg(load.pid, signal.SIGTERM)
        load.wait()
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    print(output[-3000:])
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|error)", output.splitlines()[-1])}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    earlier = json.loads(args.out.read_text()) if args.out.exists() else {}
    record = {
        "subject": "The whole test suite while every core is busy (issue 51)",
        "command": "python bench/loaded_suite.py (" + " ".join(command[1:]) + ")",
        "stress": " ".join(stress),
        "machine": f"{platform.node()}: {cores} cores, {_cpu_model()}, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit + (" (with uncommitted changes)" if dirty else ""),
        "passed": counts.get("passed", 0), "failed": counts.get("failed", 0) + counts.get("error", 0),
        "skipped": counts.get("skipped", 0), "seconds": round(seconds),
        "failures": re.findall(r"^FAILED (\S+)", output, flags=re.M),
        "changed_tests": earlier.get("changed_tests", []),
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
