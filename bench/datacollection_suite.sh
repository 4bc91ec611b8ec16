#!/usr/bin/env bash
# The data-collection study on a GPU machine: checks, the side-by-side benchmark, Nsight Compute
# counts for the roofline, the measurements that explain where we differ from the paper
# (bench/claims_evidence.py, rows in $OUT/evidence.csv), and the manifests at full scale. Results
# go to $OUT (default ./out).
#   STAGES="tests compare roofline" OUT=out bench/datacollection_suite.sh
#   STAGES="evidence" OUT=out bench/datacollection_suite.sh
#   STAGES="manifests" MANIFESTS="kernel_fusion simulator_complexity" bench/datacollection_suite.sh
#   STAGES="manifests" MANIFESTS=gpu_vectorization SET="--set num_envs=1048576" RUNS=out/runs_2e20 ...
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
if has evidence; then
  # UNTIL (epoch seconds), if set, bounds the whole stage: each step gets what is left of it.
  limit() { local l=$1; [[ -n ${UNTIL:-} ]] && (( UNTIL - $(date +%s) < l )) && l=$(( UNTIL - $(date +%s) )); echo "$l"; }
  E="$OUT/evidence.csv"
  evidence() {  # SECONDS ARGS...: one bench/claims_evidence.py command, its log to evidence.log
    local l; l=$(limit "$1"); shift
    (( l >= 10 )) || { echo "evidence: no time left for $1" | tee -a "$OUT/evidence.log"; return 124; }
    timeout "$l" $PY bench/claims_evidence.py "$@" >>"$OUT/evidence.log" 2>&1 || { echo "evidence $1 failed (see evidence.log)"; return 1; }
  }
  count() {  # CSV SECONDS METRICS NCU_ARGS... -- TARGET_ARGS...: ncu over one target, its CSV to $OUT
    local csv=$1 l metrics=$3 args=()
    l=$(limit "$2")
    shift 3
    while [[ $1 != -- ]]; do args+=("$1"); shift; done
    shift
    (( l >= 10 )) || { echo "evidence: no time left for ncu $*" | tee -a "$OUT/evidence.log"; return 124; }
    timeout "$l" ncu --csv --print-units base --clock-control none --metrics "$metrics" "${args[@]}" \
      $PY bench/claims_evidence.py ncu-target "$@" >"$OUT/$csv" 2>>"$OUT/ncu.log"
  }
  evidence 120 dispatch --out "$E"
  evidence 120 cpp-split --out "$E"
  evidence 120 rates --out "$E"
  traffic=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum
  counters=launch__registers_per_thread,launch__occupancy_limit_registers,launch__grid_size
  counters=$counters,sm__warps_active.avg.pct_of_peak_sustained_active,sm__maximum_warps_per_active_cycle_pct
  counters=$counters,l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum,l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum
  counters=$counters,lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed,$traffic
  basic=launch__registers_per_thread,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active,$traffic
  # Fused (K) and unfused (K = 1) kernels of Fig. 9; the 34 GB configuration alone, last. If a
  # counter is unknown to this ncu, once more with the basic ones.
  for configs in 4096:256,4096:2048,1048576:256 1048576:2048; do
    csv="complexity_${configs//[:,]/_}.csv"
    count "$csv" 150 "$counters" --kernel-name regex:cartpole_simulate -- complexity --configs "$configs" --fused-steps "$K"
    rc=$?
    if (( rc != 0 && rc != 124 )); then
      count "$csv" 150 "$basic" --kernel-name regex:cartpole_simulate -- complexity --configs "$configs" --fused-steps "$K"
    fi
    evidence 60 from-ncu complexity "$OUT/$csv" --out "$E"
  done
  for n in 65536 4194304; do
    count "fused_$n.csv" 90 "$traffic" --kernel-name regex:cartpole_simulate --launch-skip 1 --launch-count 1 \
      -- fused --num-envs "$n" --fused-steps "$K"
    evidence 60 from-ncu fused "$OUT/fused_$n.csv" --num-envs "$n" --fused-steps "$K" --out "$E"
    # The scan's first call has compiled by then: 1500 launches in, a window of its loop.
    count "xla_$n.csv" 150 "$traffic" --launch-skip 1500 --launch-count 320 -- xla --num-envs "$n" --fused-steps "$K"
    evidence 60 from-ncu xla "$OUT/xla_$n.csv" --num-envs "$n" --fused-steps "$K" --out "$E"
  done
fi
if has manifests; then
  for m in $MANIFESTS; do
    echo "== $m ($SCALE)"
    # SIGINT on time-out: the runner then writes results.csv for the runs that finished.
    timeout -s INT "${BUDGET_S:-3600}" $PY -m rlscope.cli run "configs/$m.yaml" --scale "$SCALE" ${SET:-} \
      --output "${RUNS:-$OUT/runs}" 2>&1 | tail -6
  done
fi
