#!/usr/bin/python3
"""./train's variable-length data mode (issue 34, docs/training.md "Variable-length data"): with
--documents on a text of short chapters, 1F1B on 4 stages under mpirun -np 4 logs bitwise the
losses and gradient norms of one process, with padding and real tokens per second in the log;
--seq-len-warmup logs a T that grows from its start to --seq-len; the bad inputs (a warm-up start
of 0 or above the maximum, a start without a warm-up, a warm-up without --documents, a shard
without an end-of-text token) each give one line and status 1.

    /usr/bin/python3 tests/train_documents_test.py [--gtest_filter=PATTERN]
TRAIN names the program (default ./train), MPIRUN the launcher (default mpirun). One line per
check, then "tests: N passed, M failed" (exit status 1 on a failure), as tools/run_tests.sh expects.
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

from check_runner import ROOT, run_checks, skipped_for_ranks

TIMEOUT = 300
TRAIN = os.environ.get("TRAIN", os.path.join(ROOT, "train"))
SMALL_MODEL = ["--layers", "4", "--heads", "2", "--dim", "32", "--batch", "2", "--microbatches", "4",
               "--seq-len", "32", "--val-every", "0", "--sample-every", "0"]
DIRECTORY = tempfile.TemporaryDirectory()


def chapters_text():
    """300 chapters of the default corpus's shape ("Ge1:1 ..." opens a chapter), of 1 to 4 verses
    of 3 to 12 words: documents of about 20 to 300 bytes, so that at --seq-len 32 the last piece
    of each is short and the microbatches of B = 2 differ in T and hold padding."""
    path = os.path.join(DIRECTORY.name, "chapters.txt")
    rng = random.Random(3)
    words = ["in", "the", "beginning", "god", "created", "heaven", "and", "earth", "light", "darkness"]
    with open(path, "w") as file:
        for chapter in range(1, 301):
            for verse in range(1, rng.randint(1, 4) + 1):
                file.write("Ge%d:%d %s\n" % (chapter, verse, " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))))
    return path


def run(command):
    """(exit status, stdout lines, stderr lines) of a command run from the repository's root."""
    result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT)
    return (result.returncode, result.stdout.decode(errors="replace").splitlines(),
            result.stderr.decode(errors="replace").splitlines())


def log_of(name, launcher, options):
    path = os.path.join(DIRECTORY.name, name + ".jsonl")
    status, out, err = run(launcher + [TRAIN, "--train-data", chapters_text(), "--log", path] + SMALL_MODEL + options)
    if status != 0:
        return None, "status %d: %s" % (status, (err or out)[-3:])
    with open(path) as file:
        return [json.loads(line) for line in file], ""


def documents_at_four_ranks_match_one_process():
    skipped = skipped_for_ranks(4)
    if skipped:
        return skipped
    options = ["--documents", "--steps", "4"]
    mpirun = os.environ.get("MPIRUN", "mpirun").split()
    pipeline, why = log_of("pp4", mpirun + ["-np", "4"], options)
    if pipeline is None:
        return False, "mpirun -np 4: " + why
    single, why = log_of("single", [], options)
    if single is None:
        return False, "one process: " + why
    figures = lambda log: [(step["loss"], step["grad_norm"]) for step in log]
    if figures(pipeline) != figures(single):
        return False, "losses and norms differ: pp 4 %s, one process %s" % (figures(pipeline), figures(single))
    paddings = [step["padding"] for step in single]
    if not all(0 < padding < 1 for padding in paddings):
        return False, "every step should hold padding: %s" % paddings
    return True, "4 steps bitwise alike (losses %s), padding %s" % (
        ["%.4f" % step["loss"] for step in single], ["%.3f" % padding for padding in paddings])


def seq_len_warmup_logs_a_growing_t():
    log, why = log_of("warmup", [], ["--documents", "--seq-len-warmup", "4", "--steps", "6"])
    if log is None:
        return False, why
    lengths = [step["seq_len"] for step in log]
    # The warm-up from 8 to 32 over 4 steps: 8 + 24 s / 4 rounded down to a multiple of 8.
    expected = [8, 8, 16, 24, 32, 32]
    return lengths == expected, "T per step %s (expected %s)" % (lengths, expected)


def write_shard_without_separator():
    path = os.path.join(DIRECTORY.name, "plain_000000.bin")
    tokens = list(range(100, 2100))
    with open(path, "wb") as file:
        file.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        file.write(struct.pack("<%dH" % len(tokens), *tokens))
    return path


def bad_inputs_give_one_line():
    shard = write_shard_without_separator()
    cases = [
        (["--documents", "--seq-len-warmup", "10", "--seq-len-warmup-start", "0"],
         "train: error: --seq-len-warmup-start 0 is not in [1, --seq-len 32]"),
        (["--documents", "--seq-len-warmup", "10", "--seq-len-warmup-start", "40"],
         "train: error: --seq-len-warmup-start 40 is not in [1, --seq-len 32]"),
        (["--documents", "--seq-len-warmup-start", "16"], "train: error: --seq-len-warmup-start needs --seq-len-warmup STEPS"),
        (["--seq-len-warmup", "10"],
         "train: error: --seq-len-warmup needs --documents (the warm-up cuts the document reader's sequences)"),
    ]
    problems = []
    for options, line in cases:
        status, out, err = run([TRAIN, "--train-data", chapters_text(), "--steps", "1"] + SMALL_MODEL + options)
        if status != 1 or err != [line]:
            problems.append("%s: status %d, stderr %s" % (" ".join(options), status, err))
    status, out, err = run([TRAIN, "--train-data", os.path.join(DIRECTORY.name, "plain_*.bin"), "--documents", "--steps",
                            "1", "--vocab", "4096"] + SMALL_MODEL)
    line = ("train: error: %s: no document separator (the end-of-text token 50256) in 2000 tokens" % shard)
    if status != 1 or err != [line]:
        problems.append("shard without a separator: status %d, stderr %s" % (status, err))
    return not problems, "; ".join(problems) or "%d inputs, one line each, status 1" % (len(cases) + 1)


CHECKS = {
    "TrainDocuments.FourRanksMatchOneProcessBitwise": documents_at_four_ranks_match_one_process,
    "TrainDocuments.SeqLenWarmupLogsAGrowingT": seq_len_warmup_logs_a_growing_t,
    "TrainDocuments.BadInputsGiveOneLineAndStatus1": bad_inputs_give_one_line,
}

if __name__ == "__main__":
    sys.exit(run_checks(list(CHECKS), lambda name: CHECKS[name]()))
