#!/usr/bin/env bash
# What every experiments/experiment_<name>.sh does: install if needed, then run one manifest.
# Usage: experiments/run_manifest.sh configs/<name>.yaml [quick|full] [extra `rlscope run` options]
# The environment is $VENV, as for make (default .venv; the container's image sets /opt/venv).
set -euo pipefail
cd "$(dirname "$0")/.."
manifest="$1"
scale="${2:-quick}"
shift 2 || shift $#
export VENV="${VENV:-.venv}"
make --no-print-directory install
exec "$VENV/bin/rlscope" run "$manifest" --scale "$scale" "$@"
