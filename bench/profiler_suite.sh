#!/usr/bin/env bash
# The profiler benchmarks recorded in docs/results/profiler.md, in one go.
# Usage: bench/profiler_suite.sh [PYTHON]   (default: $VENV/bin/python, VENV as for make)
set -euo pipefail
cd "$(dirname "$0")/.."
py="${1:-${VENV:-.venv}/bin/python}"
echo "== $(date -u +%Y-%m-%dT%H:%MZ) $(uname -m) $(nproc) cores; $("$py" --version)"
echo "== disabled annotations"; "$py" bench/disabled_api.py
echo "== profiling overhead"; "$py" bench/profiling_overhead.py --python "$py" --steps 20000 --rounds 5
echo "== analysis throughput"; "$py" bench/analysis_throughput.py --repeat 3
