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
prints its own after its grace period (trainer/safety/error_channel.h), and each is checked. At
tp 2 x pp 2 (issue 33), a stopped tp rank is named by its tp peer, stuck in a compute step (a tp
all-reduce), or by its pipeline neighbour of the same tp rank, stuck in a transfer with it. MPICH's mpirun (hydra) is assumed, for its -prepend-rank.
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

# name: the world rank to stop
CASES = {
    "Watchdog.StoppedMiddleStageIsNamedByTheTransferItsNeighbourWaitsIn": 2,
    "Watchdog.StoppedRank0StillEndsTheJobAndAPeerReports": 0,
}
# At tp 2 x pp 2 (issue 33 item 5), world rank 3 (stage 1, tp rank 1) stopped: its tp peer (rank 2)
# waits in a tp all-reduce inside a compute step, its pipeline neighbour of the same tp rank
# (rank 1) in a transfer with stage 1; the others wait for a waiter.
TENSOR_PARALLEL = ["--tp", "2", "--pp", "2"]
TP_CASE = "Watchdog.StoppedTpRankIsNamedByItsTpPeersComputeAndItsNeighboursTransfer"
TP_STOPPED_RANK = 3
CASES[TP_CASE] = TP_STOPPED_RANK

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


def run_and_stop(directory, stopped_rank, options=()):
    """(status or None, seconds from the stop to the end, output lines, pids left)."""
    data = os.path.join(directory, "text.txt")
    write_text(data)
    mpirun = os.environ.get("MPIRUN", "mpirun").split()
    train = os.environ.get("TRAIN", os.path.join(ROOT, "train"))
    command = mpirun + ["-prepend-rank", "-np", "4", train, "--train-data", data, "--steps", "1000",
                        "--timeout", str(WATCHDOG_SECONDS)] + SMALL_MODEL + list(options)
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


def reports_of_a_run_that_ended(stopped_rank, options=()):
    """(None, the reports: (line index, match), the output lines, status, seconds) of a run stopped at
    step 3's line, or (the failure's verdict, ...) when it did not end within TIMEOUT, left ranks
    behind or reported nothing."""
    with tempfile.TemporaryDirectory(prefix="train_watchdog_") as directory:
        status, seconds, lines, left = run_and_stop(directory, stopped_rank, options)
    reports = [(i, REPORT.search(line)) for i, line in enumerate(lines) if REPORT.search(line)]
    failure = None
    if status is None:
        failure = (False, "still running %d s after the stop (killed); last lines: %s" % (TIMEOUT, lines[-3:]))
    elif left:
        failure = (False, "mpirun ended (status %d) but %d processes of the run were left" % (status, len(left)))
    elif status == 0 or not reports:
        failure = (False, "status %d, no report; last lines: %s" % (status, lines[-4:]))
    return failure, reports, lines, status, seconds


def marked_row(lines, i):
    """The schedule row printed after report line i ("[r] stage S | cell cell ...") and its marked cells."""
    row = lines[i + 1].split("|", 1)[1].split() if i + 1 < len(lines) and "|" in lines[i + 1] else []
    return row, [k for k, cell in enumerate(row) if cell.startswith(">")]


def tensor_parallel_check():
    """The tp 2 x pp 2 case: every report names its rank's stage (comm/mesh.h: rank / tp % pp) and
    marks its step in its row; the stopped rank's tp peer, if it reports, is in a compute step (its
    tp all-reduce), its pipeline neighbour of the same tp rank in a transfer with the stopped
    rank's stage; at least one of the two reports."""
    failure, reports, lines, status, seconds = reports_of_a_run_that_ended(TP_STOPPED_RANK, TENSOR_PARALLEL)
    if failure:
        return failure
    stopped_stage = TP_STOPPED_RANK // 2 % 2
    tp_peer, neighbour = TP_STOPPED_RANK - 1, TP_STOPPED_RANK - 2
    detail, witnesses = [], 0
    for i, match in reports:
        rank, stage, replica, _, stuck, step_text, position, length = match.groups()
        rank, stage, position, length = int(rank), int(stage), int(position), int(length)
        row, marked = marked_row(lines, i)
        peers = transfers_with(step_text, stage, 2)
        expected_wait = (peers is None if rank == tp_peer else
                         peers is not None and stopped_stage in peers if rank == neighbour else True)
        ok = (stage == rank // 2 % 2 and replica == "0" and int(stuck) >= WATCHDOG_SECONDS and len(row) == length and
              marked == [position - 1] and row[position - 1] == ">" + step_text + "<" and expected_wait)
        if not ok:
            return False, "report %r with row %r (stopped rank %d)" % (match.group(0), row, TP_STOPPED_RANK)
        witnesses += rank in (tp_peer, neighbour)
        detail.append("rank %d in %s (%d of %d)" % (rank, step_text, position, length))
    if not witnesses:
        return False, "no report from rank %d or %d: %s" % (tp_peer, neighbour, detail)
    return True, "status %d, %.1f s after the stop (limit %d), no rank left; %s" % (
        status, seconds, TIMEOUT, ", ".join(detail))


def check(name):
    if skipped_for_ranks(4):
        return skipped_for_ranks(4)
    if name == TP_CASE:
        return tensor_parallel_check()
    stopped_rank = CASES[name]
    failure, reports, lines, status, seconds = reports_of_a_run_that_ended(stopped_rank)
    if failure:
        return failure
    detail = []
    for i, match in reports:
        rank, stage, replica, _, stuck, step_text, position, length = match.groups()
        rank, stage, position, length = int(rank), int(stage), int(position), int(length)
        row, marked = marked_row(lines, i)  # ">step<" at the position
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
