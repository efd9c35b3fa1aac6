#!/usr/bin/env bash
# The GPU checks in one command, on one H100/H200, from a bare machine that has Python and torch but none
# of our other dependencies, inside 25 minutes:
#   bash bench/gpu/run.sh [--no-install] [--layers N] [--steps N] [--out DIR]
# 1. install   the project and its dependencies from bench/gpu/wheels/ (bench/gpu/fetch_wheels.sh fills
#              it on a machine with PyPI; nothing is downloaded here)
# 2. pytest    pytest -m gpu tests/gpu (NCCL world of 1 with telemetry, NVML energy and power, bf16,
#              activation checkpointing, FSDP2 memory with the tracer on and off, DeepSpeed ZeRO-3)
# 3-5.         Llama-3-8B-shaped LoRA (random init, seq 2048, bf16; --layers cuts the 32 layers to fit
#              the time): the harness with telemetry on, with telemetry off, and a plain transformers +
#              peft loop (bench/gpu/plain_lora.py) on the same shapes and token rows
# 6. report    bench/gpu/RESULTS.md: machine, date, each step's outcome and numbers
# Every step has its own time limit, and the whole run a budget of 24 minutes. Where there is no CUDA GPU
# every step prints `skipped: <reason>` and the script exits 0 (tests/gpu/test_run_sh.py runs that).
set -u
cd "$(dirname "$0")/../.."
INSTALL=1 LAYERS=32 STEPS=20 OUT=bench/gpu/out
while [ $# -gt 0 ]; do
  case "$1" in
    --no-install) INSTALL=0 ;;
    --layers) LAYERS=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --out) OUT=$2; shift ;;
    *) echo "error: unknown argument '$1'; allowed: --no-install, --layers N, --steps N, --out DIR" >&2; exit 2 ;;
  esac
  shift
done
PY=${PYTHON:-python3}
BUDGET_S=1440
START=$(date +%s)
mkdir -p "$OUT"
: > "$OUT/steps.tsv"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$OUT/steps.tsv"; }
skip() { echo "[$1] skipped: $2"; record "$1" skipped 0 "$2"; }
step() {  # NAME LIMIT_S COMMAND...: run it bounded, its output in $OUT/NAME.log
  local name=$1 limit=$2 left rc t0 dt
  shift 2
  left=$(( BUDGET_S - ($(date +%s) - START) ))
  if [ "$left" -lt 30 ]; then skip "$name" "the ${BUDGET_S}s budget of this run is spent"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "[$name] running, at most ${limit}s: $*"
  t0=$(date +%s)
  timeout --kill-after=15 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  dt=$(( $(date +%s) - t0 ))
  if [ $rc -eq 0 ]; then
    record "$name" ok "$dt" ""; echo "[$name] ok in ${dt}s"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    record "$name" "timed out" "$dt" "after ${limit}s, log $OUT/$name.log"; echo "[$name] timed out after ${limit}s"
  else
    record "$name" failed "$dt" "exit $rc, log $OUT/$name.log"; echo "[$name] failed (exit $rc):"; tail -n 15 "$OUT/$name.log"
  fi
}

NO_GPU=$("$PY" - <<'PYEOF' 2>&1
try:
    import torch
except Exception as exc:
    print(f"torch is not importable with this Python ({exc})")
else:
    if not torch.cuda.is_available():
        print("no CUDA GPU (torch.cuda.is_available() is False)")
PYEOF
)
NO_GPU=$(echo "$NO_GPU" | tail -n 1)

if [ -n "$NO_GPU" ]; then
  [ $INSTALL -eq 0 ] && skip install "--no-install given" || skip install "$NO_GPU"
elif [ $INSTALL -eq 0 ]; then
  skip install "--no-install given"
elif ! ls bench/gpu/wheels/*.whl > /dev/null 2>&1; then
  skip install "bench/gpu/wheels/ has no wheels (run bash bench/gpu/fetch_wheels.sh on a machine with PyPI)"
else
  step install 360 "$PY" -m pip install --no-index --find-links bench/gpu/wheels -e ".[deepspeed]" "pytest>=7.4"
fi

if [ -n "$NO_GPU" ]; then
  skip pytest "$NO_GPU"
else
  step pytest 600 "$PY" -m pytest -m gpu tests/gpu -rs -p no:cacheprovider --junitxml="$OUT/pytest.xml"
fi

TOKENS="$OUT/tokens.jsonl"  # random token rows, the same for the harness and the plain loop
if [ -n "$NO_GPU" ]; then
  skip data "$NO_GPU"
else
  step data 60 "$PY" bench/gpu/plain_lora.py --make-data "$TOKENS" --seq 2048 --rows 64
fi
for telemetry in true false; do
  name=harness_telemetry_$( [ $telemetry = true ] && echo on || echo off )
  if [ -n "$NO_GPU" ]; then
    skip "$name" "$NO_GPU"
  else
    step "$name" 240 "$PY" -m torch.distributed.run --standalone --nproc-per-node=1 -m trainer \
      bench/gpu/llama3_8b_shapes.yaml "data.dataset=$PWD/$TOKENS" "output_dir=$OUT/$name" \
      "model.config.num_hidden_layers=$LAYERS" "max_steps=$((STEPS + 5))" "telemetry.enabled=$telemetry" \
      "train.resume=never"
  fi
done
if [ -n "$NO_GPU" ]; then
  skip plain_lora "$NO_GPU"
else
  step plain_lora 200 "$PY" bench/gpu/plain_lora.py --data "$TOKENS" --out "$OUT/plain_lora.json" \
    --layers "$LAYERS" --steps "$STEPS" --warmup 5
fi

if [ -n "$NO_GPU" ]; then
  skip report "nothing was measured ($NO_GPU); bench/gpu/RESULTS.md is left as it is"
else
  step report 60 "$PY" bench/gpu/report.py "$OUT" bench/gpu/RESULTS.md --layers "$LAYERS" --steps "$STEPS"
  cat bench/gpu/RESULTS.md
fi
echo "done in $(( $(date +%s) - START ))s; steps in $OUT/steps.tsv"
