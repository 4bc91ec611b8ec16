#!/usr/bin/env bash
# RL-Scope paper, Fig. 5: SB3 PPO, A2C, SAC, TD3 and DDPG on MuJoCo Walker2d, per operation and layer.
# Usage: experiments/experiment_algorithm_choice.sh [quick|full] [extra `rlscope run` options]
# Figures: output/artifacts/experiment_algorithm_choice/ (`--output DIR` moves the whole tree).
set -euo pipefail
cd "$(dirname "$0")/.."
scale="${1:-quick}"
shift || true
make --no-print-directory install
exec .venv/bin/rlscope run configs/algorithm_choice.yaml --scale "$scale" "$@"
