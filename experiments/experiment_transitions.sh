#!/usr/bin/env bash
# Paper "Optimizing Data Collection in Deep RL", Fig. 6: Python->Backend, CUDA API calls and kernels per iteration vs K.
# Usage: experiments/experiment_transitions.sh [quick|full] [extra `rlscope run` options]
# Figures: output/artifacts/experiment_transitions/ (`--output DIR` moves the whole tree).
exec "$(dirname "$0")/run_manifest.sh" configs/transitions.yaml "$@"
