#!/usr/bin/env bash
# RL-Scope paper, Fig. 4: TD3 and DDPG on MuJoCo Walker2d in SB3 (PyTorch eager), SB3 + torch.compile and SBX (JAX).
# Usage: experiments/experiment_RL_framework_comparison.sh [quick|full] [extra `rlscope run` options]
# Figures: output/artifacts/experiment_RL_framework_comparison/ (`--output DIR` moves the whole tree).
exec "$(dirname "$0")/run_manifest.sh" configs/rl_framework_comparison.yaml "$@"
