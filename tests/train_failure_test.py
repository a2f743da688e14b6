#!/usr/bin/python3
"""A rank that fails in the middle of a step ends the whole job within seconds, and world rank 0
says which rank failed and why (trainer/safety/error_channel.h), although rank 0 itself, like the failing
rank's pipeline neighbours, is waiting in a transfer that will never complete.

Runs `mpirun -np 4 ./train` on a small model with the test-only TRAIN_TEST_FAIL="rank=R,step=S"
(trainer/safety/failure_injection.h) and checks that mpirun exits non-zero within TIMEOUT, that no rank
of the run is left, that the one error line names the failing rank, its stage and replica and
the failure, and that rank 0 printed it. Also runs the same command without a failure, which
must end with status 0. MPICH's mpirun (hydra) is assumed, for its -prepend-rank. On a machine
that cannot run 4 ranks (fewer GPUs), each check says SKIPPED and counts nothing.
    /usr/bin/python3 tests/train_failure_test.py [--gtest_filter=PATTERN]
TRAIN names the program (default ./train), MPIRUN the launcher (default mpirun). One line per
check, then "tests: N passed, M failed" (exit status 1 on a failure), as tools/run_tests.sh expects.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from check_runner import run_checks
from training_text import write_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The run of 10 steps takes about 2 s here; a failing rank's own fallback (when rank 0 does not
# answer) comes after 5 s. 30 s is far above both and far below a test harness's patience.
TIMEOUT = 30
SMALL_MODEL = ["--layers", "4", "--dim", "64", "--batch", "2", "--seq-len", "32", "--microbatches", "4",
               "--val-every", "0", "--sample-every", "0"]

# name: (TRAIN_TEST_FAIL or None, extra options, the failing rank's stage and replica)
CASES = {
    # Stage 2 of 4: stage 1 waits to send it activations, stage 3 to receive them, and stage 0
    # (rank 0) for stage 1's gradients.
    "RankFailure.MiddleStageEndsEveryRankAndRank0NamesIt": ("rank=2,step=3", [], (2, 0)),
    "RankFailure.Rank0ItselfEndsEveryRank": ("rank=0,step=2", [], (0, 0)),
    "RankFailure.ReplicaRankIsNamedByStageAndReplica": ("rank=3,step=2", ["--dp", "2"], (1, 1)),
    # The failing rank has NCCL operations running when it aborts its communicators (after its
    # report): its step's transfer groups, or its first data-parallel bucket's sum.
    "RankFailure.FailureWithItsTransfersInFlightEndsEveryRank": ("rank=2,step=3,during=transfers", [], (2, 0)),
    "RankFailure.FailureWithItsDataParallelSumInFlightEndsEveryRank": (
        "rank=3,step=2,during=data-parallel-sum", ["--dp", "2"], (1, 1)),
    "RankFailure.RunWithoutFailureEndsCleanly": (None, [], None),
}



def processes_running(marker):
    """Pids of this user's processes whose command line contains marker (the run's data path)."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as file:
                if marker.encode() in file.read():
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def run_train(directory, fail, options):
    """Runs mpirun -np 4 ./train; returns (exit status or None on timeout, seconds, output lines,
    pids of the run still alive afterwards)."""
    data = os.path.join(directory, "text.txt")
    write_text(data)
    mpirun = os.environ.get("MPIRUN", "mpirun").split()
    train = os.environ.get("TRAIN", os.path.join(ROOT, "train"))
    command = mpirun + ["-prepend-rank", "-np", "4", train, "--train-data", data, "--steps", "10"] + SMALL_MODEL + options
    environment = dict(os.environ)
    environment.pop("TRAIN_TEST_FAIL", None)
    if fail:
        environment["TRAIN_TEST_FAIL"] = fail
    begin = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment,
                               start_new_session=True, cwd=ROOT)
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
        status = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        status = None
    seconds = time.monotonic() - begin
    time.sleep(0.5)  # a rank killed by mpirun may take a moment to leave the process table
    left = processes_running(data)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return status, seconds, output.decode(errors="replace").splitlines(), left


def check(name):
    """(passed, detail) of one case; passed is None when the machine has fewer than 4 GPUs a node."""
    fail, options, place = CASES[name]
    with tempfile.TemporaryDirectory(prefix="train_failure_") as directory:
        status, seconds, lines, left = run_train(directory, fail, options)
    if status is None:
        return False, "still running after %d s (killed); last lines: %s" % (TIMEOUT, lines[-3:])
    if left:
        return False, "mpirun ended (status %d) but %d processes of the run were left" % (status, len(left))
    if any(re.search(r"train: error: \d+ ranks on .* but (\d+ GPUs?|no GPU)", line) for line in lines):
        return None, "this machine cannot run 4 ranks: %s" % [line for line in lines if "train: error:" in line]
    errors = [line for line in lines if "train: error:" in line]
    if fail is None:
        ok = status == 0 and not errors and any(re.search(r"step 10/10 \|", line) for line in lines)
        return ok, "status %d in %.1f s, %d error lines" % (status, seconds, len(errors))
    rank = int(re.match(r"rank=(\d+)", fail).group(1))
    step = int(re.search(r"step=(\d+)", fail).group(1))
    during = re.search(r"during=([a-z-]+)", fail)
    expected = "[0] train: error: rank %d (stage %d, replica %d) failed: TRAIN_TEST_FAIL: the failure injected in " \
               "step %d%s" % (rank, place[0], place[1], step, " during its " + during.group(1) if during else "")
    # The failing step never ends. (The step before may end without its line: rank 0's listener
    # can hear the failure before rank 0's main thread prints that line.)
    steps_done = [line for line in lines if re.match(r"\[0\] step \d+/10 \|", line)]
    ok = status != 0 and errors == [expected] and len(steps_done) < step
    return ok, "status %d in %.1f s (limit %d), no rank left, error lines %s, %d of %d steps done before" % (
        status, seconds, TIMEOUT, errors, len(steps_done), step - 1)


if __name__ == "__main__":
    sys.exit(run_checks(CASES, check))
