#!/usr/bin/env bash
# RL-Scope paper, Fig. 7: SB3 PPO on CartPole, Atari Pong and four MuJoCo robots, per operation and layer.
# Usage: experiments/experiment_simulator_choice.sh [quick|full] [extra `rlscope run` options]
# Figures: output/artifacts/experiment_simulator_choice/ (`--output DIR` moves the whole tree).
set -euo pipefail
cd "$(dirname "$0")/.."
scale="${1:-quick}"
shift || true
make --no-print-directory install
exec .venv/bin/rlscope run configs/simulator_choice.yaml --scale "$scale" "$@"
