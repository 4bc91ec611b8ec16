#!/usr/bin/env bash
# RL-Scope paper, Fig. 11: corrected and raw profiled time against uninstrumented runs.
# Usage: experiments/experiment_overhead_correction.sh [quick|full] [extra `rlscope run` options]
# Figures: output/artifacts/experiment_overhead_correction/ (`--output DIR` moves the whole tree).
exec "$(dirname "$0")/run_manifest.sh" configs/overhead_correction.yaml "$@"
