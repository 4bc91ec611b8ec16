"""bench/gpu_overhead.py: groups of alternating segments, per-round ratios and their summary."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "bench" / "gpu_overhead.py"
_spec = importlib.util.spec_from_file_location("gpu_overhead", _PATH)
gpu_overhead = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_overhead)


def rows(loop: str, mode: str, rounds: list[list[tuple[float, float]]]) -> list[dict]:
    return [{"loop": loop, "mode": mode, "round": r, "group": g, "off_us": off, "on_us": on}
            for r, groups in enumerate(rounds) for g, (off, on) in enumerate(groups)]


def test_ratios_are_taken_per_group_then_the_median_per_round_then_over_rounds() -> None:
    # Round 1 runs twice as slow and has one disturbed group: its median ratio stays 1.2.
    data = (rows("tiny", "rlscope", [[(100, 120), (100, 120)], [(200, 240), (200, 240), (200, 400)], [(100, 130)]])
            + rows("tiny", "profiler", [[(100, 300)], [(200, 600)], [(100, 300)]]))
    (entry,) = gpu_overhead.summarize(data)
    assert entry["rlscope"] == pytest.approx(1.2)
    assert entry["rlscope_range"] == pytest.approx((1.2, 1.3))
    assert entry["rlscope_rounds"] == 3
    assert entry["profiler"] == pytest.approx(3.0)
    assert entry["off_us"] == pytest.approx(100)
    # added time per iteration: median(20, 40, 30) = 30 for rlscope, median(200, 400, 200) = 200
    assert entry["profiler_added_over_rlscope"] == pytest.approx(200 / 30)


def test_loops_stay_apart_and_no_added_time_ratio_when_rlscope_adds_nothing() -> None:
    data = rows("tiny", "rlscope", [[(100, 90)]]) + rows("tiny", "profiler", [[(100, 200)]])
    data += rows("jax_loop", "rlscope", [[(50, 55)]])
    tiny, jax = gpu_overhead.summarize(data)
    assert (tiny["loop"], jax["loop"]) == ("tiny", "jax_loop")
    assert "profiler_added_over_rlscope" not in tiny
    assert jax["rlscope"] == pytest.approx(1.1) and "profiler" not in jax


def test_rlscope_over_the_floor_pairs_the_modes_of_each_round() -> None:
    # Round 1's machine is slower for both modes: paired per round, the ratio stays 1.1 and 1.2.
    data = (rows("tiny", "rlscope", [[(100, 132)], [(100, 180)], [(100, 121)]])
            + rows("tiny", "floor-api", [[(100, 120)], [(100, 150)], [(100, 110)]])
            + rows("tiny", "kernels", [[(100, 115)]]))  # no floor round to pair with
    (entry,) = gpu_overhead.summarize(data)
    assert entry["rlscope_over_floor-api"] == pytest.approx(1.1)
    assert entry["rlscope_over_floor-api_range"] == pytest.approx((1.1, 1.2))
    assert entry["rlscope_over_floor-api_rounds"] == 3
    assert "kernels_over_floor" not in entry


def test_session_costs_are_medians_and_the_stop_counts_per_iteration_in_the_with_stop_ratio() -> None:
    ours = gpu_overhead.session_costs([[2e6, 4e6, 1000], [4e6, 6e6, 1000], [3e6, 50e6, 0]])
    assert ours == pytest.approx({"start_ms": 3.0, "stop_ms": 6.0, "stop_us_per_iteration": 5.0})  # 4 and 6 us
    theirs = gpu_overhead.session_costs([[1e5, 300e6, 1000]])
    data = ([row | ours for row in rows("tiny", "rlscope", [[(100, 120)]])]
            + [row | theirs for row in rows("tiny", "profiler", [[(100, 160)]])])
    (entry,) = gpu_overhead.summarize(data)
    assert entry["rlscope_stop_ms"] == pytest.approx(6.0) and entry["profiler_stop_us_per_iteration"] == 300.0
    assert entry["profiler_added_over_rlscope"] == pytest.approx(60 / 20)
    assert entry["profiler_added_over_rlscope_with_stop"] == pytest.approx((60 + 300) / (20 + 5))
    assert gpu_overhead.session_costs([]) == {}


def segment(profiled: bool, start_us: float, length_us: float, iterations: int) -> list:
    return [int(profiled), int(start_us * 1e3), int((start_us + length_us) * 1e3), iterations, "t" if profiled else ""]


def test_groups_pair_the_unprofiled_and_profiled_segments_of_each_palindrome_after_the_first() -> None:
    pattern = (False, True, True, False)
    # per-iteration times: group 0 (warm-up) 50/10, group 1 10/12 then 11/13, group 2 10/15 twice
    times = [50, 10, 10, 50, 10, 12, 13, 11, 10, 15, 15, 10]
    segments = [segment(pattern[i % 4], i * 1000, t * 10, 10) for i, t in enumerate(times)]
    groups = gpu_overhead.groups_of(segments + [segment(False, 13000, 10, 1)])  # an incomplete group: left out
    assert groups == [pytest.approx((10.5, 12.5)), pytest.approx((10.0, 15.0))]


def test_a_group_out_of_pattern_or_without_iterations_is_left_out() -> None:
    pattern = (False, True, True, False)
    segments = [segment(pattern[i % 4], i * 1000, 100, 10) for i in range(12)]
    segments[5][3] = 0  # group 1: a profiled segment that saw no iteration
    assert gpu_overhead.groups_of(segments) == [pytest.approx((10.0, 10.0))]
    assert gpu_overhead.groups_of(segments[1:]) == []  # shifted: no group matches U P P U


def test_events_per_step_counts_each_kind_of_a_trace(tmp_path: Path) -> None:
    import rlscope

    with rlscope.profile(tmp_path / "trace", process="loop", gpu=False):
        for _ in range(4):
            rlscope.step()
            with rlscope.operation("inference"):
                pass
            with rlscope.operation("simulation"):
                pass
    counts = dict(item.split("=") for item in gpu_overhead.events_per_step(tmp_path / "trace").split())
    assert float(counts["operation"]) == 2.0 and float(counts["step"]) == 1.0
    assert "cuda_api" not in counts


def test_summary_of_several_csvs_counts_each_files_rounds_apart(tmp_path: Path, capsys) -> None:
    import pandas as pd

    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    pd.DataFrame(rows("sb3_ppo_cuda", "rlscope", [[(100, 110)], [(100, 120)], [(100, 130)]])).to_csv(first)
    pd.DataFrame(rows("sb3_ppo_cuda", "rlscope", [[(100, 140)], [(100, 150)], [(100, 160)]])).to_csv(second)
    gpu_overhead.summary([first, second])
    line = capsys.readouterr().out
    assert "rlscope 1.350x [1.100, 1.600] (6 rounds, median's 95% interval [1.100, 1.600])" in line


def test_summary_names_a_file_that_is_not_a_compare_csv(tmp_path: Path) -> None:
    other = tmp_path / "other.csv"
    other.write_text("loop,mode\ntiny,rlscope\n")
    with pytest.raises(SystemExit, match="other.csv: not a 'compare --out' CSV"):
        gpu_overhead.summary([other])
    with pytest.raises(SystemExit, match="missing.csv: no such file"):
        gpu_overhead.summary([tmp_path / "missing.csv"])


def test_sampled_between_sessions_are_sampled_and_open_no_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import rlscope
    from rlscope.collect.gpu_layers import ENV_API

    monkeypatch.setenv(ENV_API, "callbacks")  # session_opener sets it: put back after the test
    with gpu_overhead.session_opener("gym_numpy", "sampled-between")(tmp_path / "trace"):
        for _ in range(3000):  # a sampled session's first window would start within about 1,000 iterations
            rlscope.step()
    (samples,) = [json.loads(p.read_text()) for p in (tmp_path / "trace").rglob("samples.json")]
    assert samples["calls"][-1][0] == 3000 and samples["windows"] == []


def test_a_compare_csv_gets_where_and_how_it_ran_beside_it(tmp_path) -> None:
    from run_record import provenance

    made = provenance("gpu_overhead.py", ["compare", "--rounds", "5"], "abc1234")
    assert made["tree"] == "abc1234"  # the code sent, where the machine's git metadata lags
    assert made["command"] == "python bench/gpu_overhead.py compare --rounds 5"
    assert {"cpu", "cores", "date"} <= set(made["host"]) and isinstance(made["gpu"], str)
    assert provenance("gpu_overhead.py", [], None)["tree"] == made["host"]["commit"]
