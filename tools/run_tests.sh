#!/usr/bin/env bash
# Runs the test binaries and Python checks given as arguments (make test) and adds up
# their verdicts into one closing line "N passed, M failed, K skipped".
#
# A CPU-build binary runs once per mode of the table below (the settings of cpu/runtime/settings.h);
# a GPU-build binary (build/gpu/...) runs once, in the natural mode: the modes are the CPU
# build's (its mpi_tests runs on the node's GPUs, one rank each: gpu_mpi_rows). mpi_tests
# runs under $MPIRUN with the mode's ranks (its tests are written for 4; PipelineLayouts checks
# every layout of the world it runs in, hence 2 and 8: MPICH oversubscribes 8 ranks on 2 cores,
# the CPU build's NCCL waits sleep). Python checks run
# with Debian's /usr/bin/python3, which has python3-torch. Each run's output is kept in
# build/test-logs/, one file per binary and mode. The runs go $TEST_LANES (default 2) at a time,
# each printed whole when it ends (run_queued).
#
# The runner is strict. A run passes only with exit status 0 (mpirun's is non-zero when any
# rank's is: MPICH ORs the ranks' statuses) and its "tests: N passed, M failed" line; a run
# without the line, with a failure status after it, or over its time limit counts as one
# failure naming the run. A mode's filter that lists no test fails. Skipped tests
# (GTEST_SKIP, DISABLED_, a Python check's SKIPPED line) and whole runs the machine cannot make
# (skip_run) are counted and named; under CI=true each one not on SKIP_ALLOWED fails, and so
# does a PyTorch check that cannot import torch.
set -u
if [ "${BASH_VERSINFO[0]}" -lt 5 ] || { [ "${BASH_VERSINFO[0]}" -eq 5 ] && [ "${BASH_VERSINFO[1]}" -lt 1 ]; }; then
  echo "tools/run_tests.sh needs bash 5.1 or later (wait -n -p), not $BASH_VERSION" >&2
  exit 2
fi

# The modes: name | environment | unit_tests filter | mpi_tests filter | mpi_tests ranks.
# An empty filter: the mode does not run that binary; cpu_tests and Python checks run in the
# natural mode only. Every run also keeps to $FILTER (make test FILTER='Suite.*').
# The thread orders and 1 OS thread per launch (the natural mode runs one per core: cpu/runtime/settings.h)
# run unit_tests but four families: TrainLayout.* and TrainTensorParallel.* start ./train under
# mpirun and compare its losses between layouts (the same kernels at the same shapes as Trainer.*
# and GPT.*, which run in-process in every order, and the order changes no bit), Simulator.* runs
# no kernel, and Watchdog.* times a stuck step. They took 74 of the natural mode's 103 s, and each
# order mode 70-91 s with them (2026-11-28, fresh clone on the idle 2 cores).
# Strict memory and the stream delay are for the code that hands device memory and streams
# between host, model and pipeline (issue 10); a build without them ignores the variables.
# Every mode that runs mpi_tests checks that each NCCL call matches its partners'
# (CUDA_CPU_NCCL_CHECK=1, cpu/nccl/nccl_call_matching.h): a mismatch fails naming both calls instead of
# hanging until the time limit. It costs little (docs/testing.md); unit_tests makes no NCCL call.
# And each runs a device's NCCL operations one at a time (CUDA_CPU_NCCL_SERIAL=1,
# cpu/nccl/nccl_device.h), as a GPU may: ranks whose operations of several communicators start in
# different orders deadlock there (comm/nccl_order.h says why the project's never do).
# The stream delay leaves out PipelineLayouts.Bf16*: the delay tests the order of work on the
# streams, which the element type does not change (the same executor and trainer code, templated),
# and the fp32 layouts run under it; bf16's layouts run in the natural, np 2, np 8 and strict
# memory modes. They took 60 of the mode's 244 s, which without them took 194 s (2026-11-24,
# load 2-5 on the 2 cores). It leaves out PipelineLayouts.Afab* too: AFAB's streams order the
# same events as 1F1B's, with the forwards' messages all before the backwards' (no step where
# both directions are in flight, which 1F1B and the interleaved schedule have and run under the
# delay), and Pipeline.* runs AFAB's executed trace under it; it took 67 of the mode's 280 s
# (2026-11-26). Of PipelineLayouts, both modes run ZB-V (the split backward,
# the weight pool, two chunks a rank), the uneven split (1F1B, and on 2 stages with 2 replicas the
# interleaved schedule: both directions in flight, two chunks a rank) and the layout string (stages
# without layers); strict memory also 1F1B's every layout, bf16 (its master weights and rounding are
# host code of their own), and both modes DualPipeV (its overlapped pairs: two compute streams at once). The interleaved
# schedule's every layout left the stream delay: 91 of its 264 s, where the
# uneven split's interleaved case and Pipeline.* (the interleaved schedule on 4 stages) run it
# (2026-11-27). So did 1F1B's every layout (m = 1, 3 and 8, recompute off and on, on dp 4, dp 2 x
# pp 2 and pp 4): 50 of the mode's 148 s (2026-11-27, load 7); 1F1B runs under the delay in the
# uneven split (dp 2 x pp 2, pp 4), the layout string (pp 4), ZeRO-1's dp 2 x pp 2 and Pipeline.*
# (4 stages, recompute off and on), where the streams order the same events.
# The others (ZB-H1 and ZB-H2, issue 31's
# v-half, v-min, microbatch groups, looped BFS, zb-interleaved) are other orders of the same
# actions through the same executor and memory; they took 23 s of the natural mode's 130 s of
# layouts and about twice that in each of these modes (2026-11-27); Pipeline.* executes AFAB,
# 1F1B, the interleaved and the three zero-bubble schedules on 4 stages under both.
# ZeRO-1's dp 4 x pp 2 case (ZeroOne.BitwiseZeroZeroOnFourReplicasOfTwoStages) needs 8 ranks:
# the np 8 mode runs it, and the modes of 4 ranks (where it would skip) leave it out; so with
# the tensor-parallel groups of dp 2 x tp 2 x pp 2 (TensorParallelMesh.GroupsOfDpTwoTpTwoPpTwo) and its
# training against one process (TensorParallelLayouts.TwoReplicasOfTwoTpRanksTimesTwoStages...), and
# tp 2 x pp 4 with the interleaved, zb-h1 and zb-v schedules (TensorParallelLayouts.*FourStages*:
# 22 s together at -np 8, 2026-11-27: each runs the single process on all 8 ranks of the 2 cores,
# the layout twice, 1F1B on the same mesh and 2 x tp 2 x pp 2), and ZeRO-1 at dp 2 x tp 2 x pp 2
# (ZeroOne.BitwiseZeroZeroOnTwoReplicasOfTwoTpRanksTimesTwoStages, 5 s), and --sequence-parallel at
# dp 2 x tp 2 x pp 2 (TensorParallelLayouts.SequenceParallelOnTwoReplicas..., 3.8 s, 2026-11-28) and at
# tp 2 x pp 4 with zb-h1, zb-v and the interleaved schedule (...SequenceParallelWith*OnTwoTpRanksTimesFourStages...,
# whose *FourStages* the np 8 mode's filter matches: 6.1 to 7.4, 8.0 to 8.1 and 8.1 to 9.7 s, 2026-11-28). tp 2 alone, with
# and without --sequence-parallel (TensorParallelLayouts.TwoTpRanksGiveTheSingleProcess and
# ...SequenceParallelOnTwoTpRanksGivesTheSingleProcess) needs 2 ranks: the np 2 mode runs them, the
# natural mode leaves them out (0.5 and 1.1 s, 2026-11-28). Of PipeDream's layouts (p = the world,
# one stage a rank), the np 8 mode runs those whose staleness p = 8 changes: the rule with and
# without stashing, updating every two, vertical sync, documents, and recompute with stashing (19 s,
# 2026-11-28). Their twins with replicas, bf16, the non-finite gate, drains, saves, clipping, the
# warm-up and validation run the same host code at p = 8 as at 4 and 2, where both other modes
# run them; they took 101 of the mode's 367 s. ZeroOne's other
# cases run under strict memory and the stream delay too: ZeRO-1 moves gradients to their owners
# on the reduction stream and parameters back on the compute stream (14 s in each, 2026-11-27).
mode_table() {
  sed -E 's/[[:space:]]*\|[[:space:]]*/|/g; s/^[[:space:]]+|[[:space:]]+$//g' <<'TABLE'
natural             | CUDA_CPU_NCCL_CHECK=1 CUDA_CPU_NCCL_SERIAL=1                              | *                             | *:-ZeroOne.BitwiseZeroZeroOnFourReplicasOfTwoStages:TensorParallelLayouts.TwoTpRanksGiveTheSingleProcess:TensorParallelLayouts.SequenceParallelOnTwoTpRanksGivesTheSingleProcess:TensorParallelMesh.GroupsOfDpTwoTpTwoPpTwo:TensorParallelLayouts.TwoReplicasOfTwoTpRanksTimesTwoStagesGiveTheSingleProcess:TensorParallelLayouts.SequenceParallelOnTwoReplicas*:TensorParallelLayouts.*FourStages*:ZeroOne.BitwiseZeroZeroOnTwoReplicasOfTwoTpRanksTimesTwoStages | 4
np 2                | CUDA_CPU_NCCL_CHECK=1 CUDA_CPU_NCCL_SERIAL=1                              |                               | PipelineLayouts.*:TensorParallelLayouts.TwoTpRanksGiveTheSingleProcess:TensorParallelLayouts.SequenceParallelOnTwoTpRanksGivesTheSingleProcess | 2
np 8                | CUDA_CPU_NCCL_CHECK=1 CUDA_CPU_NCCL_SERIAL=1                              |                               | PipelineLayouts.*:ZeroOne.BitwiseZeroZeroOnFourReplicasOfTwoStages:TensorParallelMesh.GroupsOfDpTwoTpTwoPpTwo:TensorParallelLayouts.TwoReplicasOfTwoTpRanksTimesTwoStagesGiveTheSingleProcess:TensorParallelLayouts.SequenceParallelOnTwoReplicas*:TensorParallelLayouts.*FourStages*:ZeroOne.BitwiseZeroZeroOnTwoReplicasOfTwoTpRanksTimesTwoStages-PipelineLayouts.PipeDream*Replicas*:PipelineLayouts.PipeDream*Bf16*:PipelineLayouts.PipeDream*NonFinite*:PipelineLayouts.PipeDream*Drain*:PipelineLayouts.PipeDreamAndSynchronous*:PipelineLayouts.PipeDreamClipped*:PipelineLayouts.PipeDreamWithSeqLenWarmup*:PipelineLayouts.PipeDreamValidates*:PipelineLayouts.PipeDreamRecomputingWithVerticalSync* | 8
shuffle seed 1      | CUDA_CPU_THREAD_ORDER=shuffle CUDA_CPU_SEED=1                             | *:-TrainLayout.*:TrainTensorParallel.*:Simulator.*:Watchdog.* |                                                         |
shuffle seed 2      | CUDA_CPU_THREAD_ORDER=shuffle CUDA_CPU_SEED=2                             | *:-TrainLayout.*:TrainTensorParallel.*:Simulator.*:Watchdog.* |                                                         |
reverse             | CUDA_CPU_THREAD_ORDER=reverse                                             | *:-TrainLayout.*:TrainTensorParallel.*:Simulator.*:Watchdog.* |                                                         |
1 block thread      | CUDA_CPU_BLOCK_THREADS=1                                                  | *:-TrainLayout.*:TrainTensorParallel.*:Simulator.*:Watchdog.* |                                                         |
strict memory       | CUDA_CPU_STRICT_MEMORY=1 CUDA_CPU_NCCL_CHECK=1 CUDA_CPU_NCCL_SERIAL=1     | Trainer.*:GPT.*:TrainLayout.* | Pipeline.*:TrainLayout.*:Trainer.*:PipelineLayouts.OneFOneB*:PipelineLayouts.ZeroBubbleV*:PipelineLayouts.Uneven*:PipelineLayouts.LayoutString*:PipelineLayouts.DualPipeV*:PipelineLayouts.Bf16*:ZeroOne.*-ZeroOne.BitwiseZeroZeroOnFourReplicasOfTwoStages:ZeroOne.BitwiseZeroZeroOnTwoReplicasOfTwoTpRanksTimesTwoStages | 4
stream delay 200 us | CUDA_CPU_STREAM_DELAY_US=200 CUDA_CPU_NCCL_CHECK=1 CUDA_CPU_NCCL_SERIAL=1 | Trainer.*:GPT.*:TrainLayout.* | Pipeline.*:TrainLayout.*:Trainer.*:PipelineLayouts.ZeroBubbleV*:PipelineLayouts.Uneven*:PipelineLayouts.LayoutString*:PipelineLayouts.DualPipeV*:ZeroOne.*-ZeroOne.BitwiseZeroZeroOnFourReplicasOfTwoStages:ZeroOne.BitwiseZeroZeroOnTwoReplicasOfTwoTpRanksTimesTwoStages | 4
TABLE
}

# Seconds one run of a binary may take; then timeout sends TERM, and KILL 30 s later, to
# its whole process group: mpirun, its proxies and every rank. At least 20 times the longest
# run measured on 2 cores shared with others (load 10, 2026-11-23: unit_tests 30 s,
# mpi_tests 64 s, cpu_tests 1 s, pytorch_check.py 9 s), so that only a hang reaches them.
time_limit() {
  case "$1" in
    *unit_tests) echo 600 ;;
    *mpi_tests) echo 1200 ;;
    *cpu_tests) echo 300 ;;
    *) echo 600 ;;
  esac
}

# Tests (or whole runs) that may be skipped under CI=true, one "Suite.Name" (or the run's name
# as skip_run says it) per entry with the reason beside it. ./train is built before make test
# runs, so its tests run, and CI has no GPU, so no GPU run is skipped there.
SKIP_ALLOWED=(
  # Its strings cut 4 stages of one replica: it runs at -np 4, and has no such layout at 2 or 8.
  PipelineLayouts.LayoutStringGivesTheSingleStageRun
  # The fused attention through the executor on 4 stages of one replica (1F1B, recompute off and
  # on, fp32 and bf16): -np 4's layout; the other layouts run the same executor with the
  # materialised attention, and the fused kernels' shapes do not depend on the layout.
  PipelineLayouts.FusedAttentionGivesTheSingleStageRun
)

passed=0
failed=0
skipped=0
failures=()
mkdir -p build/test-logs

# fail WHAT: one failure, named here and again above the closing line.
fail() {
  echo "!! $1: counted as 1 failure"
  failures+=("$1")
  failed=$((failed + 1))
}

# skip_run NAME REASON: a whole run not made, counted as one skip; under CI=true a failure unless
# NAME is on SKIP_ALLOWED.
skip_run() {
  echo "-- $1: $2: skipped"
  skipped=$((skipped + 1))
  if [ "${CI:-}" = true ] && [[ " ${SKIP_ALLOWED[*]} " != *" $1 "* ]]; then
    fail "$1 was skipped ($2), and under CI=true only the runs on run_tests.sh's SKIP_ALLOWED may be"
  fi
}

# count RUN LOG STATUS SECONDS LIMIT: adds the verdict of the run whose output is in LOG.
count() {
  local run=$1 log=$2 status=$3 seconds=$4 limit=$5 line p=0 f=0
  line=$(grep -E '^tests: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
  if [ -n "$line" ]; then
    read -r p f < <(echo "$line" | sed -E 's/tests: ([0-9]+) passed, ([0-9]+) failed/\1 \2/')
  fi
  # gtest's own lines name the tests GTEST_SKIP skipped and count the disabled (DISABLED_) ones.
  # gtest_main leaves skipped tests out of its verdict; mpi_gtest_main counts them as passed:
  # then passed + failed is gtest's count of tests run. A Python check says "SKIPPED Name: why"
  # (tests/check_runner.py) and leaves it out of its verdict.
  local names disabled ran k
  names=$(sed -nE -e 's/^\[  SKIPPED \] ([^ ]+) \([0-9]+ ms\)$/\1/p' -e 's/^SKIPPED ([^ :]+): .*$/\1/p' "$log" | sort -u)
  disabled=$(sed -nE 's/^ *YOU HAVE ([0-9]+) DISABLED TESTS?$/\1/p' "$log" | tail -n 1)
  ran=$(sed -nE 's/^\[==========\] ([0-9]+) tests? from .* ran\..*/\1/p' "$log" | tail -n 1)
  k=$(echo -n "$names" | grep -c '^')
  if [ "$k" -gt 0 ] && [ "$((p + f))" = "${ran:-}" ]; then p=$((p - k)); fi
  passed=$((passed + p))
  failed=$((failed + f))
  skipped=$((skipped + k + ${disabled:-0}))
  echo "-- $run: $p passed, $f failed, $((k + ${disabled:-0})) skipped in $seconds s"

  if [ "$status" -eq 124 ] || { [ "$status" -eq 137 ] && [ "$seconds" -ge "$limit" ]; }; then
    fail "$run: timed out after $limit s (killed with all its processes)"
  elif [ -z "$line" ]; then
    fail "$run: ended without its verdict line (exit status $status)"
  elif [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then
    fail "$run: exit status $status after its verdict line"
  fi
  if [ -n "$disabled" ]; then
    echo "   skipped: $disabled disabled tests"
    [ "${CI:-}" = true ] && fail "$run: $disabled disabled tests, and under CI=true a test is deleted or fixed, not disabled"
  fi
  local name
  for name in $names; do
    echo "   skipped: $name"
    if [ "${CI:-}" = true ] && [[ " ${SKIP_ALLOWED[*]} " != *" $name "* ]]; then
      fail "$run: $name was skipped, and under CI=true only the tests on run_tests.sh's SKIP_ALLOWED may be"
    fi
  done
}

# The runs, queued by queue_run and run by run_queued: run i is mode run_mode[i], with the
# environment assignments run_env[i], the command run_cmd[i] (quoted, as printf %q gives it),
# at most run_limit[i] seconds, its output kept in run_log[i]; run_shown[i] is how the command
# is shown.
run_mode=() run_env=() run_cmd=() run_shown=() run_limit=() run_log=()

# queue_run MODE LOG LIMIT ENVIRONMENT COMMAND...
queue_run() {
  run_mode+=("$1") run_log+=("$2") run_limit+=("$3") run_env+=("$4")
  shift 4
  run_cmd+=("$(printf '%q ' "$@")")
  run_shown+=("$*")
}

# expected_seconds SHOWN MODE: about how long the run takes, so that the queue starts the longest
# first and the lanes end together. One lane on 2 shared cores (2026-11-24): mpi_tests' stream
# delay 218 s, its other runs 21-95 s, unit_tests' 10-35 s, every other run at most 19 s.
expected_seconds() {
  case "$2|$1" in
    stream*\|*/mpi_tests\ *) echo 250 ;;
    *\|*/mpi_tests\ *) echo 90 ;;
    *\|*/unit_tests\ *) echo 20 ;;
    *) echo 10 ;;
  esac
}

# run_queued: runs the queued runs, at most $TEST_LANES (default 2) at once, the longest
# expected first. Each run's output goes to its log, and when the run ends, the whole log is
# printed under its command, then its verdict (count): runs' outputs never interleave. Many
# runs wait more than they compute (mpi_tests' ranks sleep in their NCCL waits, the stream
# delay sleeps 200 us per operation, the Python checks start ./train and wait for it), so a
# second lane takes the idle core (docs/testing.md, "What CI costs"). TEST_LANES=1 runs them
# one after another.
run_queued() {
  local lanes=${TEST_LANES:-2} i finished status seconds running=0 next=0
  local -a order
  scratch=$(mktemp -d)
  # Interrupted or killed: the runs under way end too (their timeout, whose pid is in
  # $scratch/RUN.pid, passes TERM on to its run's process group), and the scratch files go.
  trap 'for file in "$scratch"/*.pid; do [ -e "${file%.pid}" ] || kill -TERM "$(cat "$file")" 2>/dev/null; done; rm -rf "$scratch"' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  mapfile -t order < <(for i in "${!run_mode[@]}"; do
    echo "$(expected_seconds "${run_shown[$i]}" "${run_mode[$i]}") $i"
  done | sort -s -k1,1nr | cut -d' ' -f2)
  while [ "$next" -lt "${#order[@]}" ] || [ "$running" -gt 0 ]; do
    while [ "$running" -lt "$lanes" ] && [ "$next" -lt "${#order[@]}" ]; do
      i=${order[$next]}
      next=$((next + 1))
      (
        read -ra assignments <<<"${run_env[$i]}"
        eval "set -- ${run_cmd[$i]}"
        start=$SECONDS
        env "${assignments[@]}" timeout --kill-after=30 "${run_limit[$i]}" "$@" </dev/null >"${run_log[$i]}" 2>&1 &
        echo $! >"$scratch/$i.pid"
        wait $!
        echo "$? $((SECONDS - start))" 2>/dev/null >"$scratch/$i"
      ) &
      pid_run[$!]=$i
      running=$((running + 1))
      echo ".. [${run_mode[$i]}] ${run_shown[$i]}: started"
    done
    wait -n -p finished
    [ -n "${pid_run[$finished]:-}" ] || continue
    i=${pid_run[$finished]}
    unset "pid_run[$finished]"
    running=$((running - 1))
    status=1 seconds=0
    read -r status seconds <"$scratch/$i"
    echo "== [${run_mode[$i]}] ${run_env[$i]:+${run_env[$i]} }${run_shown[$i]}"
    cat "${run_log[$i]}"
    count "[${run_mode[$i]}] ${run_shown[$i]}" "${run_log[$i]}" "$status" "$seconds" "${run_limit[$i]}"
  done
}
pid_run=()
scratch=

# list_tests BIN PATTERN: the tests of BIN that the gtest filter PATTERN selects, one a line.
list_tests() {
  "$1" --gtest_list_tests "--gtest_filter=$2" </dev/null 2>/dev/null |
    awk '/^[^ ]/ { suite = $1 } /^  [^ ]/ { print suite $1 }'
}

# selection BIN PATTERN: the gtest filter of BIN's run in a mode: the tests both the mode's
# PATTERN and $FILTER select (gtest cannot intersect two filters, so BIN lists both); empty
# when there are none.
selection() {
  local bin=$1 pattern=$2
  if [ "$pattern" = '*' ]; then echo "${FILTER:-*}"; return; fi
  if [ "${FILTER:-*}" = '*' ]; then echo "$pattern"; return; fi
  comm -12 <(list_tests "$bin" "$pattern" | sort) <(list_tests "$bin" "$FILTER" | sort) | paste -sd:
}

# gpu_mpi_rows BIN GPUS: the runs of the GPU build's mpi_tests BIN on a node with GPUS GPUs, as
# rows of the mode table, into rows. A GPU node runs one rank per GPU (comm/rank_device.h), and
# the modes' settings are the CPU build's, so only the ranks change: all of mpi_tests, written
# for 4 ranks, on 4 of the GPUs (the natural mode's row); and PipelineLayouts, which checks every
# layout of the world it runs in with dp and pp in {1, 2, 4}, on the most GPUs of 2 or 8 (as the
# np 2 and np 8 modes do; 3 ranks have no such layout, and 8 cover dp x pp = 2 x 4). A run the
# GPUs cannot carry is said and counted as a skip: below 4 GPUs the whole suite, below 2 the
# layouts too.
gpu_mpi_rows() {
  local bin=$1 gpus=$2 layout_ranks=0 environment pattern r
  for r in 2 4 8; do [ "$gpus" -ge "$r" ] && layout_ranks=$r; done
  rows=()
  if [ "$gpus" -ge 4 ]; then
    rows+=("$natural_row")
  else
    skip_run "[natural] $bin" "its tests are written for 4 ranks, one per GPU; $gpus GPU(s) on this node"
  fi
  if [ "$layout_ranks" -lt 2 ]; then
    skip_run "[layouts] $bin" "PipelineLayouts.* needs 2 ranks or more, one per GPU; $gpus GPU(s) on this node"
  elif [ "$layout_ranks" -ne 4 ]; then
    IFS='|' read -r _ environment _ _ _ <<<"$natural_row"
    IFS='|' read -r _ _ _ pattern _ <<<"$(printf '%s\n' "${modes[@]}" | grep "^np $layout_ranks|")"
    rows+=("np $layout_ranks|$environment||$pattern|$layout_ranks")
  fi
}

mapfile -t modes < <(mode_table)
natural_row=$(printf '%s\n' "${modes[@]}" | grep '^natural|')
for bin in "$@"; do
  case "$bin" in
    *.py)
      # Asked once: the import takes 1 s of CPU and up to 8 s on a loaded machine.
      if [ -z "${python_imports_torch:-}" ]; then
        python_imports_torch=$(/usr/bin/python3 -c 'import numpy, torch' 2>/dev/null && echo yes || echo no)
      fi
      if [ "$python_imports_torch" = no ]; then
        if [ "${CI:-}" = true ]; then
          fail "$bin: /usr/bin/python3 cannot import torch or numpy: install Debian's python3-torch; under CI=true the PyTorch check must run"
        else
          skip_run "$bin" "/usr/bin/python3 cannot import torch or numpy"
        fi
        continue
      fi
      ;;
  esac
  rows=("${modes[@]}")
  case "$bin" in
    *build/gpu/*mpi_tests) gpu_mpi_rows "$bin" "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" ;;
    *build/gpu/*) rows=("$natural_row") ;;
  esac
  for row in "${rows[@]}"; do
    IFS='|' read -r mode environment unit_pattern mpi_pattern ranks <<<"$row"
    case "$bin" in
      */unit_tests) pattern=$unit_pattern ;;
      */mpi_tests) pattern=$mpi_pattern ;;
      *) pattern=$([ "$mode" = natural ] && echo '*') ;;
    esac
    [ -n "$pattern" ] || continue
    if [ "$pattern" != '*' ] && [ -z "$(list_tests "$bin" "$pattern")" ]; then
      fail "[$mode] $bin: lists no test for its filter $pattern"
      continue
    fi
    filter=$(selection "$bin" "$pattern")
    if [ -z "$filter" ]; then
      echo "-- [$mode] $bin: FILTER selects none of $pattern"
      continue
    fi
    log="build/test-logs/$(echo "$bin" | tr / _)"
    [ "$mode" = natural ] || log="$log-$(printf %s "$mode" | tr -cs 'a-z0-9' -)"
    limit=$(time_limit "$bin")
    case "$bin" in
      *mpi_tests) queue_run "$mode" "$log.log" "$limit" "$environment" "${MPIRUN:-mpirun}" -np "$ranks" "$bin" "--gtest_filter=$filter" ;;
      *.py) queue_run "$mode" "$log.log" "$limit" "$environment" /usr/bin/python3 "$bin" "--gtest_filter=$filter" ;;
      *) queue_run "$mode" "$log.log" "$limit" "$environment" "$bin" "--gtest_filter=$filter" ;;
    esac
  done
done
run_queued

for failure in "${failures[@]}"; do echo "failed: $failure"; done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
