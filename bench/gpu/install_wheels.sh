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
# Where the image's environment is read-only (another user, a read-only mount), the wheels go to SITE instead, which
# run.sh puts on PYTHONPATH, and the project is imported from the checkout (run.sh puts it on PYTHONPATH too).
SITE=${FABRIC_HARNESS_SITE:-/tmp/fabric-harness-site}
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
writable=$("$PY" -c "import os, sysconfig; print(int(os.access(sysconfig.get_paths()['purelib'], os.W_OK)))")
mapfile -t new < <("$PY" bench/gpu/wheel_reqs.py missing "$WHEELS" | sed '/^$/d')  # none: no line
echo "${#new[@]} wheels of packages this Python lacks: ${new[*]##*/}"
if [ "$writable" = 1 ]; then
  if [ ${#new[@]} -gt 0 ]; then
    "$PY" -m pip install --no-index --no-deps --no-cache-dir "${new[@]}"
  fi
  # setuptools for the isolated build comes from the wheels directory
  "$PY" -m pip install --no-index --no-deps --no-cache-dir --find-links "$WHEELS" -e .
else
  echo "this Python's site-packages is not writable: installing into $SITE (on PYTHONPATH), the project from the checkout"
  if [ ${#new[@]} -gt 0 ]; then
    "$PY" -m pip install --no-index --no-deps --no-cache-dir --no-compile --target "$SITE" "${new[@]}"
  fi
fi
"$PY" -m pip check || echo "(pip check: the mismatches above are left as they are; the image's versions stay)"
# what the benchmark imports, against the image's own versions (datasets reads the Llama token rows): a failure
# here names the package in install.log before any GPU step spends its minutes on it
"$PY" - <<'PYEOF'
import importlib
from importlib.metadata import version

from trainer.compat import prepare_torchvision

prepare_torchvision(False)  # as the harness does: a torchvision of another torch build must not break peft
bad = []
for module, dist in (("datasets", "datasets"), ("liger_kernel.transformers", "liger-kernel"),
                     ("deepspeed", "deepspeed"), ("peft", "peft"), ("transformers", "transformers")):
    try:
        importlib.import_module(module)
        print(f"import {module}: ok ({dist} {version(dist)})")
    except Exception as exc:  # noqa: BLE001 - any import failure is reported, by name
        bad.append(f"import {module}: {type(exc).__name__}: {exc}")
for line in bad:
    print("error:", line)
raise SystemExit(1 if bad else 0)
PYEOF
