#!/usr/bin/env bash
# RL-Scope paper, scale-up: M actor processes and a learner on one GPU; nvidia-smi against true GPU-bound time.
# Usage: experiments/experiment_scale_up.sh [quick|full] [extra `rlscope run` options]
# Figures: output/artifacts/experiment_scale_up/ (`--output DIR` moves the whole tree).
exec "$(dirname "$0")/run_manifest.sh" configs/scale_up.yaml "$@"
