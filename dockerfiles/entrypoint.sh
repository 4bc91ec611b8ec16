#!/usr/bin/env bash
# Container entry: install the mounted checkout (builds csrc/ once, cached in build/), then run.
set -euo pipefail
cd /rlscope
if ! python -c "import rlscope._cartpole_cpu" 2>/dev/null; then
  pip install --quiet --no-build-isolation -e '.[rl,dev]'
fi
exec "$@"
