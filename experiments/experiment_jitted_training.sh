#!/usr/bin/env bash
# Issue 54's case study: PPO on CartPole compiled whole in jax.jit (per-scope GPU time via
# --jax-scopes) against Stable-Baselines3 and SBX, to the same number of environment steps.
# Usage: experiments/experiment_jitted_training.sh [quick|full] [extra `rlscope run` options]
# Figures: output/artifacts/experiment_jitted_training/ (`--output DIR` moves the whole tree).
exec "$(dirname "$0")/run_manifest.sh" configs/jitted_training.yaml "$@"
