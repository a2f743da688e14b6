#!/usr/bin/env bash
# Runs test binaries and adds up their verdicts into one closing line
# "N passed, M failed". Binaries under a tests/mpi_tests name run with
# $MPIRUN -np 4, Python checks (*.py) with Debian's /usr/bin/python3 (which has
# python3-torch); each one's output is kept in build/test-logs/.
# A binary that dies without its "tests: N passed, M failed" line counts as one failure.
set -u
passed=0
failed=0
mkdir -p build/test-logs
for bin in "$@"; do
  log="build/test-logs/$(echo "$bin" | tr / _).log"
  case "$bin" in
    *mpi_tests) cmd=("${MPIRUN:-mpirun}" -np 4 "$bin" "--gtest_filter=${FILTER:-*}") ;;
    *.py) cmd=(/usr/bin/python3 "$bin" "--gtest_filter=${FILTER:-*}") ;;
    *) cmd=("$bin" "--gtest_filter=${FILTER:-*}") ;;
  esac
  echo "== ${cmd[*]}"
  "${cmd[@]}" 2>&1 | tee "$log"
  line=$(grep -E '^tests: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
  if [ -z "$line" ]; then
    echo "!! $bin ended without its verdict line: counted as 1 failure"
    failed=$((failed + 1))
    continue
  fi
  p=$(echo "$line" | sed -E 's/tests: ([0-9]+) passed, ([0-9]+) failed/\1/')
  f=$(echo "$line" | sed -E 's/tests: ([0-9]+) passed, ([0-9]+) failed/\2/')
  passed=$((passed + p))
  failed=$((failed + f))
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
