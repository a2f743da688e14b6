#!/usr/bin/python3
"""./train and PyTorch's schedule CSV (pipeline/pytorch_csv.h), both ways, on 2 ranks.

A hand-written CSV, as torch.distributed.pipelining's _dump_csv writes one, of a schedule we do not
build in (GPipe with every backward split into I and W, an idle cell where rank 1 waits) trains,
and its losses equal --schedule 1f1b's to the bit at every step (any schedule that passes the
file's checks adds the losses and gradients in the same order: pipeline/schedule_file.h). Then
`--print-schedule --format pytorch-csv` prints the CSV alone on stdout, and fed back as
--schedule-file it prints the same grid as the built-in schedule. A malformed CSV is one line
naming its row and column, and status 1.

    /usr/bin/python3 tests/train_pytorch_csv_test.py [--gtest_filter=PATTERN]
TRAIN names the program (default ./train), MPIRUN the launcher (default mpirun). One line per
check, then "tests: N passed, M failed" (exit status 1 on a failure), as tools/run_tests.sh expects.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from check_runner import ROOT, run_check_table

TIMEOUT = 300
# 2 steps of a 2-layer model on 2 ranks: a few seconds here.
SMALL_RUN = ["--steps", "2", "--layers", "2", "--heads", "2", "--dim", "32", "--seq-len", "16", "--batch", "2",
             "--microbatches", "4", "--val-every", "0", "--sample-every", "0"]
# GPipe with split backwards: every forward, then each microbatch's I and W in turn. Rank 1 starts
# with an idle cell (PyTorch's None), as PyTorch's own dumps do while a rank waits.
GPIPE_SPLIT = ("0F0,0F1,0F2,0F3,0I0,0W0,0I1,0W1,0I2,0W2,0I3,0W3\r\n"
               ",1F0,1F1,1F2,1F3,1I0,1W0,1I1,1W1,1I2,1W2,1I3,1W3\r\n")
ACTION = r"\d+[FBIW]\d+"
CSV_ROW = re.compile(r"^%s(,%s)*$" % (ACTION, ACTION))
DIRECTORY = tempfile.TemporaryDirectory()


def run(options, ranks=2):
    """(exit status, stdout, stderr) of ./train under mpirun -np ranks."""
    command = os.environ.get("MPIRUN", "mpirun").split() + ["-np", str(ranks), os.environ.get(
        "TRAIN", os.path.join(ROOT, "train"))] + options
    result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT)
    return result.returncode, result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")


def written(name, text):
    path = os.path.join(DIRECTORY.name, name)
    with open(path, "w", newline="") as file:
        file.write(text)
    return path


def losses(name, options):
    """The losses of SMALL_RUN with options, from its log (printed with 17 digits: every bit)."""
    log = os.path.join(DIRECTORY.name, name + ".jsonl")
    status, _, error = run(SMALL_RUN + options + ["--log", log])
    if status != 0:
        return "status %d: %s" % (status, error.strip().splitlines()[-1:])
    with open(log) as file:
        return [json.loads(line)["loss"] for line in file if line.strip()]


def hand_written_csv_trains_as_1f1b():
    from_file = losses("gpipe-split", ["--schedule-file", written("gpipe-split.csv", GPIPE_SPLIT)])
    built_in = losses("1f1b", ["--schedule", "1f1b"])
    ok = isinstance(from_file, list) and len(from_file) == 2 and from_file == built_in
    return ok, "losses from the CSV %s, --schedule 1f1b %s" % (from_file, built_in)


def printed_csv_reads_back_as_the_same_grid():
    options = ["--print-schedule", "--schedule", "zb-h1", "--microbatches", "3"]
    status, csv_text, error = run(options + ["--format", "pytorch-csv"])
    rows = csv_text.split("\r\n")
    if status != 0 or rows[-1] != "" or len(rows) != 3 or not all(CSV_ROW.match(row) for row in rows[:-1]):
        return False, "status %d, stdout %r, stderr %r: not 2 CSV rows alone" % (status, csv_text, error)
    grid = lambda text: [line for line in text.splitlines() if line.startswith("stage ")][:2]
    _, built_in, _ = run(options)
    status, from_file, error = run(["--print-schedule", "--microbatches", "3", "--schedule-file",
                                    written("zb-h1.csv", csv_text)])
    return status == 0 and grid(from_file) == grid(built_in) != [], "grid from the CSV %s, built in %s (%s)" % (
        grid(from_file), grid(built_in), error.strip())


def malformed_csv_is_one_line():
    path = written("bad.csv", "0F0,0B0\r\n1F0,1SEND_F0,1B0\r\n")
    status, _, error = run(SMALL_RUN + ["--schedule-file", path])
    expected = ("train: error: --schedule-file %s: row 2 column 2: '1SEND_F0' is PyTorch's SEND_F: the compute-only "
                "CSV lists F, B, I and W (the transfers are added here)" % path)
    return status == 1 and error.strip().splitlines() == [expected], "status %d, stderr %r" % (status, error)


CHECKS = {
    "TrainPytorchCsv.HandWrittenCsvTrainsBitwiseAsOneFOneB": hand_written_csv_trains_as_1f1b,
    "TrainPytorchCsv.PrintedCsvReadsBackAsTheSameGrid": printed_csv_reads_back_as_the_same_grid,
    "TrainPytorchCsv.MalformedCsvIsOneLine": malformed_csv_is_one_line,
}

if __name__ == "__main__":
    sys.exit(run_check_table(CHECKS))
