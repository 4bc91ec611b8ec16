"""The profiled data-collection loop, corrected with a cached calibration, and its breakdown figure."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rlscope.calibrate import Calibration


def _calibrations_made(monkeypatch) -> list[Calibration]:
    """Every calibration the profiled collection asks the cache for, in order (made or reused)."""
    import rlscope.calibrate

    made: list[Calibration] = []
    cached = rlscope.calibrate.cached_calibration

    def recorded(*args, **kwargs):
        calibration, path = cached(*args, **kwargs)
        made.append(calibration)
        return calibration, path

    monkeypatch.setattr(rlscope.calibrate, "cached_calibration", recorded)
    return made


def _chain(made: list[Calibration]) -> list[tuple]:
    return [(_length(c), c.blocks, c.iteration_ns, c.costs_ns, c.ci95_ns) for c in made]


def _length(calibration: Calibration) -> int:
    return int(calibration.command[-2])


def _called_for(calibration: Calibration, seconds: float) -> int:
    """The length a calibration's own iterations call for (16x its own where it has no blocks)."""
    if calibration.iteration_ns > 0:
        return math.ceil(seconds / (calibration.iteration_ns / 1e9))
    return 16 * _length(calibration)


def _assert_remade_as_its_own_iterations_call_for(made: list[Calibration], seconds: float) -> None:
    """The rule ``_calibration`` follows, whatever the machine's speed: a calibration with fewer
    than MIN_CALIBRATION_BLOCKS blocks is made again, at the length its own iterations call for,
    when that is over twice its own, at most twice; the last one made is the one used.

    Not asserted: that the last one reaches MIN_CALIBRATION_BLOCKS. Its blocks are its wall time
    over a block's, and its length was judged from an earlier calibration's iterations: where
    the machine's load changes between the two, it comes out with fewer."""
    from experiments.datacollection.profiled import MIN_CALIBRATION_BLOCKS

    assert 1 <= len(made) <= 3, [_length(c) for c in made]
    for calibration, following in zip(made, made[1:]):
        called_for = _called_for(calibration, seconds)
        assert calibration.blocks < MIN_CALIBRATION_BLOCKS and called_for > 2 * _length(calibration), _chain(made)
        assert _length(following) == called_for, _chain(made)
    last = made[-1]
    if len(made) < 3 and last.blocks < MIN_CALIBRATION_BLOCKS:  # kept as it was: not much too short
        assert last.iteration_ns > 0 and _called_for(last, seconds) <= 2 * _length(last), _chain(made)


def test_profiled_collection_with_calibrate_corrects_its_breakdown(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from experiments.datacollection.profiled import CALIBRATION_SECONDS, profiled_collection

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    made = _calibrations_made(monkeypatch)
    result = profiled_collection("torch", 16, 1, iterations=5, device="cpu", calibrate=True)
    layers = {row["layer"]: row for row in result["rows"] if row["table"] == "breakdown"}
    assert "Python" in layers and all("corrected_seconds_per_iteration" in r for r in layers.values())
    assert sum(r["corrected_share"] for r in layers.values()) == pytest.approx(1.0)
    for r in layers.values():  # the correction's 95% interval holds the corrected time and share
        assert 0 <= r["corrected_low_seconds_per_iteration"] <= r["corrected_seconds_per_iteration"] \
            <= r["corrected_high_seconds_per_iteration"] <= r["seconds_per_iteration"]
        assert 0 <= r["corrected_low_share"] <= r["corrected_share"] <= r["corrected_high_share"] <= 1
        assert "caveat" in r
    assert sum(r["corrected_seconds_per_iteration"] for r in layers.values()) == pytest.approx(
        result["corrected_iteration_s"])
    assert result["calibration_uncertainty_pct"] == result["calibration_uncertainty_pct"], _chain(made)  # not NaN
    made_files = list((tmp_path / "rlscope" / "calibration").glob("*/calibration.json"))
    calibration = Calibration.load(made_files[0])
    command = calibration.command
    assert command[-5:-2] == ("torch", "16", "1") and int(command[-2]) >= 10  # the loop, at least twice as long
    # 5 profiled iterations can all be warm-up (16 ms against 0.2 ms later): a calibration sized
    # from them alone had no complete block of windows, and no interval
    _assert_remade_as_its_own_iterations_call_for(made, CALIBRATION_SECONDS)
    assert calibration.command == made[-1].command and calibration.blocks == made[-1].blocks > 0
    asked = len(made)
    profiled_collection("torch", 16, 1, iterations=5, device="cpu", calibrate=True)
    assert len(list((tmp_path / "rlscope" / "calibration").iterdir())) == 1
    reused = made[asked]  # the second run reused it, rather than size one from its own warm-up
    assert (reused.command, reused.blocks, reused.iteration_ns) == (command, calibration.blocks,
                                                                    calibration.iteration_ns)


def test_a_calibration_sized_from_warm_up_iterations_is_made_again_longer(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from experiments.datacollection.profiled import MIN_CALIBRATION_BLOCKS, profiled_collection
    from rlscope.calibrate import spans as analysis

    measure = analysis.trace_iteration
    # sized from iterations 10x slower than even the warm-up's 16 ms: far too few blocks at first
    monkeypatch.setattr(analysis, "trace_iteration", lambda processes: (160e6, measure(processes)[1]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    made = _calibrations_made(monkeypatch)
    result = profiled_collection("torch", 16, 1, iterations=5, device="cpu", calibrate=True, calibration_seconds=2)
    first = made[0]
    assert _length(first) == max(2 * 5, math.ceil(2.0 / 160e-3))  # 13: as that sizing called for
    # made again, at the length its own iterations call for: more than twice its 13 wherever an
    # iteration takes under 77 ms (slower, and 13 give enough blocks: it is kept, as the rule says)
    if first.blocks < MIN_CALIBRATION_BLOCKS and _called_for(first, 2.0) > 2 * _length(first):
        assert len(made) >= 2 and _length(made[1]) == _called_for(first, 2.0) > 2 * _length(first), _chain(made)
    _assert_remade_as_its_own_iterations_call_for(made, 2.0)
    (kept,) = (tmp_path / "rlscope" / "calibration").glob("*/calibration.json")  # the short ones removed
    calibration = Calibration.load(kept)
    assert calibration.command == made[-1].command and calibration.blocks > 0
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


def test_the_breakdown_figure_draws_the_corrections_interval_and_says_where_it_overcorrects():
    from matplotlib.container import ErrorbarContainer

    from rlscope.analyze.caveats import OVERCORRECTED
    from rlscope.plot.breakdown import INTERVAL_LABEL
    from rlscope.plot.datacollection import breakdown_vs_fused_steps

    def row(k: int, layer: str, s: float, low: float, high: float, caveat: str = "") -> dict:
        return {"status": "ok", "table": "breakdown", "backend": "jax", "num_envs": 16, "fused_steps": k,
                "layer": layer, "seconds_per_iteration": s, "corrected_seconds_per_iteration": s / 2,
                "corrected_low_seconds_per_iteration": low, "corrected_high_seconds_per_iteration": high,
                "caveat": caveat}

    rows = pd.DataFrame([row(1, "Python", 2e-4, 0.9e-4, 1.1e-4), row(1, "CUDA API", 0.0, 0.0, 2e-5),  # 0, not only 0
                         row(10, "Python", 2e-4, 0.8e-4, 1.2e-4), row(10, "CUDA API", 0.0, 0.0, 0.0, OVERCORRECTED)])
    fig = breakdown_vs_fused_steps(rows, {"scale": "quick"})
    (ax,) = fig.axes
    whiskers = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    # at K = 1 both layers' shares are uncertain (CUDA API's from 0 up); at K = 10 Python is
    # 100% whatever its time, CUDA API being 0 at both ends: no whiskers there
    assert [len(c.lines[2][0].get_segments()) for c in whiskers] == [1, 1]
    python, cuda = (c.lines[2][0].get_segments()[0][:, 1] for c in whiskers)
    assert python.tolist() == pytest.approx([100 * 0.9 / 1.1, 100.0])
    assert cuda.tolist() == pytest.approx([100.0, 100 + 100 * 2 / 11])  # on top of Python's 100%: from 0 to 2/11
    assert INTERVAL_LABEL in [t.get_text() for t in fig.legends[0].get_texts()]
    notes = [t.get_text() for t in fig.texts]
    assert any("removes more than was measured" in t and "jax K=10: CUDA API" in t for t in notes), notes
    plain = breakdown_vs_fused_steps(rows.drop(columns=["corrected_low_seconds_per_iteration",
                                                        "corrected_high_seconds_per_iteration"]), {"scale": "quick"})
    assert not any(isinstance(c, ErrorbarContainer) for c in plain.axes[0].containers)  # older results: no whiskers
