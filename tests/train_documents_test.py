#!/usr/bin/python3
"""./train's variable-length data mode (issue 34, docs/training.md "Variable-length data"): with
--documents on a text of short chapters, 1F1B on 4 stages under mpirun -np 4 logs bitwise the
losses and gradient norms of one process, each step's padding share exactly as this test derives
it from the text and the rule (chapter starts, pieces of at most --seq-len), and real tokens per
second (padding excluded); --seq-len-warmup logs a T that grows from its start to --seq-len, with
--documents and on packed sequences (bitwise the same at -np 4 and in one process);
--print-schedule --documents shows the first step's lengths and predicts the step from them;
--documents with a warm-up at tp 2 x pp 2 within tp's tolerance of one process; the bad inputs (a
warm-up start of 0 or above the maximum, a start without a warm-up, a shard without an end-of-text
token) each give one line and status 1 on every rank of mpirun -np 4.

    /usr/bin/python3 tests/train_documents_test.py [--gtest_filter=PATTERN]
TRAIN names the program (default ./train), MPIRUN the launcher (default mpirun). One line per
check, then "tests: N passed, M failed" (exit status 1 on a failure), as tools/run_tests.sh expects.
"""
import json
import os
import random
import re
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


# A chapter opens at a line starting "<digits?><letters><digits>:1 " (trainer/data/documents.h).
CHAPTER = re.compile(rb"[0-9]*[A-Za-z]+[0-9]+:1 ")
B, M, MAX_T = 2, 4, 32  # SMALL_MODEL's


def document_pieces(path, max_t):
    """The lengths of the document-aligned sequences, in data order, derived here from the text and
    the rule: the training part is the first 95% of the bytes; a document starts at byte 0 and at
    each line that opens a chapter; its inputs run to the next document's start (the training
    part's last input, its last byte but one, for the last); each is cut into pieces of max_t."""
    with open(path, "rb") as file:
        data = file.read()
    data = data[:len(data) - len(data) * 5 // 100]
    starts = [0] + [i for i in range(1, len(data) - 1) if data[i - 1] == ord("\n") and CHAPTER.match(data, i)]
    pieces = []
    for start, end in zip(starts, starts[1:] + [len(data) - 1]):
        pieces += [max_t] * ((end - start) // max_t) + ([(end - start) % max_t] if (end - start) % max_t else [])
    return pieces


def microbatch_shape(pieces, k, cap):
    """(T, real targets) of microbatch k in data order: pieces kB .. kB + B - 1, each cut to cap."""
    rows = [min(pieces[(k * B + i) % len(pieces)], cap) for i in range(B)]
    return max(rows), sum(rows)


def step_tokens(pieces, step, cap, microbatches=M):
    """(real targets, positions) of step `step` (1, 2, ...) over one replica's m microbatches."""
    shapes = [microbatch_shape(pieces, k, cap) for k in range((step - 1) * microbatches, step * microbatches)]
    return sum(real for _, real in shapes), sum(B * t for t, _ in shapes)


def tokens_per_s_problems(log, real_tokens):
    """The steps whose tokens_per_s is not real_tokens[i] over the step's time, within the log's
    rounding (ms to 0.0005 of its value, tok/s to 0.05); a count of every position, padding
    included (4 to 16% more here), is far outside it."""
    problems = []
    for step, real in zip(log, real_tokens):
        expected = real / (step["ms"] / 1e3)
        if abs(step["tokens_per_s"] - expected) > 0.0005 / step["ms"] * expected * 1.01 + 0.05:
            problems.append("step %d: %.1f tok/s, expected %.1f" % (step["step"], step["tokens_per_s"], expected))
    return problems


def documents_at_four_ranks_match_one_process():
    skipped = skipped_for_ranks(4)
    if skipped:
        return skipped
    # At maxT 64 (the last --seq-len wins), microbatches 3 and 5 are shorter than maxT: the padding
    # counts each microbatch's positions at its own T.
    max_t = 64
    options = ["--documents", "--steps", "4", "--seq-len", str(max_t)]
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
    pieces = document_pieces(chapters_text(), max_t)
    if all(microbatch_shape(pieces, k, max_t)[0] == max_t for k in range(len(single) * M)):
        return False, "some microbatch should be shorter than maxT"
    tokens = [step_tokens(pieces, step["step"], max_t) for step in single]
    # The log's padding has 6 decimals: within half of the last (5e-7, and a hair for the
    # decimal's binary form) of the share derived here.
    expected = [1 - real / positions for real, positions in tokens]
    paddings = [step["padding"] for step in single]
    if not all(abs(padding - share) <= 5e-7 + 1e-12 for padding, share in zip(paddings, expected)) or \
            not all(share > 0 for share in expected):
        return False, "padding per step %s, expected %s (every step should hold some)" % (paddings, expected)
    problems = tokens_per_s_problems(single, [real for real, _ in tokens]) + \
        tokens_per_s_problems(pipeline, [real for real, _ in tokens])
    if problems:
        return False, "tokens per second not the real tokens': " + "; ".join(problems)
    return True, "4 steps bitwise alike (losses %s), padding %s as derived, real tokens/s" % (
        ["%.4f" % step["loss"] for step in single], ["%.4f" % padding for padding in paddings])


def print_schedule_costs_each_microbatch_at_its_t():
    """One stage, m = 4 at --seq-len 256: the lengths line holds microbatches 0..3's T derived here,
    and the predicted makespan is the sum of each microbatch's F + I + W at t_f = t_i = t_w = 1,
    F and I scaled by (1 - q) r + q r^2 and W by r, r = T / 256, q the attention's share
    L 2T / (L (12 C + 2T) + Vp) = 2048 / 3840 for L = 4, C = 32, Vp = 256 (docs/pipeline.md)."""
    max_t = 256
    options = list(SMALL_MODEL)
    options[options.index("--seq-len") + 1] = str(max_t)
    status, out, err = run([TRAIN, "--train-data", chapters_text(), "--print-schedule", "--documents"] + options)
    if status != 0:
        return False, "status %d: %s" % (status, err[-3:])
    pieces = document_pieces(chapters_text(), max_t)
    lengths = [microbatch_shape(pieces, k, max_t)[0] for k in range(M)]
    q = 4 * 2 * max_t / (4 * (12 * 32 + 2 * max_t) + 256)
    makespan = sum(2 * ((1 - q) * t / max_t + q * (t / max_t) ** 2) + t / max_t for t in lengths)
    line = next((l for l in out if l.startswith("microbatch lengths")), "")
    shown = [int(t) for t in line.split(":")[1].split(";")[0].split()] if line else []
    predicted = next((float(l.split()[2]) for l in out if l.startswith("predicted makespan")), None)
    if shown != lengths or len(set(lengths)) < 2:
        return False, "lengths shown %s, derived %s (they should differ)" % (shown, lengths)
    if predicted is None or abs(predicted - makespan) > 5e-4 * makespan:  # the report's 4 digits
        return False, "predicted makespan %s t_f, derived %.6g" % (predicted, makespan)
    return True, "lengths %s, makespan %g t_f (at maxT: %d)" % (lengths, predicted, 3 * M)


def seq_len_warmup_logs_a_growing_t():
    log, why = log_of("warmup", [], ["--documents", "--seq-len-warmup", "4", "--steps", "6"])
    if log is None:
        return False, why
    lengths = [step["seq_len"] for step in log]
    # The warm-up from 8 to 32 over 4 steps: 8 + 24 s / 4 rounded down to a multiple of 8.
    expected = [8, 8, 16, 24, 32, 32]
    return lengths == expected, "T per step %s (expected %s)" % (lengths, expected)


def packed_seq_len_warmup_matches_at_four_ranks():
    """The warm-up on the default (packed) data: T 8, 8, 16, 24, 32, 32, no padding, B T m real
    tokens a step, and -np 4 (1F1B on 4 stages) bitwise one process."""
    skipped = skipped_for_ranks(4)
    if skipped:
        return skipped
    options = ["--seq-len-warmup", "4", "--steps", "6"]
    mpirun = os.environ.get("MPIRUN", "mpirun").split()
    pipeline, why = log_of("packed_pp4", mpirun + ["-np", "4"], options)
    if pipeline is None:
        return False, "mpirun -np 4: " + why
    single, why = log_of("packed_single", [], options)
    if single is None:
        return False, "one process: " + why
    figures = lambda log: [(step["loss"], step["grad_norm"]) for step in log]
    if figures(pipeline) != figures(single):
        return False, "losses and norms differ: pp 4 %s, one process %s" % (figures(pipeline), figures(single))
    lengths, paddings = [step["seq_len"] for step in single], [step["padding"] for step in single]
    expected = [8, 8, 16, 24, 32, 32]
    if lengths != expected or any(paddings):
        return False, "T per step %s (expected %s), padding %s" % (lengths, expected, paddings)
    problems = tokens_per_s_problems(single, [B * t * M for t in lengths])
    if problems:
        return False, "; ".join(problems)
    return True, "T %s, 6 steps bitwise alike (losses %s)" % (lengths, ["%.4f" % step["loss"] for step in single])


def tensor_parallel_documents_match_one_process():
    """--documents with the warm-up at tp 2 x pp 2 (-np 4) against one process: the same T per
    step, the losses and norms within TensorParallelLayouts' fp32 bound of 2e-5 relative
    (tests/mpi/tensor_parallel_layouts_test.cu: tp's partial sums in another order)."""
    skipped = skipped_for_ranks(4)
    if skipped:
        return skipped
    options = ["--documents", "--seq-len", "64", "--seq-len-warmup", "2", "--seq-len-warmup-start", "48", "--steps", "3"]
    mpirun = os.environ.get("MPIRUN", "mpirun").split()
    tp, why = log_of("tp2", mpirun + ["-np", "4"], options + ["--tp", "2"])
    if tp is None:
        return False, "mpirun -np 4 --tp 2: " + why
    single, why = log_of("tp_single", [], options)
    if single is None:
        return False, "one process: " + why
    if [step["seq_len"] for step in tp] != [step["seq_len"] for step in single]:
        return False, "T per step %s, one process %s" % ([s["seq_len"] for s in tp], [s["seq_len"] for s in single])
    worst = max(max(abs(a[key] - b[key]) / b[key] for key in ("loss", "grad_norm")) for a, b in zip(tp, single))
    paddings = [step["padding"] for step in single]
    return worst <= 2e-5 and any(paddings), "T %s, padding %s, losses and norms within %.2g relative" % (
        [step["seq_len"] for step in single], ["%.3f" % p for p in paddings], worst)


def write_shard_without_separator():
    path = os.path.join(DIRECTORY.name, "plain_000000.bin")
    tokens = list(range(100, 2100))
    with open(path, "wb") as file:
        file.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        file.write(struct.pack("<%dH" % len(tokens), *tokens))
    return path


def bad_inputs_give_one_line():
    """Each under mpirun -np 4: stderr the one line (world rank 0's), and every rank's exit status
    1 (each rank runs ./train, then says its status)."""
    skipped = skipped_for_ranks(4)
    if skipped:
        return skipped
    shard = write_shard_without_separator()
    text = ["--train-data", chapters_text()]
    cases = [
        (text + ["--documents", "--seq-len-warmup", "10", "--seq-len-warmup-start", "0"],
         "train: error: --seq-len-warmup-start 0 is not in [1, --seq-len 32]"),
        (text + ["--documents", "--seq-len-warmup", "10", "--seq-len-warmup-start", "40"],
         "train: error: --seq-len-warmup-start 40 is not in [1, --seq-len 32]"),
        (text + ["--documents", "--seq-len-warmup-start", "16"],
         "train: error: --seq-len-warmup-start needs --seq-len-warmup STEPS"),
        (["--train-data", os.path.join(DIRECTORY.name, "plain_*.bin"), "--documents", "--vocab", "4096"],
         "train: error: %s: no document separator (the end-of-text token 50256) in 2000 tokens" % shard),
    ]
    mpirun = os.environ.get("MPIRUN", "mpirun").split()
    problems = []
    for options, line in cases:
        status, out, err = run(mpirun + ["-np", "4", "sh", "-c", '"$0" "$@"; echo "exit status $?"', TRAIN,
                                         "--steps", "1"] + SMALL_MODEL + options)
        statuses = [l for l in out if l.startswith("exit status")]
        if err != [line] or statuses != ["exit status 1"] * 4:
            problems.append("%s: stderr %s, ranks' %s" % (" ".join(options[2:]), err, statuses))
    return not problems, "; ".join(problems) or "%d inputs, one line each, status 1 on each of 4 ranks" % len(cases)


CHECKS = {
    "TrainDocuments.FourRanksMatchOneProcessBitwise": documents_at_four_ranks_match_one_process,
    "TrainDocuments.SeqLenWarmupLogsAGrowingT": seq_len_warmup_logs_a_growing_t,
    "TrainDocuments.PackedSeqLenWarmupMatchesAtFourRanks": packed_seq_len_warmup_matches_at_four_ranks,
    "TrainDocuments.PrintScheduleCostsEachMicrobatchAtItsT": print_schedule_costs_each_microbatch_at_its_t,
    "TrainDocuments.TensorParallelMatchesOneProcess": tensor_parallel_documents_match_one_process,
    "TrainDocuments.BadInputsGiveOneLineAndStatus1": bad_inputs_give_one_line,
}

if __name__ == "__main__":
    sys.exit(run_checks(list(CHECKS), lambda name: CHECKS[name]()))
