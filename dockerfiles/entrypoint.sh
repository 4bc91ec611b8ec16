#!/usr/bin/env bash
# Container entry: bring the image's environment up to date with the mounted checkout (the same
# `make install` as CI; a no-op unless csrc/ or the packaging changed), check the machine, then run.
set -euo pipefail
cd /rlscope
make --no-print-directory install
rlscope doctor --scale "${RLSCOPE_SCALE:-quick}" || echo "rlscope doctor: see above; quick scale still runs on the CPU" >&2
exec "$@"
