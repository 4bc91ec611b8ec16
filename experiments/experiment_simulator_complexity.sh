#!/usr/bin/env bash
# Paper "Optimizing Data Collection in Deep RL", Fig. 9: fusion speedup over N, K, state and compute factors.
# Usage: experiments/experiment_simulator_complexity.sh [quick|full] [extra `rlscope run` options]
# Figures: output/artifacts/experiment_simulator_complexity/ (`--output DIR` moves the whole tree).
exec "$(dirname "$0")/run_manifest.sh" configs/simulator_complexity.yaml "$@"
