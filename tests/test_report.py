"""`rlscope report`: one self-contained HTML page per output directory, checked in headless
Chromium where it is installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from rlscope.report import write_report

matplotlib.use("Agg")


def _output(tmp_path: Path) -> Path:
    """An output directory as `rlscope run` and `rlscope plot` leave it: one experiment with an
    ok, a failed and a skipped run, per-row table values beside run-level numbers, one figure."""
    out = tmp_path / "output"
    experiment = out / "toy"
    for run, scale in (("n-2", "quick"), ("n-9", "full")):  # failed before any repetition; another scale's
        (experiment / "runs" / run).mkdir(parents=True)
        (experiment / "runs" / run / "config.json").write_text(json.dumps({"scale": scale}))
        (experiment / "runs" / run / "log.txt").write_text("Traceback ...\nRuntimeError: out of GPU memory at N=2\n")
    meta = {"experiment": "toy", "description": "a toy sweep", "scale": "quick", "path": "configs/toy.yaml",
            "workload": "tests.toy_workloads:echo", "grid": {"n": [1, 2, 3]}, "figures": ["throughput_vs_envs"]}
    (experiment / "experiment.json").write_text(json.dumps(meta))
    rows = [{"run_id": "n-1", "n": 1, "status": "ok", "reason": "", "repetition": r, "samples_per_s": 100.0 + r,
             "share": share} for r in (0, 1) for share in (0.25, 0.75)]
    rows += [{"run_id": "n-3", "n": 3, "status": "skipped", "reason": "needs a GPU"}]
    pd.DataFrame(rows).to_csv(experiment / "results.csv", index=False)
    figures = out / "artifacts" / "experiment_toy"
    figures.mkdir(parents=True)
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    fig.savefig(figures / "throughput_vs_envs.png")
    fig.savefig(figures / "throughput_vs_envs.pdf")
    plt.close(fig)
    return out


def test_the_page_holds_figures_key_numbers_and_runs_that_did_not_finish(tmp_path):
    out = _output(tmp_path)
    page = write_report(out).read_text()
    assert page.count("<img src='data:image/png;base64,") == 1  # embedded: the page stands alone
    assert "href='artifacts/experiment_toy/throughput_vs_envs.pdf'" in page
    assert "did not finish: RuntimeError: out of GPU memory at N=2" in page
    assert "href='toy/runs/n-2/log.txt'" in page and "n-9" not in page
    assert "needs a GPU" in page and "1 failed" in page and "1 skipped" in page
    # The run-level number (mean of its repetitions) is a key number; the per-row share is not.
    assert "<th>samples_per_s</th>" in page and "<td class='n'>100.5</td>" in page
    assert "<th>share</th>" not in page
    assert re.search(r"<th>python</th><td>\d+\.\d+", page)


def test_a_directory_without_experiments_is_one_clear_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rlscope.cli", "report", str(tmp_path)], capture_output=True,
                          text=True)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "holds no experiment" in done.stderr and "rlscope run" in done.stderr


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (apt install chromium)")
def test_every_figure_loads_in_headless_chromium(tmp_path):
    page = write_report(_output(tmp_path))
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
                          "--dump-dom", page.resolve().as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert 'data-images-loaded="1/1"' in dom


def test_an_experiment_whose_files_cannot_be_read_is_shown_with_the_reason_and_the_others_still_are(tmp_path):
    out = _output(tmp_path)
    broken = out / "broken"
    broken.mkdir()
    (broken / "experiment.json").write_text(json.dumps({"experiment": "broken", "figures": "all"}))
    (out / "artifacts" / "experiment_toy" / "figures.json").write_text(json.dumps(
        {"casestudy_time": {"status": "failed", "reason": "results.csv lacks seconds"}}))
    page = write_report(out).read_text()
    assert "broken/experiment.json: field" in page and "rlscope run MANIFEST" in page
    assert "Figure casestudy_time not drawn: results.csv lacks seconds" in page
    assert page.count("<img src='data:image/png;base64,") == 1  # the readable experiment is all there


def test_a_figure_that_fails_is_reported_and_the_other_figures_are_drawn(tmp_path):
    from rlscope.plot.render import draw_experiment

    out = _output(tmp_path)
    meta = json.loads((out / "toy" / "experiment.json").read_text())
    meta["figures"] = ["casestudy_time", "throughput_vs_envs"]
    (out / "toy" / "experiment.json").write_text(json.dumps(meta))
    results = pd.read_csv(out / "toy" / "results.csv").assign(backend="numpy", num_envs=1)
    results.to_csv(out / "toy" / "results.csv", index=False)
    stale = out / "artifacts" / "experiment_toy" / "casestudy_time.png"
    stale.write_bytes(b"drawn by an earlier run")
    written, failures = draw_experiment(out / "toy", out / "artifacts")
    assert not stale.exists()  # never shown beside "not drawn" as if this run's
    assert [f.name for f in failures] == ["casestudy_time"] and "lacks table, iterations, seconds" in failures[0].reason
    assert sorted(p.name for p in written) == ["throughput_vs_envs.pdf", "throughput_vs_envs.png"]
    status = json.loads((out / "artifacts" / "experiment_toy" / "figures.json").read_text())
    assert status["casestudy_time"]["status"] == "failed" and status["throughput_vs_envs"]["status"] == "ok"
