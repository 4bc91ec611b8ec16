#!/usr/bin/env bash
# RL-Scope paper, Fig. 7: SB3 PPO on CartPole, Atari Pong and four MuJoCo robots, per operation and layer.
# Usage: experiments/experiment_simulator_choice.sh [quick|full] [extra `rlscope run` options]
# Figures: output/artifacts/experiment_simulator_choice/ (`--output DIR` moves the whole tree).
exec "$(dirname "$0")/run_manifest.sh" configs/simulator_choice.yaml "$@"
