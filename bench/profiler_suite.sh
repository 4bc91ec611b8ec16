#!/usr/bin/env bash
# The profiler benchmarks recorded in docs/results/profiler.md, in one go.
# Usage: bench/profiler_suite.sh [PYTHON] [OUT]   (default: $VENV/bin/python, VENV as for make)
# With OUT, each benchmark also writes its JSON record there (OUT/disabled_api.json, ...); a
# folder under docs/results/profiler/ per machine is what bench/tables_profiler.py reads.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${1:-${VENV:-.venv}/bin/python}"
out="${2:-}"
json() { if [ -n "$out" ]; then echo "--json $out/$1.json"; fi; }
echo "== $(date -u +%Y-%m-%dT%H:%MZ) $(uname -m) $(nproc) cores; $("$py" --version)"
# shellcheck disable=SC2046  # json's words are meant to split
echo "== disabled annotations"; "$py" bench/disabled_api.py $(json disabled_api)
# shellcheck disable=SC2046
echo "== profiling overhead"; "$py" bench/profiling_overhead.py --python "$py" --steps 20000 --rounds 5 \
  $(json profiling_overhead)
# shellcheck disable=SC2046
echo "== analysis throughput"; "$py" bench/analysis_throughput.py --repeat 3 $(json analysis_throughput)
