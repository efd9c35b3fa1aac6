#!/usr/bin/env bash
# Builds (once) the virtual environment holding NeMo 2 (nemo-toolkit 2.7.3, the last release with
# nemo.collections.llm) next to CPU torch, and prints its python. NeMo pins transformers, numpy, pyarrow
# and more, so it never goes into the project's own environment; tests/launch/test_nemo.py runs the
# translation checks in this venv through a subprocess. Reused while its stamp matches the requirements.
#   tools/nemo_venv.sh            # -> path of the venv's python
set -euo pipefail
PY=${PYTHON:-python3}
TAG=$("$PY" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')
VENV=${FABRIC_HARNESS_NEMO_VENV:-$HOME/.cache/fabric-harness/nemo2-$TAG}
# torch first and alone, so pip keeps the CPU build and never pulls CUDA wheels; then NeMo with the two
# pins it needs to resolve on Python 3.11 (pyarrow>=20 and newer leptonai break nemo_run's imports)
TORCH_REQ="torch==2.13.0"
NEMO_REQS=("nemo-toolkit[nlp,run]==2.7.3" "pyarrow<20" "leptonai==0.27.3")
STAMP="$TORCH_REQ ${NEMO_REQS[*]}"
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.fabric-harness-stamp" 2>/dev/null)" = "$STAMP" ]; then
  echo "$VENV/bin/python"; exit 0
fi
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"; flock 9   # one builder at a time (parallel test sessions)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.fabric-harness-stamp" 2>/dev/null)" = "$STAMP" ]; then
  echo "$VENV/bin/python"; exit 0
fi
rm -rf "$VENV"
start=$(date +%s)
{
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "$TORCH_REQ"
  "$VENV/bin/pip" install -q "$TORCH_REQ" "${NEMO_REQS[@]}"
} 1>&2
echo "$STAMP" > "$VENV/.fabric-harness-stamp"
echo "[nemo_venv] built $VENV in $(( $(date +%s) - start )) s" >&2
echo "$VENV/bin/python"
