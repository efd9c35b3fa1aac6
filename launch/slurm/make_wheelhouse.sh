#!/bin/bash
# A wheelhouse for train.sbatch's WHEELHOUSE: the distributions the project needs that the job's image
# lacks, pinned to the versions pip chose against that image, and nothing else (never torch).
# Run it once inside the image the job will run (same Python, same torch), where there is internet:
#   srun --container-image=nvcr.io#nvidia/pytorch:26.09-py3 --container-mounts=/shared:/shared \
#       bash launch/slurm/make_wheelhouse.sh /shared/wheelhouse
# Writes DIR/plan.json (pip's own installation report), DIR/requirements.txt (name==version per line) and
# the files pip downloaded for them. The job installs exactly those, offline, with --no-deps.
set -euo pipefail
if [[ $# -lt 1 || -z $1 ]]; then
  echo "error: no output directory given; usage: bash launch/slurm/make_wheelhouse.sh DIR" >&2
  exit 2
fi
OUT=$1
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if ! mkdir -p "$OUT" 2>/dev/null || ! [[ -w $OUT ]] || ! touch "$OUT/.write-test" 2>/dev/null; then
  echo "error: $OUT: cannot create or write the directory; allowed: a writable directory" >&2
  exit 2
fi
rm -f "$OUT/.write-test"
# pip's resolution against what this image has installed: only what is missing or too old is planned
python -m pip install --dry-run --quiet --report "$OUT/plan.json" "$REPO"
python - "$OUT/plan.json" "$OUT/requirements.txt" <<'PY'
import json
import sys

plan = json.load(open(sys.argv[1], encoding="utf-8"))
pins = []
for item in plan["install"]:
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    if name.lower().replace("_", "-") == "fabric-harness":
        continue  # the job runs the checkout it was submitted from
    if name.lower() == "torch":
        sys.exit(f"error: pip would replace this image's torch with torch {version}; the project keeps the "
                 "image's torch: use an image whose torch meets the project's floor (docs/containers.md)")
    pins.append(f"{name}=={version}")
with open(sys.argv[2], "w", encoding="utf-8") as f:
    f.write("".join(p + "\n" for p in pins))
print(f"[wheelhouse] {len(pins)} distributions the image lacks: {' '.join(pins) or 'none'}")
PY
if [[ -s $OUT/requirements.txt ]]; then
  python -m pip download --quiet --no-deps --dest "$OUT" -r "$OUT/requirements.txt"
fi
echo "[wheelhouse] $OUT: use WHEELHOUSE=$OUT with launch/slurm/train.sbatch"
