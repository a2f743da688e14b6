#!/usr/bin/python3
"""./train --layers-per-stage auto (trainer/program/auto_layer_split.h): the split balanced by
measured layer costs. A model with a large vocabulary (a head as heavy as several blocks) at -np 4
gets the head alone on its last stage (the even split gives it 2 layers); both runs' step times
(the median of the step lines' ms) are printed as a benchmark figure, not asserted (a timed
assertion would flake on a loaded machine). The printed split, passed as --layers-per-stage, reproduces the run bitwise (the
saved model and optimizer state byte for byte). With --memory-limit, a split whose memory plan
does not fit is not chosen. Every schedule family takes auto (a split of its virtual stages), and
the refusals are one line with status 1. PipeDream (--schedule pipedream, issue 37) takes auto the
same way: its stage time counts its AdamW updates, its head stays alone on the last stage, and its
printed split reproduces its run bitwise.

    /usr/bin/python3 tests/train_auto_split_test.py [--gtest_filter=PATTERN]
TRAIN names the program (default ./train), MPIRUN the launcher (default mpirun). One line per
check, then "tests: N passed, M failed" (exit status 1 on a failure), as tools/run_tests.sh expects.
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

from check_runner import ROOT, run_checks, skipped_for_ranks
from training_text import write_text

TIMEOUT = 600
QUIET = ["--val-every", "0", "--sample-every", "0"]
# A head of V = 8192 logits costs as much as 4 to 5.5 blocks of C = 128 here (measured: head F+B
# 472 ms, a block 113 ms, 4 ranks on 2 cores), so the even split's last stage is the bottleneck.
LARGE_VOCABULARY = ["--layers", "8", "--vocab", "8192"]
SMALL_MODEL = ["--layers", "4", "--dim", "64", "--batch", "2", "--seq-len", "32"]
CHOSEN = re.compile(r"^layers per stage auto: ([0-9,]+), heaviest stage ")
STEP = re.compile(r"^step (\d+)/\d+ \|.* \| (\d+) ms \|")
RAN = re.compile(r"^  stage \d+ chunk \d+: layers \[(\d+), (\d+)\)")
PIPEDREAM = ["--schedule", "pipedream", "--grad-clip", "0"]


def run(command):
    """(exit status, output lines) of a command run from the repository's root."""
    result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT)
    return result.returncode, result.stdout.decode(errors="replace").splitlines()


def train(directory, ranks, options):
    data = os.path.join(directory, "text.txt")
    if not os.path.exists(data):
        write_text(data)
    mpirun = os.environ.get("MPIRUN", "mpirun").split()
    program = os.environ.get("TRAIN", os.path.join(ROOT, "train"))
    return run(mpirun + ["-np", str(ranks), program, "--train-data", data] + QUIET + options)


def chosen_split(lines):
    found = [CHOSEN.match(line) for line in lines if CHOSEN.match(line)]
    return [int(count) for count in found[0].group(1).split(",")] if len(found) == 1 else None


def split_run(lines):
    """The layers per virtual stage of the run's banner (ring placement: stage order)."""
    return [int(m.group(2)) - int(m.group(1)) for m in map(RAN.match, lines) if m]


def median_step_ms(lines):
    """The median of the step lines' ms, the first step (warm-up) left out."""
    times = [int(m.group(2)) for m in map(STEP.match, lines) if m and m.group(1) != "1"]
    return statistics.median(times) if times else None


def large_vocabulary_unloads_the_last_stage(directory, schedule=()):
    skipped = skipped_for_ranks(4)
    if skipped:
        return skipped
    steps = ["--steps", "8"] + LARGE_VOCABULARY + list(schedule)
    status, auto = train(directory, 4, steps + ["--layers-per-stage", "auto"])
    split = chosen_split(auto)
    if status != 0 or split is None:
        return False, "the auto run: status %d, %s" % (status, auto[-3:])
    status, even = train(directory, 4, steps)
    if status != 0:
        return False, "the even run: status %d, %s" % (status, even[-3:])
    # With a head h of at least 3 blocks b (measured: 4 to 5.5), the least bottleneck is h, the head
    # alone on the last stage; the other three stages' 8 blocks fit under it in 3,3,2 orders, all
    # 1 + 1 + 0 + 4 = 6 (squares) from the even 2,2,2,2, and the lexicographically least is 2,3,3
    # (pipeline/partition_layers.h). PipeDream adds each kind's AdamW / K to its time (measured: a
    # block's 2% of its F+B, the head's 3%, the embedding's 11.5 ms against a block's 98): the head
    # stays above 3 blocks and the embedding below one, so the same split. The run must run the split
    # it printed.
    ok = split == [2, 3, 3, 0] and split_run(auto) == split
    return ok, "auto split %s (even 2,2,2,2), ran %s; median step %s ms auto, %s ms even (benchmark, not asserted)" % (
        ",".join(map(str, split)), split_run(auto), median_step_ms(auto), median_step_ms(even))


def saved_bytes(path):
    with open(path, "rb") as model, open(path + ".state", "rb") as state:
        return model.read(), state.read()


def printed_split_reproduces_the_run(directory, schedule=()):
    skipped = skipped_for_ranks(4)
    if skipped:
        return skipped
    first, second = os.path.join(directory, "auto.bin"), os.path.join(directory, "given.bin")
    options = ["--steps", "3"] + LARGE_VOCABULARY + list(schedule)
    status, lines = train(directory, 4, options + ["--layers-per-stage", "auto", "--save", first])
    split = chosen_split(lines)
    if status != 0 or split is None:
        return False, "the auto run: status %d, %s" % (status, lines[-3:])
    given = ",".join(map(str, split))
    status, lines = train(directory, 4, options + ["--layers-per-stage", given, "--save", second])
    if status != 0:
        return False, "the run with --layers-per-stage %s: status %d, %s" % (given, status, lines[-3:])
    same = saved_bytes(first) == saved_bytes(second)
    return same, "--layers-per-stage %s %s the auto run's model and optimizer state" % (
        given, "reproduces bitwise" if same else "does NOT reproduce")


def every_schedule_family_takes_auto(directory):
    skipped = skipped_for_ranks(2)
    if skipped:
        return skipped
    families = {"1f1b": [], "zb-h1": [], "interleaved": ["--virtual-stages", "2"], "zb-v": [],
                "dualpipev": ["--microbatches", "8"]}
    chosen = []
    for schedule, extra in families.items():
        status, lines = train(directory, 2, ["--steps", "1", "--schedule", schedule] + SMALL_MODEL +
                              ["--layers", "8", "--layers-per-stage", "auto"] + extra)
        split = chosen_split(lines)
        chunks = 2 if schedule in ("1f1b", "zb-h1") else 4
        trained = any(re.match(r"step 1/1 \| loss \d", line) for line in lines)
        if status != 0 or split is None or len(split) != chunks or sum(split) != 8 or not trained:
            return False, "--schedule %s: status %d, split %s, %s" % (schedule, status, split, lines[-3:])
        chosen.append("%s %s" % (schedule, ",".join(map(str, split))))
    return True, "; ".join(chosen)


def memory_limit_is_kept(directory):
    """At --memory-limit 85M neither the even split (its first stage 90.8 MiB, its last 85.1) nor
    the unlimited auto split (2,3,3,0: its first stage 90.8 MiB) fits: auto must find one that
    does, which the run's own check (check_memory_fits) then accepts."""
    skipped = skipped_for_ranks(4)
    if skipped:
        return skipped
    options = ["--steps", "1", "--memory-limit", "85M"] + LARGE_VOCABULARY
    status, even = train(directory, 4, options)
    if status != 1:
        return False, "the even split was not refused at 85M: status %d, %s" % (status, even[-2:])
    status, lines = train(directory, 4, options + ["--layers-per-stage", "auto"])
    split = chosen_split(lines)
    peaks = [float(peak) for line in lines if line.startswith("memory plan: peak")
             for peak in re.findall(r"([0-9.]+) MiB on stage", line)]
    ok = status == 0 and split is not None and split_run(lines) == split and len(peaks) == 4 and max(peaks) <= 85
    return ok, "auto split %s, planned peaks %s MiB, status %d, %s" % (split, peaks, status, lines[-1:])


def one_line_error(ranks, options, pattern):
    """A check that the run prints one line matching pattern and exits 1."""
    def check(directory):
        skipped = skipped_for_ranks(ranks)
        if skipped:
            return skipped
        status, lines = train(directory, ranks, ["--steps", "1"] + options)
        ok = status == 1 and len(lines) == 1 and re.fullmatch(pattern, lines[0]) is not None
        return ok, "status %d, %s" % (status, lines[:3])
    return check


CASES = {
    "AutoSplit.LargeVocabularyLeavesTheHeadAloneOnTheLastStage": large_vocabulary_unloads_the_last_stage,
    "AutoSplit.ThePrintedSplitReproducesTheRunBitwise": printed_split_reproduces_the_run,
    "AutoSplit.PipeDreamLeavesTheHeadAloneOnTheLastStage":
        lambda directory: large_vocabulary_unloads_the_last_stage(directory, PIPEDREAM),
    "AutoSplit.PipeDreamsPrintedSplitReproducesItsRunBitwise":
        lambda directory: printed_split_reproduces_the_run(directory, PIPEDREAM),
    "AutoSplit.EveryScheduleFamilyTakesAuto": every_schedule_family_takes_auto,
    "AutoSplit.MemoryLimitKeepsEveryStageWithinIt": memory_limit_is_kept,
    "AutoSplit.WithPipelineLayoutIsOneLine": one_line_error(
        2, ["--layers-per-stage", "auto", "--pipeline-layout", "Et|tL"],
        r"train: error: --layers-per-stage auto and --pipeline-layout both give the split: pass one"),
    "AutoSplit.ALayoutTheScheduleRejectsIsOneLine": one_line_error(
        4, ["--layers-per-stage", "auto", "--layers", "2"],
        r"train: error: --layers 2 is fewer than --pp 4 x --virtual-stages 1 = 4 pipeline chunks .*"),
}


def check(name):
    with tempfile.TemporaryDirectory(prefix="train_auto_split_") as directory:
        return CASES[name](directory)


if __name__ == "__main__":
    sys.exit(run_checks(CASES, check))
