#!/usr/bin/env bash
# Paper "Optimizing Data Collection in Deep RL", Fig. 2: brax environments beside CartPole under XLA.
# Usage: experiments/experiment_simulator_comparison.sh [quick|full] [extra `rlscope run` options]
# Figures: output/artifacts/experiment_simulator_comparison/ (`--output DIR` moves the whole tree).
exec "$(dirname "$0")/run_manifest.sh" configs/simulator_comparison.yaml "$@"
