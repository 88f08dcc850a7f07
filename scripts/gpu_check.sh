#!/usr/bin/env bash
# The GPU check: every GPU path of the harness in one go, in under 8 minutes on one GPU.
#
#   scripts/gpu_check.sh [--paper] [--cpu | --dry-run | --preflight] [OUT]
#
# 1. `harness bench --size 120m --compile` on CUDA (bf16 autocast): step times of prenorm,
#    block_attnres and rd_attnres, the bf16/fp32 ratio, Lightning vs a bare loop, MFU, and a
#    3-round profile of where each ratio's time goes (self CUDA time by category);
# 2. a tiny grid (parent + treatment, 2 seeds) queued and drained by one worker on the GPU;
# 3. one run under DDP on one GPU (`--devices 1 --strategy ddp`);
# and writes everything to OUT (default results/gpu_check/<UTC time>): each step's command,
# output and exit code, the bench JSON, the grid's results, and summary.txt, one line a phase:
# `PASS name: ...`, `SKIP name: why` or `FAIL name: ...` (its last log line, or that it timed out).
#
# First a preflight checks the prerequisites in the order a run would hit them and names the first
# one missing (FAIL preflight: ...; nothing else runs): $PYTHON runs; with a wheelhouse to install,
# pip is there and the Python is not externally managed (PEP 668: use a venv, or set
# PIP_BREAK_SYSTEM_PACKAGES=1); torch imports (any version X.Y..., an NGC build such as
# 2.5.0a0+872d972e41 too; below 2.11, the oldest tested, a WARN line); without a wheelhouse the
# harness imports; on a GPU nvidia-smi answers within $NVIDIA_SMI_TIMEOUT s (default 20) and torch
# sees CUDA; with compile on (the GPU modes), a C compiler ($CC, else gcc) and Python.h (Triton
# builds a helper module at the first compiled kernel). --preflight runs only that.
#
# --cpu runs tiny versions of the same three steps on the CPU (the test suite does, in well
# under a minute); --dry-run prints the commands without running them. The corpus is $CORPUS,
# else ../shared/data/fineweb_edu_sample, else the repository's own Markdown, one paragraph
# per document. The harness runs as `$PYTHON -m harness` ($PYTHON default: .venv/bin/python here,
# else python3); $HARNESS (a path) replaces it. Every phase and every external call has a time
# limit (`timeout -k`: SIGKILL 15 s after the SIGTERM). Exit status: 0 when every step passed,
# 1 otherwise (summary.txt says which), 2 for a bad argument.
#
# --paper (DESIGN section 11, < 8 minutes on one GPU): the paper's protocol instead, at its global
# batch of 524,288 tokens run as micro-batches (auto: probed on the GPU): `harness bench --size
# 120m` for block_attnres and rd_attnres (tokens/s, MFU, peak memory, the micro-batch; the goals
# MFU >= 45 % and rd/block <= 1.02), then 20 optimiser steps of each at 120m and at 343m, with a
# byte-level BPE of 50,304 tokens trained locally on generated text (no network; the sample is
# smaller than one batch); with more than one GPU (physical GPUs, `nvidia-smi --query-gpu=uuid`,
# not MIG instances; at most as many as $CUDA_VISIBLE_DEVICES names), a 120m run on all of them
# (DDP) whose step-20 loss is compared with the 1-GPU run. summary.txt gets a PASS/FAIL line per
# check (scripts/paper_check.py). On a bare machine (its own Python and torch, no network): when
# $WHEELHOUSE (default: wheelhouse/ here, made by scripts/wheelhouse.sh --python X.Y) holds the
# project's wheel, the first phase installs the project and the wheelhouse's dependency list for
# $PYTHON's version (requirements-cpXY.txt) into $PYTHON's environment, offline and without
# resolving dependencies (`pip install --no-index --no-deps`: the machine's torch, whatever its
# version string, is never touched), then runs `$PYTHON -m harness`. Each phase has its own time
# limit and all share one budget of 455 s (arithmetic below); a phase that would not fit is skipped
# with a SKIP line. --paper --cpu: the same steps at size tiny on the CPU (1,024-token batches in
# micro-batches of 4). $NVIDIA_SMI replaces nvidia-smi (tests). Not yet run on a GPU.
set -uo pipefail

MODE=gpu
PAPER=0
PREFLIGHT=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) MODE=cpu; shift ;;
    --dry-run) MODE=dry; shift ;;
    --preflight) PREFLIGHT=1; shift ;;
    --paper) PAPER=1; shift ;;
    -h|--help) sed -n '2,47p' "$0"; exit 0 ;;
    -*) echo "gpu_check.sh: unknown option '$1'; allowed: --paper, --cpu, --dry-run, --preflight, -h" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -le 1 ] || { echo "gpu_check.sh: one OUT folder at most, got: $*" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/results/gpu_check/$(date -u +%Y%m%dT%H%M%SZ)}
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}
SMI_LIMIT=${NVIDIA_SMI_TIMEOUT:-20}
KILL_AFTER=15  # seconds from a phase's SIGTERM to its SIGKILL (`timeout -k`)
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PY=$ROOT/.venv/bin/python; else PY=python3; fi
fi
if [ -n "${HARNESS:-}" ]; then H=("$HARNESS"); else H=("$PY" -m harness); fi
GPU=1; [ "$MODE" = cpu ] && GPU=0
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RESULTS=$OUT/results
WHEELHOUSE=${WHEELHOUSE:-$ROOT/wheelhouse}
INSTALL=0
[ "$PAPER" = 1 ] && compgen -G "$WHEELHOUSE/rd_harness-*.whl" > /dev/null && INSTALL=1

smi() {  # nvidia-smi ARGS...: bounded, as every external call
  timeout -k 5 "$SMI_LIMIT" "$NVIDIA_SMI" "$@"
}
pyq() {  # pyq CODE: $PY's answer, bounded ($PREFLIGHT_TIMEOUT s, default 300: importing torch on a
  # CPU shared by 20 processes took over 60 s)
  timeout -k 5 "${PREFLIGHT_TIMEOUT:-300}" "$PY" -c "$1" 2>/dev/null
}
preflight_why() {  # the first missing prerequisite, in the order a run would hit it; nothing if none
  local v
  pyq 'import sys' > /dev/null || { echo "no working Python at '$PY' (set \$PYTHON)"; return; }
  if [ "$INSTALL" = 1 ]; then
    pyq 'import pip' > /dev/null || { echo "no pip in $PY (needed to install from $WHEELHOUSE: '$PY -m ensurepip', apt-get install python3-pip, or a venv)"; return; }
    [ "$(pyq 'import os, sys, sysconfig; print(int(sys.prefix == sys.base_prefix and os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))))')" = 0 ] \
      || [ -n "${PIP_BREAK_SYSTEM_PACKAGES:-}" ] \
      || { echo "$PY is externally managed (PEP 668): make a venv that keeps its torch ('$PY -m venv --system-site-packages V', then PYTHON=V/bin/python), or set PIP_BREAK_SYSTEM_PACKAGES=1"; return; }
    REQS=$WHEELHOUSE/requirements-cp$(pyq 'import sys; print("%d%d" % sys.version_info[:2])').txt
    [ -f "$REQS" ] || { echo "$WHEELHOUSE has no $(basename "$REQS") for $PY (make it: scripts/wheelhouse.sh --python $(pyq 'import sys; print("%d.%d" % sys.version_info[:2])'))"; return; }
  fi
  v=$(pyq 'import importlib.metadata as m, torch; print(m.version("torch"))') || { echo "torch does not import in $PY"; return; }
  [[ "$v" =~ ^([0-9]+)\.([0-9]+) ]] || { echo "torch version '$v' in $PY is not X.Y..."; return; }
  if [ "$INSTALL" = 0 ] && ! pyq 'import harness' > /dev/null; then
    echo "the harness does not import in $PY (pip install -e . there, or give \$WHEELHOUSE)"; return
  fi
  [ "$GPU" = 1 ] || return 0
  command -v "$NVIDIA_SMI" > /dev/null || { echo "no $NVIDIA_SMI on PATH (an NVIDIA driver)"; return; }
  smi --query-gpu=name --format=csv,noheader > /dev/null 2>&1 \
    || { echo "$NVIDIA_SMI did not answer within $SMI_LIMIT s (exit $?)"; return; }
  [ "$(pyq 'import torch; print(int(torch.cuda.is_available()))')" = 1 ] \
    || { echo "torch $v in $PY sees no CUDA device (a CPU build, or CUDA_VISIBLE_DEVICES)"; return; }
  command -v "${CC:-gcc}" > /dev/null || { echo "no C compiler '${CC:-gcc}' (Triton builds a module at the first compiled kernel: apt-get install gcc, or set \$CC)"; return; }
  [ "$(pyq 'import os, sysconfig; print(int(os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))))')" = 1 ] \
    || echo "no Python.h for $PY (Triton compiles against it: apt-get install python3-dev, or the matching -dev package)"
}
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
if [ "$MODE" != dry ]; then
  WHY=$(preflight_why)  # a subshell: it only answers
  TORCH_VERSION=$(pyq 'import importlib.metadata as m; print(m.version("torch"))') || TORCH_VERSION=""
  if [ -n "$WHY" ]; then
    echo "FAIL preflight: $WHY" | tee -a "$SUMMARY" >&2
    exit 1
  fi
  echo "PASS preflight: $PY, torch $TORCH_VERSION, $( [ "$INSTALL" = 1 ] && echo "pip (installing from $WHEELHOUSE)" || echo "the harness imports")$( [ "$GPU" = 1 ] && echo ", nvidia-smi, CUDA, ${CC:-gcc}, Python.h")" | tee -a "$SUMMARY" >&2
  if [[ "$TORCH_VERSION" =~ ^([0-9]+)\.([0-9]+) ]] && { [ "${BASH_REMATCH[1]}" -lt 2 ] || { [ "${BASH_REMATCH[1]}" = 2 ] && [ "${BASH_REMATCH[2]}" -lt 11 ]; }; }; then
    echo "WARN preflight: torch $TORCH_VERSION is older than 2.11, the oldest tested; going on" | tee -a "$SUMMARY" >&2
  fi
  [ "$PREFLIGHT" = 1 ] && exit 0
fi

if [ "$MODE" != cpu ]; then  # the GPU's commands (also what --dry-run prints)
  ACCEL=gpu; DEVICE=cuda
  BENCH_ARGS=(--size 120m --compile --steps 20 --max-steps 60 --loop-rounds 2 --loop-steps 10 --profile 3 --per-site)
  GRID_SIZE=tiny; GRID_BUDGET=401408; GRID_TRAIN='batch_tokens = 8192'
  DDP_SIZE=small; DDP_BUDGET=401408
  LIMITS=(300 150 120)  # seconds per step: 5 + 2.5 + 2 minutes at most
else
  ACCEL=cpu; DEVICE=cpu
  BENCH_ARGS=(--size tiny --steps 6 --max-steps 0 --warmup 1 --loop-rounds 1 --loop-steps 2 --threads 1 --profile 1)
  GRID_SIZE=tiny; GRID_BUDGET=2048; GRID_TRAIN='batch_tokens = 1024'
  DDP_SIZE=tiny; DDP_BUDGET=2048
  LIMITS=(120 120 120)
fi

CORPUS=${CORPUS:-}
if [ -z "$CORPUS" ] && [ -d "$ROOT/../shared/data/fineweb_edu_sample" ]; then
  CORPUS=$(cd "$ROOT/../shared/data/fineweb_edu_sample" && pwd)
fi
if [ -z "$CORPUS" ]; then  # the repository's Markdown, one paragraph per .txt document
  CORPUS=$OUT/corpus
  mkdir -p "$CORPUS"
  cat "$ROOT"/*.md "$ROOT"/*/*.md 2>/dev/null \
    | awk -v dir="$CORPUS" 'NF == 0 { if (buf != "") { n++; print buf > (dir "/" n ".txt"); close(dir "/" n ".txt"); buf = "" } next }
                           { buf = buf $0 "\n" } END { if (buf != "") { n++; print buf > (dir "/" n ".txt") } }'
fi

FAILED=0
LAST_RC=0
step() {  # step NAME LIMIT_S CMD...: run CMD with a time limit, keep its output; one PASS/FAIL line
  local name=$1 limit=$2; shift 2
  printf '%q ' "$@" > "$OUT/$name.cmd"; echo >> "$OUT/$name.cmd"
  if [ "$MODE" = dry ]; then
    echo "[$name] $(cat "$OUT/$name.cmd")"
    return 0
  fi
  echo "== $name: $(cat "$OUT/$name.cmd")" >&2
  local t0=$SECONDS rc=0 line
  timeout -k "$KILL_AFTER" "$limit" "$@" > "$OUT/$name.log" 2>&1 || rc=$?
  LAST_RC=$rc
  if [ $rc -eq 0 ]; then
    line="PASS $name: exit 0 in $((SECONDS - t0)) s (limit $limit s)"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    line="FAIL $name: timed out after $((SECONDS - t0)) s (limit $limit s; $name.log)"
  else
    line="FAIL $name: exit $rc in $((SECONDS - t0)) s: $(grep -v '^[[:space:]]*$' "$OUT/$name.log" | tail -n 1 | cut -c1-200)"
  fi
  [ $rc -ne 0 ] && FAILED=1 && tail -n 20 "$OUT/$name.log" >&2
  echo "$line" | tee -a "$SUMMARY" >&2
}
count_gpus() {  # physical GPUs this process may use: one uuid line per GPU (`nvidia-smi -L` adds a
  # line per MIG instance), at most as many as $CUDA_VISIBLE_DEVICES names when that is set
  local n
  n=$(smi --query-gpu=uuid --format=csv,noheader 2>/dev/null | grep -c '^GPU-') || n=0
  if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
    local visible
    visible=$(tr ',' '\n' <<< "$CUDA_VISIBLE_DEVICES" | grep -c '[^[:space:]]') || visible=0
    [ "$visible" -lt "$n" ] && n=$visible
  fi
  echo "$n"
}
{
  echo "mode $MODE, paper $PAPER, $(date -u +%FT%TZ), host $(hostname)"
  [ "$MODE" = gpu ] && smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  [ "$INSTALL" = 1 ] || timeout -k 5 60 "${H[@]}" --version 2>/dev/null || true
} > "$OUT/env.txt" 2>&1

if [ "$PAPER" = 1 ]; then
  STEPS=20
  # Time (DESIGN 11: the whole check <= 8 min = 480 s on one H100/H200, compile included, so that a
  # 15-minute lease allows a rerun). FLOPs per token 6 N + 12 L D T (harness/bench/flops.py):
  # 120m (N ~ 124 M, L 12, D 768, T 1024) ~ 8.6e8, so a 524,288-token step ~ 4.5e14 and 20 steps ~ 9.0e15;
  # 343m (N ~ 353 M, L 24, D 1024) ~ 2.4e9, a step ~ 1.3e15, 20 steps ~ 2.5e16 FLOP. At 40 % MFU of an
  # H200's 989 TFLOP/s bf16 (~4.0e14 FLOP/s): 1.1 s a 120m step, 23 s of steps per 120m run, 64 s per
  # 343m run. On top: a cold inductor compile (~40-60 s at 120m, ~60-90 s at 343m; the bench's 120m
  # graphs are reused by the 120m runs through inductor's cache, $TORCHINDUCTOR_CACHE_DIR below), the
  # micro-batch probe, start-up and the final evaluation (~20 s), and the 50,304-token BPE on the first
  # run (~30 s).
  # The bench (its 120m MFU is the figure this check exists for): block_attnres and rd_attnres only,
  # no float32 arm (--no-precision-ratio: a third compiled graph, ~50 s, and a TF32 step ~2-3x a bf16
  # one would not fit), 2 warmup + 8 timed rounds: ~10 s start-up + ~10 s probe + 2 compiles ~100 s +
  # (1 + 8 + 1 peak-memory) rounds x 2 arms x 1.1 s ~ 22 s = ~142 s, under its 180 s limit; at 25 % MFU
  # (1.8 s a step) ~155 s. Expected on an H200: install ~40 s, corpus ~5 s, bench ~142 s, each 120m run
  # ~90 s (compile from the cache ~20 s, BPE ~30 s on the first, steps 23 s, evaluation ~15 s): the bench
  # and both 120m runs end by ~370 s; a 343m run (needs 100 s) fits only if the phases ran faster.
  # Limits per phase: install 120 s, corpus 60 s, bench 180 s, a 120m run 150 s, a 343m run 200 s,
  # the DDP run 150 s: the phases also share one budget, TOTAL = 480 - 15 (SIGKILL grace of a cut
  # phase) - 10 (the summary) = 455 s: a phase's limit is cut to what is left, and a phase that would
  # have less than its minimum (the bench 150 s, a 343m run 100 s) is skipped with a SKIP line, in the
  # order below (most wanted first: the bench's MFU and goals, 120m, 343m, DDP).
  if [ "$MODE" != cpu ]; then
    SIZES=(120m 343m); BATCH=524288; WORDS=4000000; VOCAB=50304; MICRO=(); EVAL=131072
    BENCH=(--size 120m --compile --steps 8 --max-steps 0 --warmup 2 --no-precision-ratio --loop-rounds 0 --device cuda)
    TOTAL=455; declare -A LIMIT=([install]=120 [corpus]=60 [bench]=180 [120m]=150 [343m]=200 [ddp]=150)
    declare -A NEED=([install]=0 [corpus]=0 [bench]=150 [120m]=60 [343m]=100 [ddp]=60)
    NGPU=$(count_gpus)
    # --dry-run without nvidia-smi shows the DDP command as it would run on 2 GPUs
    [ "$MODE" = dry ] && ! command -v "$NVIDIA_SMI" > /dev/null && NGPU=2
  else  # --paper --cpu: size tiny, no time goal, one thread (a shared CPU stalls OpenMP's threads), each
    # phase 900 s at most (a busy CPU machine: with 23 processes on 2 cores a tiny run took > 240 s)
    SIZES=(tiny); BATCH=1024; WORDS=30000; VOCAB=512; MICRO=(--micro-batch-size 4 --threads 1); EVAL=1024
    BENCH=(--size tiny --steps 2 --max-steps 0 --warmup 1 --loop-rounds 0 --threads 1 --device cpu)
    TOTAL=3600; declare -A LIMIT=([install]=900 [corpus]=120 [bench]=900 [tiny]=900 [ddp]=900)
    declare -A NEED=([install]=0 [corpus]=0 [bench]=0 [tiny]=0 [ddp]=0)
    NGPU=0
  fi
  export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$OUT/inductor_cache}
  DEADLINE=$((SECONDS + TOTAL))
  phase() {  # phase NAME KIND CMD...: step NAME with KIND's limit, cut to the budget left, or SKIP
    local name=$1 kind=$2; shift 2
    local left=$((DEADLINE - SECONDS)) limit=${LIMIT[$kind]}
    if [ "$MODE" != dry ] && [ $left -lt "${NEED[$kind]}" ]; then
      echo "SKIP $name: $left s left of the check's $TOTAL s, it needs ${NEED[$kind]} s" | tee -a "$SUMMARY" >&2
      return 0
    fi
    [ "$MODE" != dry ] && [ $left -lt "$limit" ] && limit=$((left > 1 ? left : 1))
    step "$name" "$limit" "$@"
  }
  if [ "$INSTALL" = 1 ]; then
    # Offline (no index) and without resolving dependencies: the wheelhouse's exact list for this
    # Python and the project's wheel, so pip never looks at the machine's torch (an NGC build's
    # 2.x.0a0+... does not satisfy `torch>=2.11` and would make pip look for another torch).
    [ -n "${REQS:-}" ] || REQS=$WHEELHOUSE/requirements-cp$(pyq 'import sys; print("%d%d" % sys.version_info[:2])').txt
    WHEEL=$(compgen -G "$WHEELHOUSE/rd_harness-*.whl" | head -n 1)
    phase paper_install install env PIP_NO_INDEX=1 "$PY" -m pip install --no-index --no-deps --find-links "$WHEELHOUSE" \
      -r "$REQS" "$WHEEL"
    if [ "$MODE" != dry ] && [ "$LAST_RC" -ne 0 ]; then
      echo "FAIL install from $WHEELHOUSE (paper_install.log); nothing else ran" | tee -a "$SUMMARY" >&2
      exit 1
    fi
  fi
  PCORPUS=${CORPUS_PAPER:-$OUT/paper_corpus}
  phase paper_corpus corpus "$PY" "$ROOT/scripts/paper_check.py" corpus "$PCORPUS" "$WORDS"
  phase paper_bench bench "${H[@]}" bench "${BENCH[@]}" --variant block_attnres --variant rd_attnres \
    --json "$OUT/bench.json" --db "$OUT/bench.duckdb" --results "$RESULTS"
  for size in "${SIZES[@]}"; do
    for variant in block_attnres rd_attnres; do
      phase "paper_${size}_$variant" "$size" "${H[@]}" run --variant "$variant" --size "$size" --seed 0 \
        --budget-tokens $((STEPS * BATCH)) --corpus "$PCORPUS" --set batch_tokens=$BATCH --set vocab_size=$VOCAB \
        --set eval_tokens=$EVAL --accelerator "$ACCEL" --grid gpu_check_paper --results "$RESULTS" ${MICRO[@]+"${MICRO[@]}"}
    done
  done
  DDP=()
  if [ "$NGPU" -gt 1 ]; then  # one run on every visible GPU (harness run --devices N, issue 24's i24b part)
    phase paper_ddp ddp "${H[@]}" run --variant block_attnres --size "${SIZES[0]}" --seed 0 \
      --budget-tokens $((STEPS * BATCH)) --corpus "$PCORPUS" --set batch_tokens=$BATCH --set vocab_size=$VOCAB \
      --set eval_tokens=$EVAL --accelerator "$ACCEL" --devices "$NGPU" --strategy ddp --grid gpu_check_paper \
      --results "$OUT/results_ddp"
    DDP=(--ddp "$OUT/results_ddp")
  elif [ "$MODE" = gpu ]; then
    echo "SKIP ddp: $NGPU GPU visible (the DDP comparison needs 2 or more)" | tee -a "$SUMMARY" >&2
  elif [ "$MODE" = dry ]; then
    echo "[paper_ddp] skipped: $NGPU GPU visible (the DDP comparison needs 2 or more)" >&2
  fi
  if [ "$MODE" != dry ]; then
    GPU_NAME=""
    [ "$MODE" = gpu ] && GPU_NAME=$(smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
    timeout -k 5 60 "$PY" "$ROOT/scripts/paper_check.py" summary "$RESULTS" "$SUMMARY" --bench "$OUT/bench.json" \
      ${DDP[@]+"${DDP[@]}"} --min-steps $STEPS --device "$GPU_NAME" || FAILED=1
    echo "== $( [ $FAILED -eq 0 ] && echo 'every check passed' || echo 'some check FAILED' ) in $SECONDS s; everything is in $OUT" >&2
  fi
  exit $FAILED
fi

# The tiny grid: parent and treatment, 2 seeds, a small BPE vocabulary.
cat > "$OUT/gpu_check_grid.toml" <<TOML
# gpu_check: parent and treatment at $GRID_SIZE, 2 seeds, one short budget ($MODE mode)
name = "gpu_check"
corpus = "$CORPUS"
sizes = ["$GRID_SIZE"]
seeds = [0, 1]
budgets_tokens = [$GRID_BUDGET]

[variants]
block_attnres = "parent"
rd_attnres = "treatment"

[train]
vocab_size = 512
$GRID_TRAIN
eval_tokens = 4096
TOML

step bench "${LIMITS[0]}" "${H[@]}" bench "${BENCH_ARGS[@]}" --device "$DEVICE" \
  --variant prenorm --variant block_attnres --variant rd_attnres \
  --json "$OUT/bench.json" --db "$OUT/bench.duckdb" --results "$RESULTS"
# routing's milliseconds a step: the bytes model's estimate (bench JSON routing_cost) beside the profile's
if [ "$MODE" != dry ] && [ -f "$OUT/bench.json" ]; then
  "$PY" -c 'import json, sys; from harness.bench.routing_cost import estimate_vs_measured as f
print("\n".join(f(json.load(open(sys.argv[1])))))' "$OUT/bench.json" >&2 || echo "routing estimate: not printed" >&2
fi
# bash -c SCRIPT GRID RESULTS ACCEL HARNESS...: the harness command is the arguments from the 4th on
# shellcheck disable=SC2016  # the single quotes are meant: the inner bash expands them
step grid "${LIMITS[1]}" bash -c '"${@:4}" queue "$1" --results "$2" && "${@:4}" work --results "$2" --accelerator "$3" --quiet \
  && "${@:4}" status --results "$2" && "${@:4}" sql "select f.variant, f.seed, f.val_nll, r.train_s, r.wall_s from final f join runs r using (run_id) order by 1, 2" --results "$2"' \
  grid "$OUT/gpu_check_grid.toml" "$RESULTS" "$ACCEL" "${H[@]}"
step ddp "${LIMITS[2]}" "${H[@]}" run --variant rd_attnres --size "$DDP_SIZE" --seed 0 --budget-tokens "$DDP_BUDGET" \
  --corpus "$CORPUS" --set vocab_size=512 --set eval_tokens=4096 --devices 1 --strategy ddp --accelerator "$ACCEL" \
  --grid gpu_check_ddp --results "$RESULTS"

if [ "$MODE" != dry ]; then
  echo "== $( [ $FAILED -eq 0 ] && echo 'every step passed' || echo 'some step FAILED' ); everything is in $OUT" >&2
fi
exit $FAILED
