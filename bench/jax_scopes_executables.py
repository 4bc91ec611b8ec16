"""What `--jax-scopes` changes in a compiled step, in one process: the jitted PPO step compiled
twice from one lowering, once as `rlscope prof` compiles it and once with the XLA dump options the
default mode sets, their optimised HLO compared, and the two executables timed alternately.

    python bench/jax_scopes_executables.py [--envs 256] [--steps 128] [--pairs 40] \\
        [--block 5] [--out docs/results/jax_scopes/executables_RECORD.json] [--tree COMMIT]

Why: the default mode adds no hook that runs while the step runs. It sets XLA's dump flags and
turns JAX's compilation cache off, both read by the compiler only, and registers a
``jax.monitoring`` listener that JAX calls for the events it records. What it could cost at run
time is a different executable, or events recorded per call. Between processes the per-iteration
time of one command varies far more than the goal's 5% (``jax_scopes.py --cost-only``), and
XLA reads its flags once per process, so the two modes cannot alternate in one. The same
lowering compiled with ``compiler_options`` that hold the dump options can: the record holds
whether the two compiled modules' text is identical (the second compile may reuse the first's
autotuning results in one process, so this shows that dumping changes nothing else), how many
files the dump wrote (that it took effect), the monitoring events JAX recorded while the timed
blocks ran, and per pair of blocks (``--block`` iterations each, order alternating within
pairs so that a drift falls on both) the dumped executable's time over the plain one's: median and
its distribution-free 95% interval (``median_interval95``).

The process is profiled as `rlscope prof` profiles it (``rlscope.profile``, every layer), so the
ratio is the one the goal asks for, over `rlscope prof` without `--jax-scopes`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.run_record import gpu, settings_in_environment, write  # noqa: E402
from rlscope.calibrate.stats import median_interval95  # noqa: E402



def dump_options(directory: str) -> dict[str, Any]:
    """The XLA flags the default mode sets for its dump (``rlscope.collect.jax_scopes``), as
    compile options: the directory for ``--xla_dump_to=``, true for the others."""
    from rlscope.collect.jax_scopes import _DUMP_FLAGS

    return {flag.strip("-="): directory if flag.endswith("=") else True for flag in _DUMP_FLAGS}


def timed_block(executable: Any, carry: Any, iterations: int) -> tuple[Any, float]:
    """``iterations`` training steps of ``executable`` from ``carry``: the carry after them and the seconds."""
    began = time.perf_counter()
    for _ in range(iterations):
        carry, loss = executable(carry)
    loss.block_until_ready()
    return carry, time.perf_counter() - began


def measure(envs: int, steps: int, pairs: int, block: int, seed: int = 0) -> dict[str, Any]:
    """Compile, compare and time the two executables (see the module's docstring)."""
    import jax

    from experiments.casestudies.jitted_envs import CARTPOLE, make_env
    from experiments.casestudies.jitted_ppo import HYPERPARAMETERS, make_ppo

    ppo = make_ppo(make_env(CARTPOLE, envs), steps, **HYPERPARAMETERS)
    carry = ppo.init(seed)
    lowered = ppo.train_step.lower(carry)
    with tempfile.TemporaryDirectory(prefix="jax_scopes_dump_") as dump:
        plain = lowered.compile()
        dumped = lowered.compile(compiler_options=dump_options(dump))
        dump_files = sum(1 for p in Path(dump).rglob("*") if p.is_file())
    same_text = plain.as_text() == dumped.as_text()
    for executable in (plain, dumped):  # the first calls of each (allocations, module loading) untimed
        carry, _ = timed_block(executable, carry, block)
    events: list[str] = []

    def listen(event: str, *_: Any, **__: Any) -> None:
        events.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    ratios, seconds = [], {"plain": [], "dumped": []}
    try:
        for pair in range(pairs):
            order = (("plain", plain), ("dumped", dumped)) if pair % 2 == 0 else (("dumped", dumped), ("plain", plain))
            for name, executable in order:
                carry, elapsed = timed_block(executable, carry, block)
                seconds[name].append(elapsed)
            ratios.append(seconds["dumped"][-1] / seconds["plain"][-1])
    finally:
        unregister = getattr(jax.monitoring, "unregister_event_duration_listener", None)
        if unregister is not None:
            unregister(listen)
    interval = median_interval95(ratios)
    return {"workload": {"envs": envs, "steps": steps, "pairs": pairs, "block": block},
            "backend": jax.default_backend(), "jax": jax.__version__,
            "optimised_hlo_identical": same_text, "dump_files": dump_files,
            "monitoring_events_while_timed": len(events), "monitoring_event_names": sorted(set(events)),
            "iteration_ms": {name: [s * 1e3 / block for s in values] for name, values in seconds.items()},
            "dumped_over_plain": {"median": statistics.median(ratios), "interval95": interval,
                                  "min": min(ratios), "max": max(ratios), "pairs": ratios}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--pairs", type=int, default=40, help="pairs of timed blocks, one of each executable")
    parser.add_argument("--block", type=int, default=5, help="training iterations per timed block")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--tree", default=None, help="the commit that ran, where the machine's git metadata lags")
    args = parser.parse_args()
    if args.pairs < 1 or args.block < 1:
        parser.error("--pairs and --block must be at least 1")
    import rlscope

    with tempfile.TemporaryDirectory(prefix="jax_scopes_prof_") as trace, rlscope.profile(trace, process="bench"):
        result = measure(args.envs, args.steps, args.pairs, args.block)
    record = {"command": " ".join(sys.argv), "gpu": gpu(), "environment": settings_in_environment(),
              **({"tree": args.tree} if args.tree else {}), **result}
    r = result["dumped_over_plain"]
    interval = r["interval95"]
    print(f"{result['backend']}: optimised HLO identical: {result['optimised_hlo_identical']}; dump files "
          f"{result['dump_files']}; monitoring events while timed {result['monitoring_events_while_timed']}; "
          f"dumped over plain {r['median']:.4f}x"
          + (f" [{interval[0]:.4f}, {interval[1]:.4f}]" if interval else "") + f" over {len(r['pairs'])} pairs",
          flush=True)
    if args.out:
        write(args.out, record)


if __name__ == "__main__":
    main()
