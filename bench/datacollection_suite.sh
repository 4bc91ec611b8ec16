#!/usr/bin/env bash
# The data-collection study on a GPU machine: checks, the side-by-side benchmark, Nsight Compute
# counts for the roofline, and the manifests at full scale. Results go to $OUT (default ./out).
#   STAGES="tests compare roofline" OUT=out bench/datacollection_suite.sh
#   STAGES="manifests" MANIFESTS="kernel_fusion simulator_complexity" bench/datacollection_suite.sh
set -u
OUT=${OUT:-out}
STAGES=${STAGES:-tests compare roofline manifests}
MANIFESTS=${MANIFESTS:-kernel_fusion simulator_complexity xla_breakdown transitions simulator_comparison gpu_vectorization}
SCALE=${SCALE:-full}
PY=${PY:-python3}
N=${N:-4194304}
K=${K:-1000}
has() { [[ " $STAGES " == *" $1 "* ]]; }
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
if has tests; then
  $PY -m pytest -q -m gpu tests/test_cartpole_dynamics.py tests/test_simulator_knobs.py 2>&1 | tail -25 | tee "$OUT/tests.txt"
fi
if has compare; then
  $PY bench/datacollection.py compare --num-envs "$N" --fused-steps "$K" | tee "$OUT/compare.jsonl"
fi
if has roofline; then
  metrics=smsp__thread_inst_executed.sum,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum
  metrics=$metrics,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum,smsp__sass_thread_inst_executed_op_fmul_pred_on.sum
  metrics=$metrics,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,gpu__time_duration.sum
  profile() {  # LABEL K ARGS...
    ncu --csv --clock-control none --metrics "$metrics" --kernel-name regex:cartpole_simulate \
      --launch-skip 1 --launch-count 1 $PY bench/datacollection.py ncu-target "${@:3}" --num-envs "$N" \
      >"$OUT/$1__${N}__$2.csv" 2>>"$OUT/ncu.log" || echo "ncu failed for $1 (see ncu.log)"
  }
  profile fused "$K" fused --fused-steps "$K"
  profile fused-fast "$K" fused --fused-steps "$K" --fast
  profile unfused 1 unfused
  $PY bench/datacollection.py roofline "$OUT/compare.jsonl" "$OUT"/*__"$N"__*.csv | tee "$OUT/roofline.jsonl"
fi
if has manifests; then
  for m in $MANIFESTS; do
    echo "== $m ($SCALE)"
    # SIGINT on time-out: the runner then writes results.csv for the runs that finished.
    timeout -s INT "${BUDGET_S:-3600}" $PY -m rlscope.cli run "configs/$m.yaml" --scale "$SCALE" \
      --output "$OUT/runs" 2>&1 | tail -6
  done
fi
