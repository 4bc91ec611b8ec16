"""What profiling costs SB3 PPO on CUDA in each state a profiled process can be in, per iteration.

PPO on CUDA's corrected whole runs have leaned positive (about +8%) while calibration's windows
and the sessions check met ±5%, so some cost of a continuously profiled process is not in the
calibrated per-event costs. Identical processes on the lent H100 host differ by up to 25%, so
this keeps start-ups cheap and compares many short processes: a zygote imports torch, SB3 and
rlscope without touching CUDA and forks one child per run (each creates its own CUDA context),
the states in a fresh random order each round. ``--fresh`` runs each child in a fresh
interpreter instead (about 10 s more per child), to check that what forked children show
carries over to processes as users start them.

    python bench/ppo_cuda_process_states.py OUT_DIR SECONDS ITERATIONS STATES [--fresh]

STATES, one letter each (a child runs ITERATIONS PPO iterations of 64 steps):

- ``U`` uninstrumented;
- ``W`` profiled (Python hooks, CUDA API and GPU activities) from before the CUDA context exists,
  as a whole profiled run;
- ``L`` unprofiled for iterations 0-9, then profiled: CUPTI attached after the context and
  modules exist, as a ``--sessions`` run's sessions;
- ``C`` profiled without GPU collection (Python hooks only) from the start;
- ``I`` as W, then from iteration 10 idle as calibration's unprofiled windows (hooks suspended,
  CUPTI attached with every activity kind off, the NVML sampler running); ``N`` also stops the
  sampler; ``R`` stops the session (released, as a ``--sessions`` run between sessions);
- ``Q`` unprofiled for iterations 0-9 (never attached), profiled from 10 as L, then from
  iteration ``IDLE_AT`` idle as I: one process's never-attached, profiled and idle iterations;
- ``E`` as Q, but CUPTI attached before the CUDA context exists and idle from the start (every
  activity kind off, hooks suspended, nothing recorded yet): whether Q's idle cost comes from
  attaching late or from having recorded;
- ``P``, ``X``: as E, but recording from iteration 10 only CUDA API calls (P) or only GPU
  activities (X): which of CUPTI's recordings leaves E's idle cost behind;
- ``F``, ``D``: as E, but from ``IDLE_AT`` the session is stopped (F), and for D then
  ``cuptiFinalize`` called directly: whether letting go of CUPTI takes E's idle cost away. A
  stopped session used to release CUPTI only (disable, unsubscribe), and F stayed slow where D
  did not; it now detaches CUPTI itself at the next CUDA API exit, so F and D should agree;
- ``V``, ``K``, ``S``: profiled from the start with calibration's alternating windows
  (``rlscope.collect.windows``) in the pattern of the windows check (``V``: everything off and
  on) or of calibration (``K``: every level, the window after a switch of CUPTI's recording
  timed; ``S``: that window left to settle, as calibration does by default); per level the
  median time per iteration of its windows as ``windows.json`` times them;
- ``T``, ``H``, ``A``: as W, then from iteration 6 switching per iteration, in the pattern
  ``PATTERN``, CUPTI's recording (T), the Python hooks (H) or both (A), as calibration's windows
  do; the switch itself is timed and left out.

Every child also times three CUDA calls in tight loops before iteration ``PROBE_AT`` (``PROBE_AT[0]``:
before any recording; the others: while idle after recording, for states that go idle), the time
left out of the iterations: ``cuStreamQuery`` through ctypes (a driver API call), a stream query
through torch (a runtime API call) and a one-element ``add_`` (a kernel launch). Their change
from the first probe, against U's (never attached) for the drift, is what recording leaves on
every CUDA call, whether or not CUPTI records it: a per-call measure of E's idle cost, far less
noisy than iteration times.

Per child one line in ``OUT_DIR/states.jsonl``: median ms per iteration over iterations 3-9
(``pre``) and from 12 (``post``), over 12 to ``IDLE_AT`` - 1 (``mid``) and from ``IDLE_AT`` + 2
(``late``), and for T/H/A the medians per kind of iteration: ``on3`` (on, after two on),
``on2`` (on, after one on after off), ``on_after_off``, and the same for off; for V/K/S the
median per level (``lv1``..``lv4``). At the end it prints, per state, each round's ``post``
against U's of the same round; ``post``, ``mid`` and ``late`` against ``pre``, ``late`` against
``mid``, and with ITERATIONS of at least ``IDLE_AT + 28`` ``late1`` (the 12 iterations after
``late`` starts) and ``late2`` (the rest) against ``pre``, within a process (U's drift for the
same stretches beside them); for T/H/A each kind of iteration against ``off3`` of the same
process; for V/K/S each level against the one below and everything against annotations only;
for D what ``cuptiFinalize`` returned. Needs a CUDA GPU (``--device cpu`` runs it
anywhere, to try it out).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

import rlscope
from rlscope import api
from rlscope.collect.windows import WINDOWS_FILE, AlternatingWindows

LATE = 10  # L, I, N, R, Q, E change state at this iteration's start
IDLE_AT = 26  # Q and E go idle at this iteration's start
PROBE_AT = (5, IDLE_AT + 4, IDLE_AT + 10)  # iterations before which the CUDA calls are timed
SWITCH_FROM = 6  # T, H, A switch from this iteration on
PATTERN = (1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0)  # long runs and single iterations of each
KINDS = {"on3": (1, 1, 1), "on2": (1, 1, 0), "on_after_off": (1, 0), "off_after_on": (0, 1), "off2": (0, 0, 1),
         "off3": (0, 0, 0)}
STATES = "UWLCINRQEPXFDVKSTHA"
ALL_LEVELS = "off,annotations,transitions,cuda_api,gpu_activities"
WINDOW_LEVELS = {"V": "off,gpu_activities", "K": ALL_LEVELS, "S": ALL_LEVELS}


def idle(session: Any, suspended: bool, api_calls: bool = True, activities: bool = True) -> None:
    """Suspend (or resume) the session's Python hooks and CUPTI's recording (of CUDA API calls,
    GPU activities or both), CUPTI staying attached."""
    (session._collector.suspend if suspended else session._collector.resume)()
    if session._gpu is not None:
        session._gpu.record(api=not suspended and api_calls, gpu=not suspended and activities)


def release(session: Any, detach: bool) -> int | None:
    """Stop the session mid-run (CUPTI released); with ``detach`` then ``cuptiFinalize``, the GPU
    idle first as CUPTI asks. Returns cuptiFinalize's result code (0: detached)."""
    import torch

    library = session._gpu.library if session._gpu is not None else None
    api._bind(None)
    session.stop(check_nesting=False)  # "learn" stays open; its end is then a no-op
    if not detach or library is None:
        return None
    torch.cuda.synchronize()
    return int(ctypes.CDLL(library).cuptiFinalize())


def probe_cuda_calls(rounds: int = 5) -> dict[str, float]:
    """Median ns per call, over ``rounds`` rounds, of a driver API call (``cuStreamQuery`` on the
    default stream, through ctypes), a runtime API call (torch's stream query) and a kernel
    launch (``add_`` on one element, synchronised after the loop)."""
    import torch

    driver = ctypes.CDLL("libcuda.so.1")
    stream = torch.cuda.current_stream()
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    loops = {"driver_query": (20000, lambda: driver.cuStreamQuery(None)),
             "runtime_query": (5000, stream.query),
             "launch": (3000, lambda: x.add_(1))}
    medians = {}
    for name, (count, call) in loops.items():
        spent = []
        for _ in range(rounds):
            began = time.perf_counter_ns()
            for _ in range(count):
                call()
            torch.cuda.synchronize()
            spent.append((time.perf_counter_ns() - began) / count)
        medians[name] = float(np.median(spent))
    return medians


def run_child(state: str, trace: Path, iterations: int, device: str) -> dict[str, Any]:
    """One PPO run in ``state``; the rollout starts' times, and per iteration whether it was
    recorded and how long a switch at its start took."""
    import stable_baselines3
    import torch
    from stable_baselines3.common.callbacks import BaseCallback

    stamps: list[int] = []
    finalized: list[int | None] = []
    recorded: list[int] = []
    switch_ns: list[int] = []
    probes: list[dict[str, float]] = []
    late = contextlib.ExitStack()

    def change_state(iteration: int) -> None:
        session = api._bound
        if state == "L" or (state == "Q" and iteration == LATE):
            late.enter_context(rlscope.profile(trace))
        elif state in "EPX" and iteration == LATE:
            idle(session, False, api_calls=state != "X", activities=state != "P")
        elif state in "FD" and iteration == LATE:
            idle(session, False)
        elif state in "FD":
            finalized.append(release(session, detach=state == "D"))
        elif state in "INQEPX":
            idle(session, True)
            if state == "N" and session._sampler is not None:
                session._sampler.stop()
                session._sampler = None
        elif state == "R":
            api._bind(None)
            session.stop(check_nesting=False)  # "learn" stays open; its end is then a no-op

    def switch(on: int) -> None:
        session = api._bound
        if state in "TA" and session._gpu is not None:
            session._gpu.record(api=bool(on), gpu=bool(on))
        if state in "HA":
            (session._collector.resume if on else session._collector.suspend)()

    class Probe(BaseCallback):
        def _on_rollout_start(self) -> None:
            now = time.perf_counter_ns()
            stamps.append(now)
            iteration = len(stamps) - 1
            on, spent = 1, 0
            if device == "cuda" and iteration in PROBE_AT:
                probes.append(probe_cuda_calls())
                spent = time.perf_counter_ns() - now
            if state in "THA" and iteration >= SWITCH_FROM:
                on = PATTERN[(iteration - SWITCH_FROM) % len(PATTERN)]
                if on != recorded[-1]:
                    switch(on)
                    spent += time.perf_counter_ns() - now
            recorded.append(on)
            switch_ns.append(spent)
            if (iteration == LATE and state in "LINRQEPXFD") or (iteration == IDLE_AT and state in "QEPXFD"):
                change_state(iteration)
            rlscope.step()

        def _on_step(self) -> bool:
            return True

    whole = contextlib.ExitStack()
    if state in WINDOW_LEVELS:
        os.environ[api.ENV_WINDOWS] = f"10:{WINDOW_LEVELS[state]}"
        AlternatingWindows.settle_after_gpu_switch = state == "S"
    if state not in "ULQ":
        whole.enter_context(rlscope.profile(trace, gpu=False if state == "C" else None))
        if state in "EPXFD":
            idle(api._bound, True)
    with whole:
        torch.set_num_threads(1)
        model = stable_baselines3.PPO("MlpPolicy", "CartPole-v1", device=device, seed=0, verbose=0,
                                      n_steps=64, batch_size=64)
        with rlscope.operation("learn"):
            model.learn(total_timesteps=64 * iterations, callback=Probe())
            late.close()
    child: dict[str, Any] = {"stamps": stamps, "recorded": recorded, "switch_ns": switch_ns, "finalized": finalized,
                             "probes": probes}
    if state in WINDOW_LEVELS:
        (found,) = trace.rglob(WINDOWS_FILE)
        child["windows"] = json.loads(found.read_text())["windows"]
    return child


def summarise_child(state: str, round_: int, child: dict[str, Any]) -> dict[str, Any]:
    """Median ms per iteration before and after the state change, and per kind of iteration."""
    times = np.diff(np.array(child["stamps"], dtype=np.int64)) / 1e6
    times -= np.array(child["switch_ns"][:len(times)]) / 1e6
    row: dict[str, Any] = {"round": round_, "state": state, "pre": float(np.median(times[3:LATE])),
                           "post": float(np.median(times[LATE + 2:])),
                           "mid": float(np.median(times[LATE + 2:IDLE_AT])),
                           "late": float(np.median(times[IDLE_AT + 2:]))}
    if len(times) >= IDLE_AT + 28:
        row.update(late1=float(np.median(times[IDLE_AT + 2:IDLE_AT + 14])),
                   late2=float(np.median(times[IDLE_AT + 14:])))
    for position, probe in enumerate(child["probes"]):
        row.update({f"probe{position}_{name}": ns for name, ns in probe.items()})
    if child["finalized"]:
        row["finalize_result"] = child["finalized"][0]
    if state in "THA":
        recorded = child["recorded"]
        for name, history in KINDS.items():
            picked = [times[i] for i in range(SWITCH_FROM + 2, len(times))
                      if tuple(recorded[i - j] for j in range(len(history))) == history]
            row[name] = float(np.median(picked))
        row["switch_ms"] = float(np.median([s for s in child["switch_ns"] if s]) / 1e6)
    if state in WINDOW_LEVELS:
        per_level = defaultdict(list)
        for level, start, end, count in child["windows"]:
            per_level[level].append((end - start) / count / 1e6)
        row.update({f"lv{level}": float(np.median(v)) for level, v in per_level.items()})
    return row


def run_in_child(state: str, round_: int, out: Path, iterations: int, device: str,
                 fresh: bool) -> dict[str, Any] | None:
    """Fork (or with ``fresh`` start a new interpreter), run ``state`` there, wait at most 120 s
    (180 s fresh); the child's summary or None."""
    result = out / f"child-{round_:03d}-{state}.json"
    if fresh:
        command = [sys.executable, __file__, str(out), "0", str(iterations), state, "--device", device,
                   "--child", str(round_)]
        try:
            subprocess.run(command, timeout=180, check=False)
        except subprocess.TimeoutExpired:
            return None
        return json.loads(result.read_text()) if result.exists() else None
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            write_child(state, round_, out, iterations, device)
            code = 0
        finally:
            os._exit(code)
    deadline = time.time() + 120
    while not os.waitpid(pid, os.WNOHANG)[0]:
        if time.time() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.05)
    return json.loads(result.read_text()) if result.exists() else None


def write_child(state: str, round_: int, out: Path, iterations: int, device: str) -> None:
    child = run_child(state, out / "traces" / f"{round_:03d}-{state}", iterations, device)
    (out / f"child-{round_:03d}-{state}.json").write_text(json.dumps(summarise_child(state, round_, child)))


def show(name: str, values: list[float]) -> None:
    if not values:
        return
    v = np.array(values)
    print(f"{name:>26}: n={len(v):2d} median {np.median(v):+6.1f}%  above 0 in {int((v > 0).sum())}/{len(v)}  "
          f"[{', '.join(f'{x:+.1f}' for x in v)}]")


def report(rows: list[dict[str, Any]]) -> None:
    by_round: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in rows:
        by_round[row["round"]][row["state"]] = row
    states = sorted({row["state"] for row in rows}, key=STATES.index)
    for state in states:
        if state != "U":
            show(f"{state} post vs U post", [100 * (r[state]["post"] / r["U"]["post"] - 1)
                                             for r in by_round.values() if state in r and "U" in r])
        for later, earlier in (("post", "pre"), ("mid", "pre"), ("late", "pre"), ("late", "mid"), ("late1", "pre"),
                               ("late2", "pre")):
            show(f"{state} {later} vs {earlier}", [100 * (r[state][later] / r[state][earlier] - 1)
                                                   for r in by_round.values() if later in r.get(state, {})])
        if state in WINDOW_LEVELS:
            for upper, lower in ((4, 1), (2, 1), (3, 2), (4, 3)):
                high, low = f"lv{upper}", f"lv{lower}"
                show(f"{state} level {upper} vs {lower}", [100 * (r[state][high] / r[state][low] - 1)
                                                          for r in by_round.values()
                                                          if state in r and {high, low} <= r[state].keys()])
        for position in range(1, len(PROBE_AT)):
            for name in ("driver_query", "runtime_query", "launch"):
                later, first = f"probe{position}_{name}", f"probe0_{name}"
                deltas = [r[state][later] - r[state][first] for r in by_round.values() if later in r.get(state, {})]
                if deltas:
                    label = f"{state} probe{position} {name}"
                    print(f"{label:>26}: n={len(deltas):2d} median {np.median(deltas):+7.0f} ns per call against "
                          f"probe0 [{', '.join(f'{d:+.0f}' for d in deltas)}]")
        if state == "D":
            codes = {r["D"].get("finalize_result") for r in by_round.values() if "D" in r}
            print(f"{'D cuptiFinalize returned':>26}: {sorted(codes, key=str)}")
        if state in "THA":
            for kind in ("on3", "on2", "on_after_off", "off_after_on", "off2"):
                show(f"{state} {kind} vs off3", [100 * (r[state][kind] / r[state]["off3"] - 1)
                                                 for r in by_round.values() if kind in r.get(state, {})])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("seconds", type=float, help="start new rounds until this much time has passed")
    parser.add_argument("iterations", type=int, help=f"PPO iterations per child (at least {IDLE_AT + 6})")
    parser.add_argument("states", help=f"one letter per state, from {STATES}")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--fresh", action="store_true", help="a fresh interpreter per child instead of a fork")
    parser.add_argument("--child", type=int, metavar="ROUND", help=argparse.SUPPRESS)  # a --fresh child
    args = parser.parse_args()
    unknown = set(args.states) - set(STATES)
    if unknown or args.iterations < IDLE_AT + 6:
        parser.error(f"states from {STATES} (got {args.states!r}) and iterations >= {IDLE_AT + 6} "
                     f"(got {args.iterations})")
    if args.child is not None:
        write_child(args.states, args.child, args.out, args.iterations, args.device)
        return
    if not args.fresh:
        import stable_baselines3  # noqa: F401  imported once here, before any fork; CUDA is left untouched
        import torch  # noqa: F401

    args.out.mkdir(parents=True, exist_ok=True)
    order, rows, started = list(args.states), [], time.time()
    shuffle = random.Random(0).shuffle
    with open(args.out / "states.jsonl", "a") as log:
        round_ = 0
        while time.time() - started < args.seconds:
            shuffle(order)
            for state in order:
                row = run_in_child(state, round_, args.out, args.iterations, args.device, args.fresh)
                if row is None:
                    print(f"round {round_} state {state}: the child failed", flush=True)
                    continue
                rows.append(row)
                log.write(json.dumps(row) + "\n")
                log.flush()
                print(f"{time.time() - started:5.0f} s: round {round_} {state}: {row['post']:.1f} ms per iteration",
                      flush=True)
            round_ += 1
    report(rows)


if __name__ == "__main__":
    main()
