"""Shares of a sampled run: ratio estimates over its windows, with intervals, and its phases.

A sampled session (``rlscope.profile(sample=...)``, ``rlscope.collect.sampling``) records
everything only inside windows of a few iterations, placed at random with every iteration equally
likely to be measured, and between them the ``rlscope.step()`` calls' count and time at each
switch. So each window ``i`` gives, per operation and resource, the time ``y_i`` spent there over
the window's wall time ``x_i``; the share is the ratio estimate ``R = sum(y) / sum(x)``, and its
time over the iterations from the warm-up's end to the last ``rlscope.step()`` is ``R`` times
their total time, which the calls' times give exactly (the start-up before the first step, the
warm-up and what follows the last step are in no estimate).

Where the trace-size budget (``rlscope.collect.sampling``) drew some gaps from larger blocks,
iterations there were measured less often, and each window counts in proportion to its block
(``blocks`` in ``samples.json``): ``R = sum(b y) / sum(b x)``, the residuals weighted the same.

The interval: ``R``'s variance to first order is that of the residuals ``d_i = y_i - R x_i``
(``n s_d^2 / sum(x)^2``). Windows spread evenly over a run are close to a systematic sample, for
which the plain variance of ``d`` overstates the error wherever the run drifts slowly; the
successive-difference estimator
``s_d^2 = sum((d_{i+1} - d_i)^2) / (2 (n - 1))`` takes only differences of neighbouring windows,
so a slow trend (warming caches, a learning rate schedule, a growing replay buffer) cancels out
of it. A change of phase shows as one large difference, which the per-segment estimates
(``phases``) then keep apart.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pandas as pd
from pydantic import ValidationError

from rlscope.analyze.caveats import add_caveat
from rlscope.analyze.overlap import analyze_process
from rlscope.errors import TraceError, os_error_message, schema_problem
from rlscope.trace.reader import ProcessTrace
from rlscope.trace.schema import SAMPLES_FILE, Kind, SamplesFile

__all__ = ["SAMPLES_FILE", "SAMPLED_COLUMNS", "SampledWarning", "ShareEstimate", "step_calls", "sampled_calls",
           "sampled_windows", "ratio_estimate", "successive_difference_variance", "phases", "is_sampled",
           "analyze_sampled"]

SAMPLED_COLUMNS = ["process", "segment", "first_iteration", "operation", "resources", "share", "share_low",
                   "share_high", "seconds", "seconds_low", "seconds_high", "windows", "flagged_windows"]
WINDOWS_ONLY = "measured in sampled windows only (samples.json): the sampled table scales the shares to the run"


class SampledWarning(UserWarning):
    """A sampled process whose tables cannot be estimated (no complete window)."""


# CUPTI's own records that make a window unlike the others: kernels being instrumented or loaded.
_LOADING = ("overhead: CUPTI instrumentation", "overhead: module loading", "overhead: lazy function loading")

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


@dataclasses.dataclass(frozen=True)
class ShareEstimate:
    """A share of the iteration time over a run's windows, its 95% interval, and that share
    of the whole run's iteration time (``seconds``, with the same interval scaled)."""

    share: float
    low: float
    high: float
    seconds: float
    seconds_low: float
    seconds_high: float
    windows: int


def successive_difference_variance(values: np.ndarray) -> float:
    """``sum((v[i+1] - v[i])^2) / (2 (n - 1))``: the variance of ``values`` with a slow trend
    left out (von Neumann's estimator); nan for fewer than two values."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) < 2:
        return math.nan
    return float(np.sum(np.diff(values) ** 2) / (2 * (len(values) - 1)))


def ratio_estimate(part_ns: np.ndarray, window_ns: np.ndarray, total_ns: float) -> ShareEstimate:
    """The share ``sum(part_ns) / sum(window_ns)`` over the windows, in order of time, with its
    95% interval (successive-difference variance of the linearised residuals; clipped to [0, 1]),
    and scaled to ``total_ns``, the run's whole iteration time. One window gives no interval
    (nan bounds)."""
    y = np.asarray(part_ns, dtype=np.float64)
    x = np.asarray(window_ns, dtype=np.float64)
    if len(y) != len(x) or not len(x) or x.sum() <= 0:
        raise ValueError("ratio_estimate needs as many parts as windows, and windows of some length")
    share = float(y.sum() / x.sum())
    half = Z95 * math.sqrt(len(x) * successive_difference_variance(y - share * x)) / float(x.sum())
    low, high = (max(0.0, share - half), min(1.0, share + half)) if not math.isnan(half) else (math.nan, math.nan)
    seconds = total_ns / 1e9
    return ShareEstimate(share, low, high, share * seconds, low * seconds, high * seconds, len(x))


def phases(shares: np.ndarray, min_windows: int = 5, min_share: float = 0.05, min_change: float = 0.02) -> list[int]:
    """Where a run's shares change level: the indices of the windows that start a new phase
    (0 first). Rows: windows in order of time; columns: the operation x resource shares. PELT
    (``ruptures``) with a squared-error cost on the columns of at least ``min_share`` on average,
    each scaled by its noise (estimated from successive differences, so that the changes looked
    for do not inflate it), and a penalty of ``2 log(n)`` per column; then neighbouring phases
    whose shares differ by less than ``min_change`` in every column are joined. Why both: scaled
    by its own noise, a quiet column of a percent or two would make a phase of a change nobody
    needs told apart, and a slow drift would be cut into steps of no consequence. A phase is at
    least ``min_windows`` long, and at least a twentieth of the run."""
    import ruptures

    data = np.asarray(shares, dtype=np.float64)
    if data.ndim == 1:
        data = data[:, None]
    n = len(data)
    min_windows = max(min_windows, n // 20)
    data = data[:, data.mean(axis=0) >= min_share] if len(data) else data
    if n < 2 * min_windows or data.shape[1] == 0:
        return [0]
    noise = np.array([successive_difference_variance(column) for column in data.T])
    scale = np.sqrt(np.where(noise > 0, noise, 1.0))
    normalised = (data - data.mean(axis=0)) / scale
    penalty = 2.0 * math.log(n) * data.shape[1]
    ends = ruptures.Pelt(model="l2", min_size=min_windows, jump=1).fit(normalised).predict(pen=penalty)
    starts = [0] + [int(e) for e in ends[:-1]]
    joined = [0]
    for start, stop in zip(starts[1:], starts[2:] + [n]):
        before = data[joined[-1]:start].mean(axis=0)
        if np.max(np.abs(data[start:stop].mean(axis=0) - before)) >= min_change:
            joined.append(start)
    return joined


def is_sampled(trace: ProcessTrace) -> bool:
    return (trace.directory / SAMPLES_FILE).is_file()


def _samples(trace: ProcessTrace) -> dict:
    """``samples.json``, validated (``SamplesFile``): windows as lists, blocks and calls as arrays."""
    path = trace.directory / SAMPLES_FILE
    try:
        saved = SamplesFile.model_validate_json(path.read_bytes())
    except OSError as err:
        raise TraceError(f"{path}: unreadable: {os_error_message(err)}") from err
    except ValidationError as err:
        raise TraceError(f"{path}: {schema_problem(err)}; the file is damaged, or an older rlscope wrote it: "
                         "profile the run again") from err
    return {"spec": saved.spec, "windows": [list(w) for w in saved.windows],
            "blocks": np.array(saved.blocks, dtype=np.float64),
            "calls": np.array(saved.calls, dtype=np.int64).reshape(-1, 2)}


def sampled_windows(trace: ProcessTrace) -> list[list[int]]:
    """A sampled process's windows as ``samples.json`` lists them: ``[first_iteration, start_ns,
    end_ns, iterations]`` of each one's measured part."""
    return _samples(trace)["windows"]


def sampled_calls(trace: ProcessTrace) -> tuple[np.ndarray, np.ndarray]:
    """A sampled process's ``rlscope.step()`` calls that ``samples.json`` lists (at every switch,
    the warm-up's end and the last call): (call numbers, counted from 1; their times)."""
    calls = _samples(trace)["calls"]
    return calls[:, 0], calls[:, 1]


class _WindowCutter:
    """Cuts a trace into windows fast: events sorted by start once, the short ones (no longer
    than ``span_ns``) found for a window by binary search on their start, the few long ones
    (phases, a loop inside one operation) checked one by one."""

    def __init__(self, trace: ProcessTrace, span_ns: int) -> None:
        ev = trace.events.sort_values("start_ns", kind="stable").reset_index(drop=True)
        long = (ev["end_ns"] - ev["start_ns"]).to_numpy() > span_ns
        self.trace, self.span_ns = trace, span_ns
        self.short, self.long = ev[~long].reset_index(drop=True), ev[long].reset_index(drop=True)
        self.starts = self.short["start_ns"].to_numpy()

    def cut(self, start_ns: int, end_ns: int) -> ProcessTrace:
        """The trace cut to one window: its events that overlap it, clipped to it (phases too),
        and of the iterations those that end inside it (a step row runs from one
        ``rlscope.step()`` to the next, so the one that ends where the window starts is the
        iteration before it)."""
        lo, hi = np.searchsorted(self.starts, [start_ns - self.span_ns, end_ns])
        parts = [self.short.iloc[lo:hi], self.long]
        ev = pd.concat([p for p in parts if len(p)]) if any(len(p) for p in parts) else self.short.iloc[:0]
        starts, ends = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
        keep = (starts < end_ns) & (ends > start_ns)
        is_step = ev["kind"].to_numpy() == int(Kind.STEP)
        keep &= ~is_step | (ends <= end_ns)
        cut = ev[keep].copy()
        cut["start_ns"] = cut["start_ns"].clip(lower=start_ns)
        cut["end_ns"] = cut["end_ns"].clip(upper=end_ns)
        return dataclasses.replace(self.trace, meta={**self.trace.meta, "start_ns": start_ns, "end_ns": end_ns},
                                   events=cut.reset_index(drop=True))


def _in_window(trace: ProcessTrace, start_ns: int, end_ns: int) -> ProcessTrace:
    """The trace cut to one window (``_WindowCutter.cut``), for a single window."""
    return _WindowCutter(trace, end_ns - start_ns).cut(start_ns, end_ns)


def step_calls(trace: ProcessTrace) -> np.ndarray:
    """The times of a fully traced process's ``rlscope.step()`` calls, in order (element ``k`` is
    call ``k + 1``): every call starts a step row (the last one's ends where profiling stopped), and
    a row ends at the next call, or where ``set_phase`` closed it (then the time to the next call,
    training after a rollout in SB3's integration, is in no row: calls, not row lengths, give
    iterations)."""
    ev = trace.events
    return np.sort(ev.loc[ev["kind"] == int(Kind.STEP), "start_ns"].to_numpy())


def _call_time(call_times: dict[int, int], call: int, trace: ProcessTrace) -> int:
    """The time of ``rlscope.step()`` call ``call`` (counted from 1), which must be recorded."""
    if call not in call_times:
        raise TraceError(f"{trace.directory / SAMPLES_FILE}: the time of rlscope.step() call {call} is not "
                         "recorded; the file is damaged or from another run: profile the run again")
    return call_times[call]


def _flags(trace: ProcessTrace, windows: list[list[int]]) -> list[str]:
    """Per window, why it may be unlike the others: a kernel first seen there (after the first
    window: its launch paid for loading it), or CUPTI instrumenting or loading code in it."""
    ev = trace.events
    kernels = ev[ev["kind"] == int(Kind.GPU_KERNEL)]
    first_seen = kernels.groupby("name", observed=True)["start_ns"].min()
    overhead = ev[(ev["kind"] == int(Kind.PROFILER_OVERHEAD)) & ev["name"].isin(_LOADING)]
    flags = []
    for i, (_, start, end, _) in enumerate(windows):
        why = []
        if i and ((first_seen >= start) & (first_seen < end)).any():
            why.append("new kernels")
        if ((overhead["start_ns"] < end) & (overhead["end_ns"] > start)).any():
            why.append("CUPTI loading or instrumenting code")
        flags.append("; ".join(why))
    return flags


def analyze_sampled(trace: ProcessTrace, windows: list[list[int]] | None = None, spec: dict | None = None,
                    find_phases: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """A sampled process's (breakdown, transitions, sampled) tables. The first two are of what the
    windows measured (``analyze_process`` of each window, summed: per iteration, transitions count
    the windows' iterations only). ``sampled`` gives per phase of the run (``phases``), operation
    and resources the ratio estimate of the share of iteration time, its 95% interval, and that
    share of the run's whole iteration time, from the windows; windows flagged as unlike the
    others (``_flags``) are counted in it and reported in ``flagged_windows``.

    ``windows`` and ``spec`` stand for ``samples.json`` (windows drawn afterwards from a fully
    traced run: bench/sampled_validation.py); ``find_phases=False`` estimates over the whole run."""
    if windows is None:
        saved = _samples(trace)
        windows, spec = saved["windows"], saved.get("spec", {})
        numbers, times = saved["calls"][:, 0], saved["calls"][:, 1]
        weights = saved["blocks"]
    else:
        times = step_calls(trace)
        numbers = np.arange(1, len(times) + 1)
        weights = np.ones(len(windows))
    spec = spec or {}
    if not windows:  # killed before a window ended, or too short a run: nothing to estimate from
        warnings.warn(f"{trace.process}: sampled, but no window was complete ({trace.directory / SAMPLES_FILE}); "
                      f"its tables are left empty: run longer, or sample with a smaller warmup and block "
                      f"(warmup {spec.get('warmup')}, block {spec.get('block')})", SampledWarning, stacklevel=2)
        breakdown, transitions = analyze_process(dataclasses.replace(trace, events=trace.events.iloc[:0]))
        return breakdown.iloc[:0], transitions.iloc[:0], pd.DataFrame(columns=SAMPLED_COLUMNS)
    cutter = _WindowCutter(trace, max(end - start for _, start, end, _ in windows))
    parts = [analyze_process(cutter.cut(start, end)) for _, start, end, _ in windows]
    breakdowns = []
    for i, (frame, _) in enumerate(parts):
        breakdowns.append(frame.assign(window=i))
    per_window = pd.concat(breakdowns, ignore_index=True)
    keys = ["process", "thread", "phase", "operation", "cpu", "gpu", "resources"]
    breakdown = per_window.groupby(keys, as_index=False, sort=False).agg(
        time_ns=("time_ns", "sum"), caveat=("caveat", "first"))
    breakdown["time_s"] = breakdown["time_ns"] / 1e9
    add_caveat(breakdown, WINDOWS_ONLY)
    moves = pd.concat([t for _, t in parts], ignore_index=True)
    transitions = moves.groupby(["process", "thread", "phase", "operation", "transition"], as_index=False,
                                sort=False).agg(count=("count", "sum"), iterations=("iterations", "sum"),
                                                caveat=("caveat", "first"))
    transitions["per_iteration"] = transitions["count"] / transitions["iterations"].where(transitions["iterations"] > 0)

    main = per_window[per_window["thread"] == "main"]
    y = main.pivot_table(index="window", columns=["operation", "resources"], values="time_ns", aggfunc="sum",
                         fill_value=0).reindex(range(len(windows)), fill_value=0)
    x = np.array([end - start for _, start, end, _ in windows], dtype=np.float64)
    shares = y.to_numpy(dtype=np.float64) / x[:, None]
    starts = phases(shares) if find_phases else [0]
    call_times = dict(zip(numbers.tolist(), times.tolist()))
    flags = _flags(trace, windows)
    rows = []
    for segment, (first, stop) in enumerate(zip(starts, starts[1:] + [len(windows)])):
        seg_x = x[first:stop]
        # the segment's iterations: from the end of the warm-up (the first segment) or the call
        # its first window's measuring starts at, to the call the next segment's starts at, or
        # the last call
        begin = max(int(spec.get("warmup", 0)), 1) if segment == 0 else windows[first][0]
        end = windows[stop][0] if stop < len(windows) else int(numbers[-1])
        seg_total = float(_call_time(call_times, end, trace) - _call_time(call_times, begin, trace))
        flagged = sum(bool(f) for f in flags[first:stop])
        seg_w = weights[first:stop]
        for (operation, resources), column in y.items():
            est = ratio_estimate(seg_w * column.to_numpy()[first:stop], seg_w * seg_x, seg_total)
            rows.append((trace.process, segment, windows[first][0], operation, resources, est.share, est.low,
                         est.high, est.seconds, est.seconds_low, est.seconds_high, est.windows, flagged))
    sampled = pd.DataFrame(rows, columns=SAMPLED_COLUMNS)
    return breakdown, transitions, sampled
