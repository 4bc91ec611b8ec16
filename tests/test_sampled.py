"""Sampled sessions: window placement, the ratio estimate and its interval, phases, and a
sampled run on the CPU analysed end to end."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

import rlscope
from rlscope.analyze import analyze_trace
from rlscope.analyze.sampled import phases, ratio_estimate, successive_difference_variance
from rlscope.collect.sampling import SampleSpec, parse_sample, window_starts
from rlscope.errors import RlscopeError
from rlscope.trace.schema import SAMPLES_FILE


def test_windows_fall_on_average_once_per_block_and_see_every_iteration_equally_often() -> None:
    spec = SampleSpec(window=10, block=200, warmup=50, seed=7)
    starts = np.array(window_starts(spec, 20_000))
    assert starts[0] > spec.warmup and (np.diff(starts) > spec.window).all()  # never overlapping
    assert np.mean(np.diff(starts)) == pytest.approx(spec.block, rel=0.05)
    seen = np.zeros(starts[-1] + spec.window, dtype=int)
    for s in starts:
        seen[s:s + spec.window] += 1
    for period in (100, 200, 1000):  # an evaluation every `period` iterations
        assert len({s % period for s in starts}) > period // 2, period  # windows start all over the period
        at_phase = [seen[1000 + phase::period].mean() for phase in range(period)]  # by position in the period
        assert max(at_phase) < 1.5 * spec.window / spec.block and min(at_phase) > 0.5 * spec.window / spec.block


def test_a_seed_fixes_the_places_and_no_seed_draws_new_ones() -> None:
    assert window_starts(SampleSpec(seed=1), 50) == window_starts(SampleSpec(seed=1), 50)
    assert window_starts(SampleSpec(), 50) != window_starts(SampleSpec(), 50)


@pytest.mark.parametrize("spec", ["window=0", "window=20,block=39", "settle=20,window=20", "size=3", "window=a",
                                  {"window": "20"}, {"window": 20.5}, {"block": True}])
def test_a_bad_sample_spec_is_one_clear_error(spec: str | dict) -> None:
    with pytest.raises(RlscopeError, match="sample"):
        parse_sample(spec)


def _run(rng: np.random.Generator, iterations: int) -> tuple[np.ndarray, np.ndarray]:
    """Per iteration: wall time and the part one operation takes, drifting slowly (x1.5 over
    the run), with noise and an evaluation every 100 iterations that takes no time of the
    operation's but 20x an iteration's."""
    drift = np.linspace(1.0, 1.5, iterations)
    part = 0.3 * drift * rng.lognormal(0, 0.2, iterations)
    rest = 0.7 * drift * rng.lognormal(0, 0.2, iterations)
    rest[::100] += 20.0
    return part + rest, part


def test_the_interval_covers_the_whole_run_share_in_about_95_percent_of_sampled_runs() -> None:
    spec = SampleSpec(window=10, block=200, warmup=0, settle=0)
    covered, widths = [], []
    for seed in range(200):
        rng = np.random.default_rng(seed)
        wall, part = _run(rng, 40_000)
        truth = part.sum() / wall.sum()
        starts = [s for s in window_starts(SampleSpec(**{**spec.__dict__, "seed": seed}), 400) if s < 40_000 - 10]
        x = np.array([wall[s:s + spec.window].sum() for s in starts])
        y = np.array([part[s:s + spec.window].sum() for s in starts])
        est = ratio_estimate(y, x, wall.sum())
        covered.append(est.low <= truth <= est.high)
        widths.append(est.high - est.low)
        assert est.seconds == pytest.approx(est.share * wall.sum() / 1e9)
    coverage = np.mean(covered)
    assert 0.9 <= coverage <= 0.99, coverage  # neither too narrow nor uselessly wide
    assert np.median(widths) < 0.05


def test_successive_differences_leave_a_slow_trend_out() -> None:
    trend = np.linspace(0, 100, 1000)
    assert successive_difference_variance(trend) < 0.01 * np.var(trend)
    noise = np.random.default_rng(0).normal(0, 2, 10_000)
    assert successive_difference_variance(noise) == pytest.approx(4, rel=0.05)


def test_one_window_gives_a_share_without_an_interval() -> None:
    est = ratio_estimate(np.array([3.0]), np.array([10.0]), 1e9)
    assert est.share == pytest.approx(0.3) and np.isnan(est.low) and np.isnan(est.high)


def test_a_change_of_phase_is_found_and_none_where_there_is_none() -> None:
    rng = np.random.default_rng(3)
    steady = rng.normal(0.3, 0.02, 120)
    assert phases(steady) == [0]
    quiet = np.c_[steady, 1 - steady - 0.01, np.r_[np.full(60, 0.010), np.full(60, 0.016)]]  # a 0.6-point move
    assert phases(quiet) == [0]  # in a column of 1%: no phase anyone needs
    drift = np.linspace(0.30, 0.315, 120) + rng.normal(0, 0.002, 120)
    assert phases(drift) == [0]  # a slow drift of 1.5 points is no staircase
    changed = np.r_[rng.normal(0.3, 0.02, 70), rng.normal(0.4, 0.02, 50)]
    other = 1 - changed + rng.normal(0, 0.01, 120)
    (first, second) = phases(np.c_[changed, other])
    assert first == 0 and abs(second - 70) <= 2


def _loop(iterations: int, change_at: int) -> list[int]:
    """Inference spins 0.3 ms and simulation sleeps 0.2 ms, then 0.8 ms from ``change_at``: the
    simulation's share of an iteration goes from about 40% to about 70%. Returns the time just
    after each rlscope.step() call."""
    called = []
    for i in range(iterations):
        rlscope.step()
        called.append(time.perf_counter_ns())
        with rlscope.operation("inference"):
            until = time.perf_counter() + 0.0003
            while time.perf_counter() < until:
                np.ones(64).sum()
        with rlscope.operation("simulation"):
            time.sleep(0.0002 if i < change_at else 0.0008)
    return called


def test_a_sampled_cpu_run_records_windows_and_its_shares_add_up_per_phase(tmp_path: Path) -> None:
    """A real loop, sampled: the windows fall where the schedule says, and each phase's shares of
    the CPU add up to the whole window time (whatever phases the run and the machine make)."""
    sample = "window=10,block=40,warmup=20,settle=2,budget=0,seed=5"  # placement as drawn: no budget
    with rlscope.profile(tmp_path, process="loop", gpu=False, sample=sample):
        called = _loop(1600, change_at=800)
    (process_dir,) = tmp_path.glob("loop.*")
    saved = json.loads((process_dir / SAMPLES_FILE).read_text())
    spec = parse_sample(sample)
    assert [w[0] for w in saved["windows"]] == [s + spec.settle for s in window_starts(spec, len(saved["windows"]))]
    assert len(saved["windows"]) >= 35 and all(w[3] == spec.window - spec.settle for w in saved["windows"])
    # Between windows step() only counts: its calls are known at the switches, the warm-up's end
    # and the last call, and iterations are rows only inside windows (their settling ones included;
    # one more window may be open at the end, and the last call's row ends at the stop).
    numbers = [c[0] for c in saved["calls"]]
    assert numbers == sorted(set(numbers)) and numbers[0] == 1 and numbers[-1] == 1600 and spec.warmup in numbers
    assert all(w[0] in numbers for w in saved["windows"])
    from rlscope.analyze.attribution import read_attributed
    from rlscope.trace.schema import Kind

    (process,) = read_attributed(tmp_path)
    steps = process.events[process.events["kind"] == int(Kind.STEP)]
    windows = len(saved["windows"])
    assert windows * spec.window <= len(steps) <= (windows + 1) * spec.window + 1

    tables = analyze_trace(tmp_path)
    sampled = tables["sampled"]
    # Where the phases fall is left to the deterministic test above: on a loaded machine, the
    # load's own changes are changes of phase too.
    for _, segment in sampled.groupby("segment"):
        cpu = segment[~segment["resources"].str.contains("GPU")]
        assert cpu["share"].sum() == pytest.approx(1.0)  # a window's CPU time is its wall time
        assert (segment["share_low"] <= segment["share"]).all() and (segment["share"] <= segment["share_high"]).all()
    # The CPU rows' seconds are the iterations' time from the warm-up's last call to the last
    # call, phase by phase: the phases' spans tile it. The calls' recorded times are those of the
    # loop's own calls (each taken before the loop reads its clock just after the call).
    recorded = dict(saved["calls"])
    assert recorded[spec.warmup] <= called[spec.warmup - 1] and recorded[1600] <= called[-1]
    assert called[spec.warmup - 2] < recorded[spec.warmup] and called[-2] < recorded[1600]
    cpu_rows = sampled[~sampled["resources"].str.contains("GPU")]
    assert cpu_rows["seconds"].sum() == pytest.approx((recorded[1600] - recorded[spec.warmup]) / 1e9)
    # The breakdown and transitions are of the windows only: one inference per measured iteration.
    moves = tables["transitions"]
    annotations = moves[(moves["transition"] == "Annotations") & (moves["operation"] == "inference")]
    assert annotations["per_iteration"].iloc[0] == pytest.approx(1.0)
    measured = sum(w[3] for w in saved["windows"])
    assert annotations["count"].iloc[0] == measured


def test_rlscope_prof_sample_profiles_a_script_in_windows(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text("import rlscope, time\nfor i in range(600):\n    rlscope.step()\n"
                      "    with rlscope.operation('simulation'):\n        time.sleep(0.0002)\n")
    out = tmp_path / "trace"
    done = subprocess.run([sys.executable, "-m", "rlscope.cli", "prof", "--output", str(out), "--no-gpu",
                           "--sample", "window=10,block=50,warmup=10,seed=2", "--", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (process_dir,) = out.glob("train.*")
    assert len(json.loads((process_dir / SAMPLES_FILE).read_text())["windows"]) >= 8
    sampled = analyze_trace(out)["sampled"]
    simulation = sampled[(sampled["operation"] == "simulation") & (sampled["resources"] == "Python")]
    assert simulation["windows"].sum() >= 8  # over the run's phases (a loaded machine may make several)


def test_rlscope_prof_refuses_a_bad_sample_spec_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "rlscope.cli", "prof", "--output", str(tmp_path / "t"),
                           "--sample", "window=50,block=10", "--", sys.executable, "-c", "pass"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "at least twice a window" in done.stderr


@pytest.mark.gpu
def test_a_sampled_gpu_run_records_kernels_only_inside_its_windows(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from rlscope.analyze.attribution import read_attributed
    from rlscope.collect.cupti import SAMPLED_BUFFER_BYTES
    from rlscope.trace.schema import Kind

    x = torch.ones(1 << 16, device="cuda")
    torch.cuda.synchronize()
    spec = parse_sample("window=10,block=50,warmup=10,settle=2,seed=1")
    with rlscope.profile(tmp_path, process="gpu", sample=spec):
        for _ in range(1000):
            rlscope.step()
            with rlscope.operation("compute"):
                x.mul_(1.0001)
            torch.cuda.synchronize()
    (process,) = read_attributed(tmp_path)
    assert process.meta["gpu"]["buffer_bytes"] == SAMPLED_BUFFER_BYTES  # windows start on small buffers
    windows = json.loads((process.directory / SAMPLES_FILE).read_text())["windows"]
    kernels = process.events[process.events["kind"] == int(Kind.GPU_KERNEL)]
    # one kernel per iteration while a window is on (its settling iterations included, and at most
    # one window still open at the end): nothing between windows
    assert len(windows) * spec.window <= len(kernels) <= (len(windows) + 1) * spec.window
    sampled = analyze_trace(tmp_path)["sampled"]
    compute = sampled[sampled["operation"] == "compute"]
    assert compute["resources"].str.contains("CUDA API").any()
    per_resources = compute.groupby("resources")["windows"].sum()  # over the phases found, if several
    assert (per_resources == len(windows)).all()


def test_a_process_that_never_steps_stays_a_full_trace(tmp_path: Path) -> None:
    with rlscope.profile(tmp_path, process="worker", gpu=False, sample=True):
        with rlscope.operation("work"):
            np.ones(8).sum()
    (process_dir,) = tmp_path.glob("worker.*")
    assert not (process_dir / SAMPLES_FILE).exists()
    tables = analyze_trace(tmp_path)
    assert tables["sampled"].empty and (tables["breakdown"]["operation"] == "work").any()


def test_a_sampled_run_with_no_complete_window_warns_and_leaves_its_tables_empty(tmp_path: Path) -> None:
    from rlscope.analyze.sampled import SampledWarning

    with rlscope.profile(tmp_path, process="short", gpu=False, sample="warmup=1000"):
        _loop(50, change_at=50)
    with pytest.warns(SampledWarning, match="no window was complete"):
        tables = analyze_trace(tmp_path)
    assert tables["sampled"].empty and tables["breakdown"].empty


def test_the_run_time_counts_what_set_phase_leaves_out_of_step_rows(tmp_path: Path) -> None:
    """SB3's integration sets the training phase after each rollout: the step row ends there, and
    the training until the next step() is in no row; the sampled seconds still cover it."""
    spec = parse_sample("window=4,block=10,warmup=4,settle=1,seed=3")
    with rlscope.profile(tmp_path, process="sb3like", gpu=False, sample=spec):
        began = None
        for i in range(400):
            rlscope.step()
            if i == spec.warmup:
                began = time.perf_counter_ns()  # the iterations after the warm-up
            rlscope.set_phase("rollout")
            with rlscope.operation("simulation"):
                time.sleep(0.0003)
            rlscope.set_phase("training")
            with rlscope.operation("backpropagation"):
                time.sleep(0.0003)
        rlscope.step()
        ended = time.perf_counter_ns()
    sampled = analyze_trace(tmp_path)["sampled"]
    assert sampled["seconds"].sum() == pytest.approx((ended - began) / 1e9, rel=0.1)
    # a phase change between windows writes no step row, nor does the stop: every row starts
    # inside a window (its settling iterations included)
    from rlscope.analyze.attribution import read_attributed
    from rlscope.trace.schema import Kind

    (process,) = read_attributed(tmp_path)
    saved = json.loads(next(tmp_path.glob(f"sb3like.*/{SAMPLES_FILE}")).read_text())
    calls = dict(saved["calls"])
    opened = [calls[w[0] - spec.settle] if spec.settle else w[1] for w in saved["windows"]]
    starts = np.sort(process.events.loc[process.events["kind"] == int(Kind.STEP), "start_ns"].to_numpy())
    inside = np.zeros(len(starts), dtype=bool)
    for first, (_, _, end, _) in zip(opened, saved["windows"]):
        inside |= (starts >= first) & (starts < end)
    assert inside.all() and len(starts) >= len(saved["windows"])
    shares = sampled.groupby("operation")["share"].sum()
    assert shares["backpropagation"] > 0.2 and shares["simulation"] > 0.2


def test_sampling_asked_of_an_already_profiled_process_is_not_silently_dropped(tmp_path: Path) -> None:
    with rlscope.profile(tmp_path, process="outer", gpu=False):
        with pytest.warns(UserWarning, match="already profiled"):
            with rlscope.profile(sample=True):
                rlscope.step()


def test_a_samples_file_missing_a_call_the_estimate_needs_is_a_clear_error(tmp_path: Path) -> None:
    from rlscope.errors import TraceError

    spec = parse_sample("window=4,block=10,warmup=6,settle=1,seed=2")
    with rlscope.profile(tmp_path, process="loop", gpu=False, sample=spec):
        for _ in range(200):
            rlscope.step()
            with rlscope.operation("work"):
                np.ones(8).sum()
    (process_dir,) = tmp_path.glob("loop.*")
    path = process_dir / SAMPLES_FILE
    saved = json.loads(path.read_text())
    saved["calls"] = [c for c in saved["calls"] if c[0] != spec.warmup]  # where the estimates' run starts
    path.write_text(json.dumps(saved))
    with pytest.raises(TraceError, match=f"rlscope.step\\(\\) call {spec.warmup} is not recorded"):
        analyze_trace(tmp_path)


def test_windows_drawn_from_larger_blocks_count_for_more(tmp_path: Path) -> None:
    """The budget drew the second half's gaps from blocks four times larger: its 2 windows stand
    for as many iterations as the first half's 8. The first half spends 30% of its time in
    ``sim``, the second 60%: the run's share is 45%, which an unweighted mean (36%) would miss."""
    from rlscope.analyze.sampled import analyze_sampled
    from tests.synthetic import OP, make_trace

    rows, windows = [], []
    for i, share in enumerate([0.3] * 8 + [0.6] * 2):
        start = 1000 + i * 1000
        rows += [(OP, start, start + int(share * 100), "sim"), (OP, start + int(share * 100), start + 100, "other")]
        windows.append([10 + 10 * i, start, start + 100, 1])
    trace = make_trace(rows, start=0, end=12000)
    (tmp_path / SAMPLES_FILE).write_text(json.dumps({
        "spec": {"warmup": 1}, "complete": True, "windows": windows, "blocks": [100] * 8 + [400] * 2,
        "calls": [[1, 500], [200, 11500]]}))
    trace = type(trace)(tmp_path, trace.meta, trace.events)
    sampled = analyze_sampled(trace, find_phases=False)[2]
    sim = sampled[sampled["operation"] == "sim"].iloc[0]
    assert sim["share"] == pytest.approx(0.45)
    assert sim["seconds"] == pytest.approx(0.45 * 11000 / 1e9)


def test_the_budget_draws_from_the_block_that_keeps_the_trace_within_it() -> None:
    from rlscope.collect.sampling import budgeted_block

    spec = parse_sample("window=20,block=500,budget=100")
    # 100 MB an hour of 100 kB windows is 1,000 windows an hour; at 10,000 iterations a second,
    # one window per 36,000 iterations
    rate = 100e6 / 3600
    assert budgeted_block(spec, 1e5, 1e4, rate) == 36_000
    assert budgeted_block(spec, 1e5, 1e4, rate / 2) == 72_000  # half the rate: windows half as often
    assert budgeted_block(spec, 10.0, 1e4, rate) == 500  # never below the block asked for
    assert budgeted_block(parse_sample("budget=0"), 1e5, 1e4, rate) == 500  # no bound


def test_a_trace_ahead_of_its_budget_pays_it_back_over_a_minute() -> None:
    from rlscope.collect.sampling import BUDGET_CATCH_UP_S, MIN_RATE_SHARE, catch_up_rate

    rate = 100e6 / 3600  # 100 MB an hour in bytes per second
    assert catch_up_rate(100, rate * 30, 30) == pytest.approx(rate)  # on the budget: its rate
    assert catch_up_rate(100, 0, 30) == pytest.approx(rate)  # behind it: no faster than its rate
    ahead = 0.5 * rate * BUDGET_CATCH_UP_S  # half a minute's budget too much: half the rate
    assert catch_up_rate(100, rate * 30 + ahead, 30) == pytest.approx(0.5 * rate)
    assert catch_up_rate(100, 1e9, 30) == pytest.approx(MIN_RATE_SHARE * rate)  # far ahead: the floor


def test_the_budget_counts_what_samples_json_will_list() -> None:
    """samples.json is written at the end; its lists, a percent of a budgeted trace, are counted
    entry by entry as the windows close: each entry's text and its comma, the brackets aside."""
    from rlscope.collect.sampling import _compact, _json_bytes

    windows = [[120, 1_000_000_000_000_000, 1_000_000_000_005_000, 18], [700, 2, 3, 18]]
    calls = [[100, 5], [120, 1_000_000_000_000_000]]
    for listed in (windows, calls, [500, 36_000]):
        assert sum(_json_bytes(entry) for entry in listed) == len(_compact(listed)) - 1


def test_an_unreadable_trace_directory_keeps_the_block_until_a_look_can_read_it() -> None:
    from rlscope.collect.sampling import BUDGET_CHECK_S, TraceBudget

    spec = parse_sample("window=20,block=500,budget=100")
    size = [0]
    budget = TraceBudget(spec, start_ns=0, trace_bytes=lambda: size[0])
    budget.first_step(now_ns=0, steps=0)
    size[0] = -1  # e.g. the directory moved away for a moment
    assert budget.after_window(int(BUDGET_CHECK_S * 1e9), windows=1, steps=10_000) == spec.block
    size[0] = 10_000_000  # readable again, far over the budget: the look that can read it counts
    assert budget.after_window(int(2 * BUDGET_CHECK_S * 1e9), windows=2, steps=20_000) > spec.block


def test_the_budget_holds_the_whole_trace_start_up_included() -> None:
    """A loop of 10,000 iterations a second whose windows of 100 kB each are fully traced, one
    per 36,000 iterations at 100 MB an hour: the budget's block. A start-up that wrote 2 MB
    before the first step, and the windows drawn from the block asked for until the first look
    at the size, are paid back by a block 20 times larger (the floor's rate), then by blocks
    shrinking back to the budget's as the trace comes back within 100 MB an hour of its
    session."""
    from rlscope.collect.sampling import BUDGET_CHECK_S, TraceBudget

    spec = parse_sample("window=20,block=500,budget=100")
    size = [2_000_000]
    budget = TraceBudget(spec, start_ns=0, trace_bytes=lambda: size[0])
    budget.first_step(now_ns=0, steps=0)
    blocks, steps, ends_s = [], 0, []
    while steps < 6_000_000:  # ten minutes of the loop, a window at a time, each gap its block's mean
        steps += budget.block
        size[0] += 100_000
        ends_s.append(steps / 10_000)
        blocks.append(budget.after_window(int(ends_s[-1] * 1e9), len(blocks) + 1, steps))
    first_look = next(i for i, end in enumerate(ends_s) if end >= BUDGET_CHECK_S)
    assert set(blocks[:first_look]) == {spec.block}  # before the first look: the block asked for
    assert blocks[first_look] == 36_000 * 20  # 3 MB ahead of the budget's 14 kB: its floor's rate
    assert blocks[-1] == pytest.approx(36_000, rel=0.01)  # paid back: the budget's block
    assert size[0] <= 100e6 / 3600 * ends_s[-1] * 1.01  # the whole trace, start-up included, within it


def test_a_sampled_run_over_its_budget_draws_larger_blocks(tmp_path: Path) -> None:
    """Many annotations per iteration, windows of about 10 kB every 100 iterations: gigabytes an
    hour at any speed this machine runs the loop, over a budget of 500 MB an hour, which leaves
    about 14 windows a second: the blocks grow from the one asked for (at the first look at the
    trace's size, after BUDGET_CHECK_S), and samples.json records each window's."""
    spec = parse_sample("window=5,block=100,warmup=5,settle=1,budget=500,seed=4")
    with rlscope.profile(tmp_path, process="heavy", gpu=False, sample=spec):
        end = time.perf_counter() + 2.5
        while time.perf_counter() < end:
            rlscope.step()
            for _ in range(50):
                with rlscope.operation("work"):
                    pass
    (process_dir,) = tmp_path.glob("heavy.*")
    saved = json.loads((process_dir / SAMPLES_FILE).read_text())
    assert len(saved["blocks"]) == len(saved["windows"]) >= 2
    assert saved["blocks"][0] == spec.block and sum(b > spec.block for b in saved["blocks"]) >= 5
    assert not analyze_trace(tmp_path)["sampled"].empty


@pytest.mark.parametrize("damage, message", [
    (lambda s: s.pop("calls"), "calls"),  # what an older rlscope wrote
    (lambda s: s.update(calls=s["calls"][::-1]), "out of order"),
    (lambda s: s.update(blocks=s["blocks"][:-1]), "blocks for"),
    (lambda s: s.update(windows=[[1, 10, 5, 2]] + s["windows"][1:]), "ends before it starts"),
    (lambda s: s.update(spec="window=4"), "spec"),
])
def test_a_damaged_samples_file_is_one_clear_error(tmp_path: Path, damage, message: str) -> None:
    from rlscope.errors import TraceError

    with rlscope.profile(tmp_path, process="loop", gpu=False, sample="window=4,block=10,warmup=4,budget=0,seed=2"):
        for _ in range(100):
            rlscope.step()
    (path,) = tmp_path.glob(f"loop.*/{SAMPLES_FILE}")
    saved = json.loads(path.read_text())
    damage(saved)
    path.write_text(json.dumps(saved))
    with pytest.raises(TraceError, match=message):
        analyze_trace(tmp_path)


def test_the_correction_reads_a_sampled_runs_speed_from_its_windows(tmp_path: Path) -> None:
    """``analyze --corrected`` compares the trace's time per iteration with calibration's: in a
    sampled trace iterations are rows inside windows only, so the windows are its spans, and the
    time per iteration is about the run's own (not stretched over the gaps between windows)."""
    from rlscope.analyze.attribution import read_attributed
    from rlscope.analyze.sampled import sampled_calls
    from rlscope.calibrate.spans import first_step_ns, trace_iteration

    with rlscope.profile(tmp_path, process="loop", gpu=False, sample="window=10,block=40,warmup=10,budget=0,seed=3"):
        for _ in range(600):
            rlscope.step()
            with rlscope.operation("work"):
                time.sleep(0.0005)
    processes = read_attributed(tmp_path)
    numbers, times = sampled_calls(processes[0])
    mean = (times[-1] - times[0]) / (numbers[-1] - numbers[0])
    per_iteration, events = trace_iteration(processes)
    assert 0.5 * mean < per_iteration < 2 * mean and events > 0
    assert first_step_ns(processes[0]) == times[0]
