#!/usr/bin/env bash
# Beyond both papers: data collection with the MLP policy fused into the simulator's kernel, vs N.
# Usage: experiments/experiment_fused_inference.sh [quick|full] [extra `rlscope run` options]
# Figures: output/artifacts/experiment_fused_inference/ (`--output DIR` moves the whole tree).
exec "$(dirname "$0")/run_manifest.sh" configs/fused_inference.yaml "$@"
