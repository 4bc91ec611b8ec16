"""Run the command-line fuzz tests at length and record what they did: `make fuzz`.

Runs ``tests/test_fuzz_cli.py`` with ``--examples`` examples per test and hypothesis seed
``--seed``, and writes the machine, date, commit, command, the examples each test ran and every
failure (hypothesis's falsifying example) to ``--out`` (docs/results/reliability_fuzz.json),
which docs/results/reliability.md is generated from. Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "results" / "reliability_fuzz.json")
    args = parser.parse_args()
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/test_fuzz_cli.py",
               f"--hypothesis-seed={args.seed}", "--hypothesis-show-statistics"]
    env = {**os.environ, "RLSCOPE_FUZZ_EXAMPLES": str(args.examples)}
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    print(output[-4000:])
    tests = {}
    # hypothesis's statistics: "tests/test_fuzz_cli.py::test_x:" then "- 2000 passing, 0 failing, and 12 invalid"
    for name, passing, failing, invalid in re.findall(
            r"::(test_\w+):\n(?:.*\n)*?\s+- (\d+) passing, (\d+) failing, and (\d+) invalid", output):
        tests[name] = {"passing": int(passing), "failing": int(failing), "invalid": int(invalid)}
    plain = re.sub(r"^E\s{1,3}", "", output, flags=re.M)  # pytest's prefix on the failure's lines
    failures = re.findall(r"(?:Falsifying example|Failing test case): (.*?)(?=\n\s*Explanation:|\n\n|\Z)", plain,
                          flags=re.S)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    record = {
        "command": f"make fuzz FUZZ_EXAMPLES={args.examples} FUZZ_SEED={args.seed}",
        "machine": f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit,
        "seed": args.seed,
        "examples_per_test": args.examples,
        "seconds": round(seconds, 1),
        "tests": tests,
        "failures": [f.strip()[:2000] for f in failures],
        "exit_code": done.returncode,
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
