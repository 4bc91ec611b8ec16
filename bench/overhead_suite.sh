#!/usr/bin/env bash
# Overhead calibration and correction on a GPU machine: the calibration and CUPTI tests (sys.monitoring on
# Python 3.12+), then the validation experiment for the given workloads. Results go to $OUT.
#   WORKLOADS="sb3_ppo_cuda jax_loop" SCALE=quick REPS=2 OUT=out bench/overhead_suite.sh
set -u
OUT=${OUT:-out}
SCALE=${SCALE:-quick}
REPS=${REPS:-2}
WORKLOADS=${WORKLOADS:-gym_numpy sb3_a2c sb3_ppo_cuda jax_loop}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
$PY -m pytest -q tests/test_windows.py tests/test_calibrate_*.py tests/test_python_collector.py tests/test_gpu_collector_gpu.py 2>&1 \
  | tail -15 | tee "$OUT/tests.txt"
list=$(echo "$WORKLOADS" | sed 's/ /, /g')
manifest="$OUT/overhead_correction.yaml"
# The experiment's manifest with the chosen workloads and repetitions, at both scales.
sed -e "s/^\( *workload: \)\[.*\]/\1[$list]/" -e "s/^\( *repetitions: \)[0-9]*/\1$REPS/" \
  configs/overhead_correction.yaml > "$manifest"
# SIGINT on time-out: the runner then writes results.csv for the runs that finished.
timeout -s INT "${BUDGET_S:-3600}" $PY -m rlscope.cli run "$manifest" --scale "$SCALE" --output "$OUT/runs" 2>&1 \
  | tail -8
