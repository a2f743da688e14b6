#!/usr/bin/env bash
# Runs test binaries and adds up their verdicts into one closing line
# "N passed, M failed". Binaries under a tests/mpi_tests name run with
# $MPIRUN -np 4 (their tests are written for 4 ranks); then the PipelineLayouts
# tests among those $FILTER selects, which check every layout of the world they
# run in (tests/mpi/layouts_test.cu), run again with -np 2 and -np 8 (MPICH
# oversubscribes 8 ranks on a 2-core machine; the CPU build's NCCL waits sleep).
# Python checks (*.py) run with Debian's /usr/bin/python3 (which has
# python3-torch). Each run's output is kept in build/test-logs/.
# A run that dies without its "tests: N passed, M failed" line counts as one failure.
set -u
passed=0
failed=0
mkdir -p build/test-logs

# run LOG COMMAND...: runs the command, keeps its output in LOG, adds its verdict.
run() {
  local log=$1
  shift
  echo "== $*"
  "$@" 2>&1 | tee "$log"
  local line
  line=$(grep -E '^tests: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
  if [ -z "$line" ]; then
    echo "!! $* ended without its verdict line: counted as 1 failure"
    failed=$((failed + 1))
    return
  fi
  passed=$((passed + $(echo "$line" | sed -E 's/tests: ([0-9]+) passed, ([0-9]+) failed/\1/')))
  failed=$((failed + $(echo "$line" | sed -E 's/tests: ([0-9]+) passed, ([0-9]+) failed/\2/')))
}

# The PipelineLayouts tests of binary $1 that $FILTER selects, as a gtest filter (empty if none).
# gtest filters cannot intersect two patterns, so the binary lists FILTER's tests (in one process).
layout_tests() {
  "$1" --gtest_list_tests "--gtest_filter=${FILTER:-*}" |
    awk '/^[^ ]/ { suite = $1 } /^  [^ ]/ && suite == "PipelineLayouts." { printf "%s%s%s", sep, suite, $1; sep = ":" }'
}

for bin in "$@"; do
  log="build/test-logs/$(echo "$bin" | tr / _)"
  case "$bin" in
    *mpi_tests)
      run "$log.log" "${MPIRUN:-mpirun}" -np 4 "$bin" "--gtest_filter=${FILTER:-*}"
      layouts=$(layout_tests "$bin")
      if [ -n "$layouts" ]; then
        for np in 2 8; do run "$log-np$np.log" "${MPIRUN:-mpirun}" -np $np "$bin" "--gtest_filter=$layouts"; done
      fi
      ;;
    *.py) run "$log.log" /usr/bin/python3 "$bin" "--gtest_filter=${FILTER:-*}" ;;
    *) run "$log.log" "$bin" "--gtest_filter=${FILTER:-*}" ;;
  esac
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
