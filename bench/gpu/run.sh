#!/usr/bin/env bash
# The GPU benchmark in one command, on one H100/H200, from a machine that has Python and torch but none of
# our other dependencies, in under 9 minutes (pytest -m gpu only with --tests, a few minutes more):
#   bash bench/gpu/run.sh [--no-install] [--tests] [--layers N] [--steps N] [--out DIR] [--only STEP,...]
#        [--budget S] [--save DIR]
# --only runs the named steps (with the install, unless --no-install, and the report) and keeps the other steps' rows of an earlier run in OUT: a
# device that allows 10 minutes a command takes the benchmark in one call and `--only pytest` in a second.
# install    bench/gpu/install_wheels.sh: from bench/gpu/wheels/ (bench/gpu/fetch_wheels.sh fills it on a machine
#            with PyPI; nothing is downloaded here) the packages this Python lacks (datasets, liger-kernel,
#            DeepSpeed, ...), without dependencies, and the project; a no-op where they are installed already
# Llama-3-8B-shaped LoRA (random init, seq 2048, bf16, micro-batch 4; --layers cuts the 32 layers):
#   harness_telemetry_on / _off  the harness (bench/gpu/llama3_8b_shapes.yaml: liger kernels), telemetry on, off
#   harness_compile              the same with train.compile=blocks
#   plain_lora                   a plain transformers + peft loop, liger kernels, the same shapes and rows
#   plain_lora_compile           the plain loop with liger kernels and each decoder block compiled
#   plain_lora_eager             the plain loop without fused kernels at micro-batch 4 where the GPU has 120 GiB
#                                or more (an H200), else 2 (4 does not fit 80 GB)
# bert_harness / bert_plain      BERT-Large, random inputs of the real shapes: harness vs a plain loop
# resnet_harness / resnet_plain  ResNet-50 likewise; the plain loop in channels_last and compiled
# profile                        python -m bench.gpu.profile_step --out OUT/profile, where that module exists
# pytest                         with --tests: pytest -m gpu tests/gpu
# report                         bench/gpu/RESULTS.md: tokens/s, MFU (ours and AutoModel's LoRA convention),
#                                peak memory, step-time spread per run
# Each step has its own time limit and the run a budget; each step's outcome goes to OUT/steps.tsv and
# OUT/summary.md is rewritten as each step ends, so a run cut short keeps what it measured. Where there is no
# CUDA GPU every step prints `skipped: <reason>` and the script exits 0 (tests/gpu/test_run_sh.py runs that).
# --save DIR copies OUT's steps.tsv and summary.md, and OUT's small files as DIR/out.tar.gz, into DIR after every
# step, and RESULTS.md at the end: a lent device machine returns only what is under its $OUT, also when the
# command is stopped at its limit (bash bench/gpu/run.sh --save "$OUT").
# The report names the project's commit (git); in a copied tree without .git: FABRIC_HARNESS_COMMIT=<commit> bash ...
set -u
cd "$(dirname "$0")/../.."
INSTALL=1 TESTS=0 LAYERS=32 STEPS=10 WARMUP=3 OUT=bench/gpu/out ONLY="" BUDGET_S="" SAVE=""
ALLOWED="--no-install, --tests, --layers N, --steps N, --out DIR, --only STEP[,STEP...], --budget SECONDS, --save DIR"
needs_value() {  # OPTION NARGS WHAT: an option at the end of the line has no value (set -u: $2 unbound)
  [ "$2" -ge 2 ] || { echo "error: $1: no value given; allowed: $1 $3" >&2; exit 2; }
}
whole() {  # OPTION VALUE MAX WHAT: a whole number from 1 to MAX
  if ! [[ "$2" =~ ^[1-9][0-9]{0,8}$ ]] || [ "$2" -gt "$3" ]; then
    echo "error: $1: got '$2'; allowed: a whole number of $4 from 1 to $3" >&2; exit 2
  fi
}
while [ $# -gt 0 ]; do
  case "$1" in
    --no-install) INSTALL=0 ;;
    --tests) TESTS=1 ;;
    --layers) needs_value "$1" $# N; LAYERS=$2; shift ;;
    --steps) needs_value "$1" $# N; STEPS=$2; shift ;;
    --out) needs_value "$1" $# DIR; OUT=$2; shift
           [ -n "$OUT" ] || { echo "error: --out: got ''; allowed: a directory path" >&2; exit 2; } ;;
    --only) needs_value "$1" $# "STEP[,STEP...]"; ONLY=",$2,"; shift ;;
    --budget) needs_value "$1" $# SECONDS; BUDGET_S=$2; shift ;;
    --save) needs_value "$1" $# DIR; SAVE=$2; shift
            [ -n "$SAVE" ] || { echo "error: --save: no directory given; allowed: a directory path" >&2; exit 2; } ;;
    --layers=*|--steps=*|--out=*|--only=*|--budget=*|--save=*)
       echo "error: '$1': an option and its value are two arguments here; allowed: ${1%%=*} ${1#*=}" >&2
       exit 2 ;;
    *) echo "error: unknown argument '$1'; allowed: $ALLOWED" >&2
       exit 2 ;;
  esac
  shift
done
whole --layers "$LAYERS" 32 "decoder layers (Llama-3-8B has 32)"
whole --steps "$STEPS" 100000 "measured steps"
ALL_STEPS="install data harness_telemetry_on harness_telemetry_off plain_lora plain_lora_compile harness_compile
  plain_lora_eager bert_harness bert_plain resnet_harness resnet_plain profile pytest report"
if [ -n "$ONLY" ]; then
  for name in ${ONLY//,/ }; do
    case " $(echo $ALL_STEPS) " in
      *" $name "*) ;;
      *) echo "error: --only: unknown step '$name'; allowed: $(echo $ALL_STEPS | tr ' ' ',')" >&2; exit 2 ;;
    esac
  done
  [ -n "${ONLY//,/}" ] || { echo "error: --only: no step named; allowed: $(echo $ALL_STEPS | tr ' ' ',')" >&2; exit 2; }
  case "$ONLY" in *,pytest,*) TESTS=1 ;; esac
fi
if [ -z "$BUDGET_S" ]; then  # the benchmark in under 9 minutes; pytest -m gpu about 7 more
  if [ $TESTS -eq 1 ] && [ -z "$ONLY" ]; then BUDGET_S=960; else BUDGET_S=530; fi
elif ! [[ "$BUDGET_S" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: --budget: '$BUDGET_S' is not a whole number of seconds; allowed: 1 or more" >&2; exit 2
fi
PY=${PYTHON:-python3}
START=$(date +%s)
for dir_flag in "--out:$OUT" ${SAVE:+"--save:$SAVE"}; do  # before any step: a step's log goes there
  dir=${dir_flag#*:}
  if ! why=$(mkdir -p -- "$dir" 2>&1) || ! [ -w "$dir" ]; then
    why=${why##*: }
    if [ -e "$dir" ] && ! [ -d "$dir" ]; then why="it exists and is not a directory"; fi
    echo "error: ${dir_flag%%:*}: '$dir' is not a directory this user can write (${why:-not writable}); allowed: a writable directory path" >&2
    exit 2
  fi
done
if [ -n "$ONLY" ] && [ -f "$OUT/steps.tsv" ]; then  # keep the other steps' rows of an earlier run
  awk -F '\t' -v only="$ONLY" 'index(only, "," $1 ",") == 0 && $1 != "report"' "$OUT/steps.tsv" > "$OUT/steps.tsv.keep"
  mv "$OUT/steps.tsv.keep" "$OUT/steps.tsv"
else
  : > "$OUT/steps.tsv"
fi
# the checkout, and where install_wheels.sh puts the wheels when the image's environment is read-only
export FABRIC_HARNESS_SITE=${FABRIC_HARNESS_SITE:-/tmp/fabric-harness-site}
export PYTHONPATH="$PWD:$FABRIC_HARNESS_SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

save() {  # --save DIR: what a device machine returns (its $OUT); files over 2 MiB (traces, token rows) stay
  [ -n "$SAVE" ] || return 0
  mkdir -p "$SAVE" && cp -f "$OUT/steps.tsv" "$SAVE/" 2>/dev/null
  [ -f "$OUT/summary.md" ] && cp -f "$OUT/summary.md" "$SAVE/"
  (cd "$OUT" && find . -type f -size -2M ! -name tokens.jsonl -print0 \
     | tar -czf "$SAVE/out.tar.gz.part" --null -T - && mv -f "$SAVE/out.tar.gz.part" "$SAVE/out.tar.gz") \
    > /dev/null 2>&1 || true
}
summary() { "$PY" bench/gpu/report.py "$OUT" "$OUT/summary.md" --layers "$LAYERS" --steps "$STEPS" \
              --warmup "$WARMUP" > /dev/null 2>&1 || true; save; }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$OUT/steps.tsv"; }
skip() {
  if ! wanted "$1"; then echo "[$1] not in --only; an earlier run's row is kept"; return; fi
  echo "[$1] skipped: $2"; record "$1" skipped 0 "$2"
}
wanted() { [ -z "$ONLY" ] || [ "$1" = report ] || { [ "$1" = install ] && [ $INSTALL -eq 1 ]; } || case "$ONLY" in *",$1,"*) true ;; *) false ;; esac; }
step() {  # NAME LIMIT_S COMMAND...: run it bounded, its output in $OUT/NAME.log
  local name=$1 limit=$2 left rc t0 dt
  shift 2
  if ! wanted "$name"; then echo "[$name] not in --only; an earlier run's row is kept"; return; fi
  left=$(( BUDGET_S - ($(date +%s) - START) ))
  if [ "$name" = report ]; then  # seconds, and what the run is for: never cut by the budget
    :
  elif [ "$left" -lt 30 ]; then skip "$name" "the ${BUDGET_S}s budget of this run is spent"; return
  elif [ "$limit" -gt "$left" ]; then limit=$left
  fi
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
  summary
}
gpu_step() {  # NAME LIMIT_S COMMAND...: a step that needs the GPU
  if [ -n "$NO_GPU" ]; then skip "$1" "$NO_GPU"; else step "$@"; fi
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
  step install 240 env PYTHON="$PY" bash bench/gpu/install_wheels.sh bench/gpu/wheels
fi

TOKENS="$OUT/tokens.jsonl"  # random token rows, the same for the harness and the plain loop
case "$TOKENS" in /*) ;; *) TOKENS="$PWD/$TOKENS" ;; esac  # the trainer reads a relative data path from the recipe's directory
if [ -n "$ONLY" ] && [ ! -s "$TOKENS" ] && ! wanted data \
    && case "$ONLY" in *,harness_*|*,plain_lora*) true ;; *) false ;; esac; then
  ONLY="$ONLY,data,"  # the Llama steps read these rows
fi
gpu_step data 60 "$PY" bench/gpu/plain_lora.py --make-data "$TOKENS" --seq 2048 --rows 64
harness() {  # NAME LIMIT_S OVERRIDES...: the harness on the 8B shape
  local name=$1 limit=$2
  shift 2
  gpu_step "$name" "$limit" "$PY" -m torch.distributed.run --standalone --nproc-per-node=1 -m trainer \
    bench/gpu/llama3_8b_shapes.yaml "data.dataset=$TOKENS" "output_dir=$OUT/$name" \
    "model.config.num_hidden_layers=$LAYERS" "max_steps=$((STEPS + WARMUP))" "train.resume=never" "$@"
}
harness harness_telemetry_on 150 telemetry.enabled=true
harness harness_telemetry_off 150 telemetry.enabled=false
plain() {  # NAME LIMIT_S ARGS...
  local name=$1 limit=$2
  shift 2
  gpu_step "$name" "$limit" "$PY" bench/gpu/plain_lora.py --data "$TOKENS" --out "$OUT/$name.json" --layers "$LAYERS" \
    --steps "$STEPS" --warmup "$WARMUP" "$@"
}
plain plain_lora 120 --batch 4 --kernels liger
plain plain_lora_compile 180 --batch 4 --kernels liger --compile blocks
harness harness_compile 180 telemetry.enabled=true train.compile=blocks
# without the fused cross-entropy micro-batch 4 needs more than 80 GB (docs/memory.md); an H200 has 141 GB
EAGER_BATCH=2
[ -n "$NO_GPU" ] || EAGER_BATCH=$("$PY" -c "import torch
print(4 if torch.cuda.get_device_properties(0).total_memory >= 120 * 2**30 else 2)" 2>/dev/null || echo 2)
plain plain_lora_eager 120 --batch "$EAGER_BATCH" --kernels none

SAME_OPT="train.eval_every_samples=null train.target_eval_accuracy=null train.schedule=constant train.resume=never"
gpu_step bert_harness 120 "$PY" -m torch.distributed.run --standalone --nproc-per-node=1 -m trainer \
  recipes/bert_large.yaml data.synthetic=true train.micro_batch_size=32 train.global_batch_size=32 \
  train.optimizer=adamw train.lr=1e-4 train.weight_decay=0 $SAME_OPT "max_steps=$((STEPS + WARMUP))" \
  "output_dir=$OUT/bert_harness"
gpu_step bert_plain 90 "$PY" bench/gpu/plain_models.py bert --batch 32 --steps "$STEPS" --warmup "$WARMUP" \
  --out "$OUT/bert_plain.json"
# importable as the harness imports it: a torchvision built for another CUDA than the machine's torch loses
# only its C++ ops, which trainer.compat stands in for (ResNet-50 does not use them)
if [ -z "$NO_GPU" ] && ! "$PY" -c "from trainer.compat import ensure_torchvision_importable as ok; assert ok()" \
    > /dev/null 2>&1; then
  skip resnet_harness "torchvision is not importable (fetch_wheels.sh carries it in bench/gpu/wheels/)"
  skip resnet_plain "torchvision is not importable"
else
  gpu_step resnet_harness 120 "$PY" -m torch.distributed.run --standalone --nproc-per-node=1 -m trainer \
    recipes/resnet50.yaml data.synthetic=true train.micro_batch_size=256 train.global_batch_size=256 \
    train.optimizer=sgd train.lr=0.1 train.warmup_steps=0 train.label_smoothing=0.1 $SAME_OPT \
    "max_steps=$((STEPS + WARMUP))" "output_dir=$OUT/resnet_harness"
  gpu_step resnet_plain 150 "$PY" bench/gpu/plain_models.py resnet --batch 256 --compile --steps "$STEPS" \
    --warmup "$WARMUP" --out "$OUT/resnet_plain.json"
fi

if [ -n "$NO_GPU" ]; then
  skip profile "$NO_GPU"
elif [ ! -f bench/gpu/profile_step.py ]; then
  skip profile "bench/gpu/profile_step.py is not in this checkout"
else
  step profile 120 "$PY" -m bench.gpu.profile_step --out "$OUT/profile"
fi
if [ $TESTS -eq 0 ]; then
  skip pytest "--tests not given (pytest -m gpu tests/gpu takes about 5 minutes more)"
else
  # -v: each test's outcome is in pytest.log as it ends (the XML is written only at the end); one test that hangs
  # loses its own minutes only, where the image has pytest-timeout
  PER_TEST=()
  "$PY" -c "import pytest_timeout" > /dev/null 2>&1 && PER_TEST=(--timeout=240)
  gpu_step pytest 420 "$PY" -m pytest -m gpu tests/gpu -v -rs -p no:cacheprovider "${PER_TEST[@]}" \
    --junitxml="$OUT/pytest.xml"
fi

if [ -n "$NO_GPU" ]; then
  skip report "nothing was measured ($NO_GPU); bench/gpu/RESULTS.md is left as it is"
else
  step report 60 "$PY" bench/gpu/report.py "$OUT" bench/gpu/RESULTS.md --layers "$LAYERS" --steps "$STEPS" \
    --warmup "$WARMUP"
  cat bench/gpu/RESULTS.md
  [ -z "$SAVE" ] || cp -f bench/gpu/RESULTS.md "$SAVE/"
fi
save
echo "done in $(( $(date +%s) - START ))s; steps in $OUT/steps.tsv"
