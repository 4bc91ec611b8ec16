"""Feed the command line the malformed inputs a new user makes, and classify what it does with each.

Every case should be refused: a non-zero exit with one message (what, where, how to fix) and no
traceback. A case ends as ``clear`` (that), ``traceback`` (a Python traceback was printed) or
``accepted`` (exit status 0: the input was silently taken). Writes
docs/results/reliability_probe.json (``--out``), from which docs/results/reliability.md is
generated. Run from the repository root: ``python bench/bad_input_probe.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

GOOD = """\
experiment: toy
workload: tests.toy_workloads:echo
params: {sleep_s: 0}
grid: {x: [1, 2]}
figures: []
"""


def manifest(tmp: Path, text: str | bytes, name: str = "m.yaml") -> str:
    path = tmp / name
    path.write_bytes(text if isinstance(text, bytes) else textwrap.dedent(text).encode())
    return str(path)


def trace(tmp: Path) -> Path:
    """A small real trace to damage."""
    directory = tmp / "trace"
    script = tmp / "train.py"
    script.write_text("import rlscope\nwith rlscope.profile(gpu=False):\n    for i in range(2000):\n"
                      "        rlscope.step()\n        with rlscope.operation('inference'):\n            pass\n")
    subprocess.run([sys.executable, "-m", "rlscope.cli", "prof", "--output", str(directory), "--", sys.executable,
                    str(script)], cwd=REPO, check=True, capture_output=True, timeout=300)
    return directory


def damaged(tmp: Path, how: Callable[[Path], None]) -> str:
    directory = tmp / f"damaged-{len(list(tmp.glob('damaged-*')))}"
    shutil.copytree(tmp / "trace", directory)
    how(next(directory.glob("*/meta.json")).parent)
    return str(directory)


def flip_data_byte(process: Path) -> None:
    events = process / "events.arrows"
    raw = bytearray(events.read_bytes())
    raw[len(raw) // 2] ^= 0x5A  # inside the first chunk's data buffers
    events.write_bytes(bytes(raw))


def set_meta(**fields: object) -> Callable[[Path], None]:
    def apply(process: Path) -> None:
        meta = json.loads((process / "meta.json").read_text())
        (process / "meta.json").write_text(json.dumps({**meta, **fields}))
    return apply


def experiment(tmp: Path, name: str, meta: dict | str, results: str) -> str:
    directory = tmp / "out" / name
    directory.mkdir(parents=True)
    (directory / "experiment.json").write_text(meta if isinstance(meta, str) else json.dumps(meta))
    (directory / "results.csv").write_text(results)
    return str(directory)


def cases(tmp: Path) -> list[tuple[str, list[str]]]:
    t = tmp
    meta = {"experiment": "e", "path": "m.yaml", "workload": "tests.toy_workloads:echo", "scale": "quick",
            "grid": {"x": [1]}, "figures": ["casestudy_time"]}
    (t / "afile").write_text("")
    (t / "cal").mkdir()
    (t / "cal" / "calibration.json").write_text("{}")
    bad_calibration = t / "badcal.json"
    bad_calibration.write_text(json.dumps({"version": 1, "costs_ns": "cheap"}))
    run = ["run", "--dry-run"]
    return [
        ("manifest: figures: [[a]]", run + [manifest(t, GOOD.replace("figures: []", "figures: [[a]]"), "a.yaml")]),
        ("manifest: not UTF-8", run + [manifest(t, GOOD.encode() + b"# caf\xe9\n", "b.yaml")]),
        ("manifest: YAML syntax error", run + [manifest(t, "experiment: [toy\n", "c.yaml")]),
        ("manifest: a list, not a mapping", run + [manifest(t, "- experiment\n", "d.yaml")]),
        ("manifest: missing workload", run + [manifest(t, "experiment: toy\ngrid: {x: [1]}\n", "e.yaml")]),
        ("manifest: misspelt field", run + [manifest(t, GOOD + "repetitons: 2\n", "f.yaml")]),
        ("manifest: repetitions: two", run + [manifest(t, GOOD + "repetitions: two\n", "g.yaml")]),
        ("manifest: a grid value that is a mapping", run + [manifest(t, GOOD.replace("[1, 2]", "[1, {a: 2}]"),
                                                                     "h.yaml")]),
        ("manifest: exclude names no grid parameter", run + [manifest(t, GOOD + "exclude: [{y: 1}]\n", "i.yaml")]),
        ("manifest: workload module missing", run + [manifest(t, GOOD.replace("tests.toy_workloads", "nope.mod"),
                                                              "j.yaml")]),
        ("manifest: workload function missing", run + [manifest(t, GOOD.replace(":echo", ":nope"), "k.yaml")]),
        ("manifest: parameter of the wrong type", run + [manifest(t, GOOD.replace("sleep_s: 0", "sleep_s: fast"),
                                                                  "l.yaml")]),
        ("manifest: parameter the workload does not take",
         run + [manifest(t, GOOD.replace("sleep_s: 0", "sleep_s: 0, speed: 2"), "m2.yaml")]),
        ("manifest: unknown figure", run + [manifest(t, GOOD.replace("figures: []", "figures: [nope]"), "n.yaml")]),
        ("manifest: figure drawn over a parameter it lacks",
         run + [manifest(t, GOOD.replace("figures: []", "figures: [throughput_vs_envs]"), "o.yaml")]),
        ("manifest: file missing", run + [str(t / "absent.yaml")]),
        ("manifest: experiment name with a slash", run + [manifest(t, GOOD.replace("toy", "a/b", 1), "p.yaml")]),
        ("--set without =", run + [manifest(t, GOOD, "q.yaml"), "--set", "sleep_s"]),
        ("--set of an unknown parameter", run + [manifest(t, GOOD, "r.yaml"), "--set", "sleep=1"]),
        ("--set of a list", run + [manifest(t, GOOD, "s.yaml"), "--set", "x=[1, 2]"]),
        ("run --output that cannot be written", ["run", manifest(t, GOOD, "t.yaml"), "--output", "/proc/rlscope"]),
        ("prof --output under a file", ["prof", "--output", str(t / "afile" / "x"), "--", sys.executable, "-c",
                                        "pass"]),
        ("prof --output into a directory holding a trace",
         ["prof", "--output", str(t / "trace"), "--", sys.executable, "-c", "pass"]),
        ("calibrate --output into a directory holding a calibration",
         ["calibrate", "--output", str(t / "cal"), "--", sys.executable, "-c", "pass"]),
        ("analyze a directory that is no trace", ["analyze", str(t / "cal")]),
        ("analyze a trace with a flipped byte in a chunk's data", ["analyze", damaged(t, flip_data_byte)]),
        ("analyze a trace whose meta.json has a field of the wrong type", ["analyze", damaged(t, set_meta(pid="1"))]),
        ("analyze a trace whose meta.json is torn",
         ["analyze", damaged(t, lambda p: (p / "meta.json").write_text('{"schema_version": 2, "pro'))]),
        ("analyze --corrected with a calibration of the wrong shape",
         ["analyze", "--corrected", "--calibration", str(bad_calibration), str(t / "trace")]),
        ("plot: results.csv lacks the figure's columns",
         ["plot", experiment(t, "e1", meta, "run_id,status,reason,x\nx-1,ok,,1\n")]),
        ("plot: experiment.json garbled", ["plot", experiment(t, "e2", "{not json", "run_id,status,reason\n")]),
        ("plot: experiment.json of the wrong shape",
         ["plot", experiment(t, "e3", {**meta, "figures": "all"}, "run_id,status,reason\n")]),
        ("plot: results.csv lacks run_id/status", ["plot", experiment(t, "e4", meta, "x,y\n1,2\n")]),
        ("report on a directory holding no experiment", ["report", str(t / "cal")]),
    ]


def classify(done: subprocess.CompletedProcess[str]) -> str:
    if "Traceback" in done.stderr or "Traceback" in done.stdout:
        return "traceback"
    if done.returncode == 0:
        return "accepted"
    return "clear"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "results" / "reliability_probe.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        trace(tmp)
        rows = []
        for title, argv in cases(tmp):
            done = subprocess.run([sys.executable, "-m", "rlscope.cli", *argv], cwd=REPO, capture_output=True,
                                  text=True, timeout=600)
            verdict = classify(done)
            message = [line for line in done.stderr.splitlines() if line.strip()]
            rows.append({"case": title, "verdict": verdict, "exit_code": done.returncode,
                         "message": (message[-1] if message else done.stdout.strip()[-300:]).replace(name, "TMP")})
            print(f"{verdict:9} {done.returncode}  {title}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    record = {"command": "python bench/bad_input_probe.py", "date": time.strftime("%Y-%m-%d"), "commit": commit,
              "machine": f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}",
              "cases": rows}
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    bad = [r for r in rows if r["verdict"] != "clear"]
    print(f"{len(rows) - len(bad)} of {len(rows)} clear; wrote {args.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
