#!/usr/bin/python3
"""A rank that stops responding does not hang the job: its pipeline neighbours' watchdogs
(--timeout, trainer/safety/watchdog.h) see their schedule step make no progress, the first to see it
reports where it is stuck, and the job ends on every rank.

Runs `mpirun -np 4 ./train --timeout 5` on a small model, waits for step 3's line, stops one rank
with SIGSTOP, and checks that mpirun exits non-zero within TIMEOUT of the stop, that no rank of the
run is left, and that the report is right: its first line names a rank, its stage and replica,
the training step under way and the schedule step it is stuck in with its position; its second
line is that stage's schedule row with the same step marked at the same position; and the step is
one the stuck rank can only be in while waiting for the stopped one: a transfer, with the stopped
rank's stage when the reporting rank is its pipeline neighbour (the others wait for a neighbour
that waits). When rank 0 is the stopped one, nobody listens for the reports: each stuck rank
prints its own after its grace period (trainer/safety/error_channel.h), and each is checked. MPICH's mpirun (hydra) is assumed, for its -prepend-rank.
    /usr/bin/python3 tests/train_watchdog_test.py [--gtest_filter=PATTERN]
TRAIN names the program (default ./train), MPIRUN the launcher (default mpirun). One line per
check, then "tests: N passed, M failed", as tools/run_tests.sh expects.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

from check_runner import run_checks, skipped_for_ranks
from train_failure_test import ROOT, SMALL_MODEL, processes_running, write_text

# --timeout 5, and the report's rank-0 printing and abort take well under a second; a rank 0
# that is itself stopped leaves the reporting rank to print and abort after its 5 s grace period.
# 30 s is the bound and far above 5 + 5.
TIMEOUT = 30
WATCHDOG_SECONDS = 5

# name: (world rank to stop, the stages whose report is acceptable)
CASES = {
    "Watchdog.StoppedMiddleStageIsNamedByTheTransferItsNeighbourWaitsIn": 2,
    "Watchdog.StoppedRank0StillEndsTheJobAndAPeerReports": 0,
}

REPORT = re.compile(r"train: error: rank (\d+) \(stage (\d+), replica (\d+)\): step (\d+), stuck (\d+) s in "
                    r"(\S+), step (\d+) of (\d+) of its schedule$")


def rank_pids(marker):
    """{world rank: pid} of the run's ranks (PMI_RANK in their environment)."""
    ranks = {}
    for pid in processes_running(marker):
        try:
            with open("/proc/%d/environ" % pid, "rb") as file:
                environment = dict(item.split(b"=", 1) for item in file.read().split(b"\0") if b"=" in item)
        except OSError:
            continue
        if b"PMI_RANK" in environment and b"mpirun" not in open("/proc/%d/cmdline" % pid, "rb").read():
            ranks[int(environment[b"PMI_RANK"])] = pid
    return ranks


def run_and_stop(directory, stopped_rank):
    """(status or None, seconds from the stop to the end, output lines, pids left)."""
    data = os.path.join(directory, "text.txt")
    write_text(data)
    mpirun = os.environ.get("MPIRUN", "mpirun").split()
    train = os.environ.get("TRAIN", os.path.join(ROOT, "train"))
    command = mpirun + ["-prepend-rank", "-np", "4", train, "--train-data", data, "--steps", "1000",
                        "--timeout", str(WATCHDOG_SECONDS)] + SMALL_MODEL
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                               cwd=ROOT)
    # A run that never reaches step 3 is killed, not waited for.
    killer = threading.Timer(TIMEOUT, lambda: os.killpg(process.pid, signal.SIGKILL))
    killer.start()
    lines = []
    stopped_at = None
    for raw in process.stdout:
        lines.append(raw.decode(errors="replace").rstrip("\n"))
        if stopped_at is None and re.match(r"\[0\] step 3/1000 \|", lines[-1]):
            os.kill(rank_pids(data)[stopped_rank], signal.SIGSTOP)
            stopped_at = time.monotonic()
            break
    killer.cancel()
    status = None
    try:
        rest, _ = process.communicate(timeout=TIMEOUT)
        status = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        rest, _ = process.communicate()
    seconds = time.monotonic() - stopped_at if stopped_at else float("nan")
    lines += rest.decode(errors="replace").splitlines()
    time.sleep(0.5)  # a rank killed by mpirun may take a moment to leave the process table
    left = processes_running(data)
    for pid in left:
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGKILL)
    return status, seconds, lines, left


def transfers_with(step_text, stage, stages):
    """The stages a transfer step exchanges with: sF and rB with the next stage, rF and sB with the previous."""
    peers = set()
    for action in step_text.split("+"):
        kind = action[:2]
        if kind in ("sF", "rB"):
            peers.add((stage + 1) % stages)
        elif kind in ("rF", "sB"):
            peers.add((stage - 1) % stages)
        else:
            return None  # a compute
    return peers


def check(name):
    if skipped_for_ranks(4):
        return skipped_for_ranks(4)
    stopped_rank = CASES[name]
    with tempfile.TemporaryDirectory(prefix="train_watchdog_") as directory:
        status, seconds, lines, left = run_and_stop(directory, stopped_rank)
    if status is None:
        return False, "still running %d s after the stop (killed); last lines: %s" % (TIMEOUT, lines[-3:])
    if left:
        return False, "mpirun ended (status %d) but %d processes of the run were left" % (status, len(left))
    reports = [(i, REPORT.search(line)) for i, line in enumerate(lines) if REPORT.search(line)]
    if status == 0 or not reports:
        return False, "status %d, no report; last lines: %s" % (status, lines[-4:])
    detail = []
    for i, match in reports:
        rank, stage, replica, _, stuck, step_text, position, length = match.groups()
        rank, stage, position, length = int(rank), int(stage), int(position), int(length)
        # The row: "[r] stage S | cell cell ..." with ">step<" at the position.
        row = lines[i + 1].split("|", 1)[1].split() if i + 1 < len(lines) and "|" in lines[i + 1] else []
        marked = [k for k, cell in enumerate(row) if cell.startswith(">")]
        peers = transfers_with(step_text, stage, 4)
        neighbour = abs(stage - stopped_rank) == 1  # 1f1b: no transfer between the last stage and the first
        waits_in_a_transfer = peers is not None and (stopped_rank in peers or not neighbour)
        ok = (rank == stage and replica == "0" and int(stuck) >= WATCHDOG_SECONDS and len(row) == length and
              marked == [position - 1] and row[position - 1] == ">" + step_text + "<" and waits_in_a_transfer)
        if not ok:
            return False, "report %r with row %r (stopped rank %d)" % (match.group(0), row, stopped_rank)
        detail.append("rank %d in %s (%d of %d)" % (rank, step_text, position, length))
    # The stopped rank's neighbours are stuck first; rank 0 prints what comes within a second of the first.
    neighbours = [int(m.group(2)) for _, m in reports if abs(int(m.group(2)) - stopped_rank) == 1]
    if not neighbours:
        return False, "no report from a neighbour of the stopped rank %d: %s" % (stopped_rank, detail)
    return True, "status %d, %.1f s after the stop (limit %d), no rank left; %s" % (
        status, seconds, TIMEOUT, ", ".join(detail))


if __name__ == "__main__":
    sys.exit(run_checks(CASES, check))
