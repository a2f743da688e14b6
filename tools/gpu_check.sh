#!/usr/bin/env bash
# A GPU user's first check of a new machine: builds the GPU build and runs its tests
# (make test GPU=1, which runs mpi_tests on the GPUs there are: tools/run_tests.sh), trains 50
# steps on N GPUs, one rank each, with build/gpu/train, trains the same 50 steps in the same
# layout with the CPU build's build/cpu/train on N ranks, and compares the two loss curves with
# tools/compare_losses.py (which states and explains its tolerance: the builds round
# differently, so the curves agree closely, not bitwise). N is the largest of 1, 2, 4 and 8 not
# above the GPUs nvidia-smi lists: the default model's 4 layers allow at most 4 stages, so 8
# ranks are 2 replicas of 4 stages; one GPU trains one rank, and the multi-rank parts are
# skipped with the reason said. Without a GPU it says so, runs the CPU build's part with 4
# ranks, compares that log with itself (which checks the comparison, not a GPU) and exits 0.
#   tools/gpu_check.sh            from anywhere; logs and outputs go to build/gpu-check/
# Environment: MPIRUN (default mpirun), JOBS (make's -j, default the number of cores).
# Each run names its build's program (build/gpu/train, build/cpu/train), not ./train, which
# `make` overwrites with the program of whichever build it made last.
# Exit status 0 when every part passed, 1 with one line naming the part that failed.
set -u
cd "$(dirname "$0")/.."
STEPS=50
OUT=build/gpu-check
MPIRUN=${MPIRUN:-mpirun}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT"

say() { echo "gpu_check: $*"; }
fail() {
  say "FAILED: $*"
  exit 1
}

# run NAME COMMAND...: runs the command with its output in $OUT/NAME.log (its last lines shown on failure).
run() {
  local name=$1
  shift
  say "$name: $*"
  local status=0
  "$@" >"$OUT/$name.log" 2>&1 || status=$?
  if [ "$status" -ne 0 ]; then
    tail -n 15 "$OUT/$name.log"
    fail "$name (exit status $status; its whole output is in $OUT/$name.log)"
  fi
}

# train NAME PROGRAM: the 50-step run of PROGRAM on $ranks ranks in the layout ${layout[@]}, its
# step log in $OUT/NAME.jsonl.
train() {
  rm -f "$OUT/$1.jsonl"
  run "$1-run" "$MPIRUN" -np "$ranks" "$2" "${layout[@]}" --steps "$STEPS" --log "$OUT/$1.jsonl"
  say "$1-run: $(grep "^step $STEPS/" "$OUT/$1-run.log")"
}

gpus=0
if nvidia-smi -L >"$OUT/nvidia-smi.log" 2>&1; then
  gpus=$(grep -c '^GPU ' "$OUT/nvidia-smi.log")
fi
ranks=4
if [ "$gpus" -gt 0 ]; then
  ranks=1
  for r in 2 4 8; do [ "$gpus" -ge "$r" ] && ranks=$r; done
fi
stages=$((ranks < 4 ? ranks : 4))
layout=(--dp $((ranks / stages)) --pp "$stages")

if [ "$gpus" -gt 0 ]; then
  say "$gpus GPU(s) found; the GPU and CPU runs use $ranks rank(s): ${layout[*]}"
  [ "$gpus" -ge 2 ] || say "one GPU: make test GPU=1 skips mpi_tests (it needs a GPU per rank) and the runs" \
    "are single-process, so no transfer between GPUs is checked"
  run gpu-build make -j"$JOBS" GPU=1
  say "gpu-tests: make test GPU=1 (output also in $OUT/gpu-tests.log)"
  make test GPU=1 MPIRUN="$MPIRUN" 2>&1 | tee "$OUT/gpu-tests.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail "gpu-tests: $(tail -n 1 "$OUT/gpu-tests.log") (output in $OUT/gpu-tests.log)"
  train gpu build/gpu/train
else
  say "no GPU on this machine (nvidia-smi -L: $(head -n 1 "$OUT/nvidia-smi.log")): skipping the GPU build," \
    "its tests and the GPU run; the CPU build's part runs alone, with 4 ranks"
fi

# The CPU build needs its own libraries (OpenBLAS, Boost.Context: the README's dependencies).
run cpu-build make -j"$JOBS" GPU=0 build/cpu/train data/kjv.txt
train cpu build/cpu/train

if [ "$gpus" -gt 0 ]; then
  tools/compare_losses.py "$OUT/cpu.jsonl" "$OUT/gpu.jsonl" || fail "the GPU run's losses differ from the CPU build's"
  say "PASSED: this machine's GPUs build, pass the tests and train as the CPU build does"
else
  tools/compare_losses.py "$OUT/cpu.jsonl" "$OUT/cpu.jsonl" || fail "the comparison of the CPU log with itself"
  say "CPU part passed; no GPU was checked (there is none on this machine)"
fi
