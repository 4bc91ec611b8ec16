"""The profiled data-collection loop, corrected with a cached calibration, and its breakdown figure."""

from __future__ import annotations

import pandas as pd
import pytest

from rlscope.calibrate import Calibration


def test_profiled_collection_with_calibrate_corrects_its_breakdown(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from experiments.datacollection.profiled import MIN_CALIBRATION_BLOCKS, profiled_collection

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    result = profiled_collection("torch", 16, 1, iterations=5, device="cpu", calibrate=True)
    layers = {row["layer"]: row for row in result["rows"] if row["table"] == "breakdown"}
    assert "Python" in layers and all("corrected_seconds_per_iteration" in r for r in layers.values())
    assert sum(r["corrected_share"] for r in layers.values()) == pytest.approx(1.0)
    assert sum(r["corrected_seconds_per_iteration"] for r in layers.values()) == pytest.approx(
        result["corrected_iteration_s"])
    assert result["calibration_uncertainty_pct"] == result["calibration_uncertainty_pct"]  # an interval, not NaN
    made = list((tmp_path / "rlscope" / "calibration").glob("*/calibration.json"))
    calibration = Calibration.load(made[0])
    command = calibration.command
    assert command[-5:-2] == ("torch", "16", "1") and int(command[-2]) >= 10  # the loop, at least twice as long
    # 5 profiled iterations can all be warm-up (16 ms against 0.2 ms later): a calibration sized
    # from them alone had no complete block of windows, and no interval
    assert calibration.blocks >= MIN_CALIBRATION_BLOCKS
    profiled_collection("torch", 16, 1, iterations=5, device="cpu", calibrate=True)
    assert len(list((tmp_path / "rlscope" / "calibration").iterdir())) == 1  # the second run reused it


def test_a_calibration_sized_from_warm_up_iterations_is_made_again_longer(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from experiments.datacollection.profiled import MIN_CALIBRATION_BLOCKS, profiled_collection
    from rlscope.calibrate import spans as analysis

    measure = analysis.trace_iteration
    # sized from iterations 10x slower than even the warm-up's 16 ms: far too few blocks at first
    monkeypatch.setattr(analysis, "trace_iteration", lambda processes: (160e6, measure(processes)[1]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    result = profiled_collection("torch", 16, 1, iterations=5, device="cpu", calibrate=True, calibration_seconds=2)
    (made,) = (tmp_path / "rlscope" / "calibration").glob("*/calibration.json")
    calibration = Calibration.load(made)
    assert int(calibration.command[-2]) > 2.0 / 160e-3  # longer than that sizing called for
    assert calibration.blocks >= MIN_CALIBRATION_BLOCKS
    assert result["calibration_uncertainty_pct"] == result["calibration_uncertainty_pct"]


def test_the_breakdown_figure_says_whether_it_is_corrected():
    from rlscope.plot.datacollection import breakdown_vs_fused_steps

    rows = pd.DataFrame([{"status": "ok", "table": "breakdown", "backend": "torch", "num_envs": 16, "fused_steps": k,
                          "layer": layer, "seconds_per_iteration": s, "corrected_seconds_per_iteration": s / 2}
                         for k in (1, 10) for layer, s in (("Python", 2e-4), ("Backend", 1e-4))])
    title = breakdown_vs_fused_steps(rows, {"scale": "quick"})._suptitle.get_text()
    assert "corrected for profiling's overhead" in title
    raw = breakdown_vs_fused_steps(rows.drop(columns="corrected_seconds_per_iteration"), {"scale": "quick"})
    assert "as profiled, overhead included" in raw._suptitle.get_text()
