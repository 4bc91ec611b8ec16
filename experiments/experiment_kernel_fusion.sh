#!/usr/bin/env bash
# Paper "Optimizing Data Collection in Deep RL", Fig. 8: simulation throughput vs N, K steps per call.
# Usage: experiments/experiment_kernel_fusion.sh [quick|full] [extra `rlscope run` options]
# Figures: output/artifacts/experiment_kernel_fusion/ (`--output DIR` moves the whole tree).
exec "$(dirname "$0")/run_manifest.sh" configs/kernel_fusion.yaml "$@"
