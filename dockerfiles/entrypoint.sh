#!/usr/bin/env bash
# Container entry: bring the image's environment up to date with the mounted checkout (the same
# `make install` as CI; a no-op unless the native code or the packaging differ from the image's),
# check the machine when a shell opens, then run the command.
set -euo pipefail
cd /rlscope
umask 0002
# A rebuild of the native code at run time goes to HOME, never to the checkout's build/ (the host's).
export SKBUILD_BUILD_DIR="$HOME/.cache/rlscope-build"
make --no-print-directory install >&2  # the command's stdout stays its own
if [ "$#" -eq 0 ] || [ "$*" = bash ]; then
  rlscope doctor --scale "${RLSCOPE_SCALE:-quick}" || echo "rlscope doctor: see above; quick scale still runs on the CPU" >&2
fi
exec "$@"
