#!/usr/bin/env bash
# On a machine with PyPI: download into bench/gpu/wheels/ (gitignored) everything bench/gpu/run.sh installs
# on a GPU machine that has Python and torch but nothing else of ours. Then copy the checkout, wheels
# included, to the GPU machine and run `bash bench/gpu/run.sh` there.
#   bash bench/gpu/fetch_wheels.sh [PYTHON_VERSION] [TORCH_VERSION]   (defaults: 3.12 2.11.0)
# Wheels only, for the GPU machine's Python (pip download --python-version ... --only-binary=:all:); DeepSpeed,
# which PyPI ships as an sdist only, is built into a wheel here without compiling any op. torch
# itself is never downloaded: a stand-in torch of TORCH_VERSION satisfies whatever requires it.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${1:-3.12}
TORCH=${2:-2.11.0}
WHEELS=bench/gpu/wheels
mkdir -p "$WHEELS"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python bench/gpu/wheel_reqs.py standin "$tmp/standin" "$TORCH+standin" >/dev/null
echo "torch==$TORCH+standin" > "$tmp/constraints.txt"  # only the stand-in can satisfy it: PyPI's torch is never chosen
mapfile -t reqs < <(python bench/gpu/wheel_reqs.py project)
target=(--python-version "$PY" --only-binary=:all: --find-links "$tmp/standin" -c "$tmp/constraints.txt")
echo "wheels for Python $PY into $WHEELS: ${reqs[*]}"
python -m pip download --quiet -d "$WHEELS" "${target[@]}" "${reqs[@]}"
python -m pip download --quiet -d "$tmp/sdist" --no-deps --no-binary=:all: "deepspeed>=0.19"
# its wheel built here, without ops (pure Python: py3-none-any), so the GPU machine installs rather than builds
DS_BUILD_OPS=0 python -m pip wheel --quiet --no-deps -w "$WHEELS" "$tmp"/sdist/deepspeed-*.tar.gz
mapfile -t ds_reqs < <(python bench/gpu/wheel_reqs.py sdist "$(ls "$tmp"/sdist/deepspeed-*.tar.gz)")
python -m pip download --quiet -d "$WHEELS" "${target[@]}" "${ds_reqs[@]}"
# liger-kernel (model.kernels=liger) and torchvision (ResNet-50) without dependencies: the GPU machine's own
# torch and Triton serve them
python -m pip download --quiet -d "$WHEELS" --no-deps --python-version "$PY" --only-binary=:all: "liger-kernel>=0.8" \
  "torchvision==$(python bench/gpu/wheel_reqs.py torchvision "$TORCH").*"
rm -f "$WHEELS"/torch-*standin*.whl
python bench/gpu/wheel_reqs.py prune "$WHEELS"  # the image's own packages need not travel (64 MiB carry)
echo "$(ls "$WHEELS" | wc -l) files, $(du -sh "$WHEELS" | cut -f1) in $WHEELS"
