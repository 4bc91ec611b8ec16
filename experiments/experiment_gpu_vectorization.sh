#!/usr/bin/env bash
# Paper "Optimizing Data Collection in Deep RL", Fig. 4: CartPole data-collection throughput vs N.
# Usage: experiments/experiment_gpu_vectorization.sh [quick|full] [extra `rlscope run` options]
# Figures: output/artifacts/experiment_gpu_vectorization/ (`--output DIR` moves the whole tree).
exec "$(dirname "$0")/run_manifest.sh" configs/gpu_vectorization.yaml "$@"
