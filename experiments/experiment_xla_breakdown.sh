#!/usr/bin/env bash
# Paper "Optimizing Data Collection in Deep RL", Fig. 5: rlscope breakdown of JAX data collection vs K.
# Usage: experiments/experiment_xla_breakdown.sh [quick|full] [extra `rlscope run` options]
# Figures: output/artifacts/experiment_xla_breakdown/ (`--output DIR` moves the whole tree).
exec "$(dirname "$0")/run_manifest.sh" configs/xla_breakdown.yaml "$@"
