#!/usr/bin/env bash
# RL-Scope paper, Fig. 5: SB3 PPO, A2C, SAC, TD3 and DDPG on MuJoCo Walker2d, per operation and layer.
# Usage: experiments/experiment_algorithm_choice.sh [quick|full] [extra `rlscope run` options]
# Figures: output/artifacts/experiment_algorithm_choice/ (`--output DIR` moves the whole tree).
exec "$(dirname "$0")/run_manifest.sh" configs/algorithm_choice.yaml "$@"
