#!/usr/bin/env bash
# Every GPU-collector check and measurement, on a GPU machine; JSON lines to $RESULTS.
#   RESULTS=out/gpu.jsonl WORK=/tmp/gpu bench/gpu_collector_suite.sh
# CHECKS picks what runs (default: all). Profiling overhead: bench/gpu_overhead.py.
set -u
RESULTS=${RESULTS:-gpu_collector.jsonl}
WORK=${WORK:-$(mktemp -d)}
CHECKS=${CHECKS:-compare conflict fixtures utilisation drift}
PY=${PY:-python3}
has() { [[ " $CHECKS " == *" $1 "* ]]; }
run() { timeout "$1" "${@:2}" >>"$RESULTS" 2>>"$WORK/stderr.log" || echo "{\"failed\": \"${*:2}\", \"rc\": $?}" >>"$RESULTS"; }
mkdir -p "$WORK"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
if has compare; then
  run 300 $PY bench/gpu_collector.py torch-compare 300 "$WORK/torch"
  run 300 $PY bench/gpu_collector.py torch-compare 300 "$WORK/torch"
  run 300 $PY bench/gpu_collector.py jax-compare 300 "$WORK/jax"
fi
has conflict && run 120 $PY bench/gpu_collector.py conflict "$WORK/conflict"
has fixtures && run 120 $PY bench/gpu_collector.py fixtures "$WORK/fixtures"
has utilisation && run 120 $PY bench/gpu_collector.py utilisation 4 "$WORK/util"
has drift && run 200 $PY bench/gpu_collector.py drift 60 "$WORK/drift"
echo "results: $RESULTS; logs: $WORK/stderr.log"
