"""The precise mode with XLA's command buffers left on, which `--jax-scopes=precise` never does:
how much of a jitted step's kernel time XLA's per-thunk NVTX ranges still place once thunks run
inside CUDA graphs. A diagnostic for docs/results/jax-scopes.md, not a mode users get.

    python bench/jax_precise_graphs_on.py TRACE [--envs 256 --steps 128 --iterations 20]
    python bench/jax_scopes.py --traces DEFAULT_TRACE TRACE --out RECORD.json

The precise mode switches command buffers off by appending ``--xla_gpu_enable_command_buffer=``
to XLA_FLAGS (``rlscope.collect.jax_scopes``); here that flag is swapped for one the mode sets
anyway, so XLA keeps its default command buffers. The workload is the jitted PPO of
``experiments/casestudies/jitted_ppo.py``, profiled in this process from before its first compile.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import rlscope  # noqa: E402
import rlscope.collect.jax_scopes as jax_scopes  # noqa: E402


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        raise SystemExit(__doc__.split("\n\n")[1])
    trace, workload_args = Path(sys.argv[1]), sys.argv[2:] or ["--envs", "256", "--steps", "128", "--iterations", "20"]
    jax_scopes._COMMAND_BUFFER_FLAG = "--xla_dump_hlo_as_text"  # set by the mode already: a repeat, no switch
    from experiments.casestudies import jitted_ppo

    with rlscope.profile(trace, process="jitted_ppo", jax_scopes="precise"):
        jitted_ppo.main(workload_args)


if __name__ == "__main__":
    main()
