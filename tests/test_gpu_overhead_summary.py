"""bench/gpu_overhead.py's summary: per-round ratios against the same round's uninstrumented run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "bench" / "gpu_overhead.py"
_spec = importlib.util.spec_from_file_location("gpu_overhead", _PATH)
gpu_overhead = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_overhead)


def rows(loop: str, walls: list[tuple[float, float, float]]) -> list[dict]:
    return [{"loop": loop, "mode": mode, "round": r, "wall_s": wall}
            for r, triple in enumerate(walls) for mode, wall in zip(("off", "rlscope", "profiler"), triple)]


def test_ratios_are_taken_per_round_then_the_median() -> None:
    # A machine twice as slow in round 1: per-round ratios stay 1.2 and 3.0.
    (entry,) = gpu_overhead.summarize(rows("tiny", [(1.0, 1.2, 3.0), (2.0, 2.4, 6.0), (1.0, 1.2, 3.0)]))
    assert entry["rounds"] == 3
    assert entry["rlscope"] == pytest.approx(1.2)
    assert entry["rlscope_range"] == pytest.approx((1.2, 1.2))
    assert entry["profiler"] == pytest.approx(3.0)
    # added time: median(0.2, 0.4, 0.2) = 0.2 for rlscope, median(2, 4, 2) = 2 for the profiler
    assert entry["profiler_added_over_rlscope"] == pytest.approx(10.0)


def test_a_round_without_its_uninstrumented_run_is_left_out_and_loops_stay_apart() -> None:
    data = rows("tiny", [(1.0, 1.5, 2.0), (1.0, 1.1, 2.0)]) + rows("jax_loop", [(2.0, 2.2, 4.0)])
    data = [r for r in data if not (r["loop"] == "tiny" and r["round"] == 1 and r["mode"] == "off")]
    tiny, jax = gpu_overhead.summarize(data)
    assert (tiny["loop"], tiny["rounds"], tiny["rlscope"]) == ("tiny", 1, pytest.approx(1.5))
    assert (jax["loop"], jax["rlscope"], jax["profiler"]) == ("jax_loop", pytest.approx(1.1), pytest.approx(2.0))


def test_no_added_time_ratio_when_rlscope_adds_nothing() -> None:
    (entry,) = gpu_overhead.summarize(rows("tiny", [(1.0, 0.9, 2.0)]))
    assert "profiler_added_over_rlscope" not in entry


def test_events_per_step_counts_each_kind_of_a_trace(tmp_path: Path) -> None:
    import rlscope

    with rlscope.profile(tmp_path / "trace", process="loop", gpu=False):
        for _ in range(4):
            rlscope.step()
            with rlscope.operation("inference"):
                pass
            with rlscope.operation("simulation"):
                pass
    counts = dict(item.split("=") for item in gpu_overhead.events_per_step(tmp_path / "trace", steps=4).split())
    assert float(counts["operation"]) == 2.0 and float(counts["step"]) >= 0.75
    assert "cuda_api" not in counts
