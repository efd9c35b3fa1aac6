#!/usr/bin/env bash
# run.sh's install step: from bench/gpu/wheels/ (fetch_wheels.sh), offline, only the packages this Python lacks,
# each without its dependencies, then the project itself (editable, no dependencies). The GPU image's own
# packages are never replaced or resolved against: a version bound of a carried wheel (datasets' fsspec<=...,
# say) cannot make pip reach for a wheel that was pruned, and the image's torch, Triton, transformers and
# torchvision stay as they are. `pip check` then lists what does not match, for the log only.
#   PYTHON=python3 bash bench/gpu/install_wheels.sh [WHEELS_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
WHEELS=${1:-bench/gpu/wheels}
mapfile -t new < <("$PY" bench/gpu/wheel_reqs.py missing "$WHEELS")
echo "${#new[@]} wheels of packages this Python lacks: ${new[*]##*/}"
if [ ${#new[@]} -gt 0 ]; then
  "$PY" -m pip install --no-index --no-deps --no-cache-dir "${new[@]}"
fi
# setuptools for the isolated build comes from the wheels directory
"$PY" -m pip install --no-index --no-deps --no-cache-dir --find-links "$WHEELS" -e .
"$PY" -m pip check || echo "(pip check: the mismatches above are left as they are; the image's versions stay)"
