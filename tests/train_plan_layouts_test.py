#!/usr/bin/python3
"""./train --plan-layouts (trainer/program/layout_advisor.h): the ranked table of the layouts of 8
ranks within --memory-limit 2G, best first, each under the limit, and the command line of the best,
which must train: it is run as printed (plus --steps 1) under mpirun -np 8. Then the advisor with
the costs of a --trace run (--costs FILE), and the bad inputs, each one line and status 1: a limit
nothing fits (naming what the smallest plan needs), --world 0, a --costs file that is not a trace.

    /usr/bin/python3 tests/train_plan_layouts_test.py [--gtest_filter=PATTERN]
TRAIN names the program (default ./train), MPIRUN the launcher (default mpirun). One line per
check, then "tests: N passed, M failed" (exit status 1 on a failure), as tools/run_tests.sh expects.
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

from check_runner import ROOT, run_checks, skipped_for_ranks
from training_text import write_text

# One step of 8 ranks on 2 loaded cores takes about 20 s here (start-up included).
TIMEOUT = 300
SMALL_MODEL = ["--layers", "4", "--dim", "64", "--batch", "2", "--seq-len", "32", "--microbatches", "8",
               "--val-every", "0", "--sample-every", "0"]
UNITS = {"B": 1, "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30, "TiB": 2 ** 40}
ROW = re.compile(r"^(afab|1f1b|interleaved|zb-h1|zb-h2|zb-v|v-half|v-min|looped-bfs|zb-interleaved|dualpipev) +(\d+) x (\d+) x (\d+) +(\d+) +(\d+) +(on|off) +(fp32|bf16)\*? +(?:on|off) +"
                 r"([0-9.e+]+) +([0-9.]+) +([0-9.]+) (B|KiB|MiB|GiB|TiB)$")



def run(command):
    """(exit status, output lines) of a command run from the repository's root."""
    result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT)
    return result.returncode, result.stdout.decode(errors="replace").splitlines()


def advisor(directory, options):
    data = os.path.join(directory, "text.txt")
    write_text(data)
    train = os.environ.get("TRAIN", os.path.join(ROOT, "train"))
    return run([train, "--plan-layouts", "--train-data", data] + SMALL_MODEL + options)


def launched(command_line):
    """The printed `mpirun -np N ./train ...` with this run's launcher and program."""
    words = shlex.split(command_line)
    mpirun = os.environ.get("MPIRUN", "mpirun").split()
    train = os.environ.get("TRAIN", os.path.join(ROOT, "train"))
    return mpirun + words[1:3] + [train] + words[4:]


def ranked_table_and_best_trains(directory):
    status, lines = advisor(directory, ["--world", "8", "--memory-limit", "2G"])
    rows = [ROW.match(line) for line in lines if ROW.match(line)]
    commands = [line for line in lines if line.startswith("mpirun -np 8 ")]
    if status != 0 or len(rows) < 2 or len(commands) != 1:
        return False, "status %d, %d rows, command lines %s; output %s" % (status, len(rows), commands, lines[-5:])
    steps = [float(row.group(9)) for row in rows]
    peaks = [float(row.group(11)) * UNITS[row.group(12)] for row in rows]
    if steps != sorted(steps) or max(peaks) > 2 * 2 ** 30 or any(
            int(r.group(2)) * int(r.group(3)) * int(r.group(4)) != 8 for r in rows):
        return False, "not ranked by step, a peak above 2 GiB or not 8 ranks: %s" % [r.group(0) for r in rows]
    best = rows[0]
    tp = "" if best.group(4) == "1" else " --tp %s" % best.group(4)
    expected = "--pp %s --dp %s%s --schedule %s" % (best.group(2), best.group(3), tp, best.group(1))
    if expected not in commands[0] or "--microbatches %s" % best.group(6) not in commands[0]:
        return False, "the command %s does not run the first row %s" % (commands[0], best.group(0))
    skipped = skipped_for_ranks(8)
    if skipped:
        return skipped
    status, lines = run(launched(commands[0]) + ["--steps", "1"])
    trained = [line for line in lines if re.match(r"step 1/1 \| loss \d", line)]
    return status == 0 and len(trained) == 1, "%d rows, the best (%s) ran one step: status %d, %s" % (
        len(rows), commands[0], status, trained or lines[-3:])


def measured_costs(directory):
    skipped = skipped_for_ranks(2)
    if skipped:
        return skipped
    trace = os.path.join(directory, "trace.json")
    data = os.path.join(directory, "text.txt")
    write_text(data)
    mpirun = os.environ.get("MPIRUN", "mpirun").split()
    train = os.environ.get("TRAIN", os.path.join(ROOT, "train"))
    status, lines = run(mpirun + ["-np", "2", train, "--train-data", data, "--steps", "1", "--trace", trace] +
                        SMALL_MODEL)
    if status != 0:
        return False, "the --trace run failed: %s" % lines[-3:]
    status, lines = advisor(directory, ["--world", "2", "--costs", trace])
    rows = [ROW.match(line) for line in lines if ROW.match(line)]
    ok = status == 0 and any(line.startswith("costs: measured") for line in lines) and len(rows) >= 2
    return ok, "status %d, %d rows, %s" % (status, len(rows), [line for line in lines if line.startswith("costs")])


def one_line_error(options, pattern):
    """A check that the advisor with options prints one line matching pattern and exits 1."""
    def check(directory):
        status, lines = advisor(directory, options)
        ok = status == 1 and len(lines) == 1 and re.fullmatch(pattern, lines[0]) is not None
        return ok, "status %d, %s" % (status, lines[:3])
    return check


def malformed_costs(directory):
    path = os.path.join(directory, "costs.json")
    with open(path, "w") as file:
        file.write('{"not": "a trace"}\n')
    return one_line_error(["--costs", path], r"train: error: --costs .*costs\.json: it is not a --trace file .*")(directory)


CASES = {
    "PlanLayouts.RanksTheLayoutsOfEightRanksAndTheBestTrains": ranked_table_and_best_trains,
    "PlanLayouts.MeasuredCostsComeFromATraceRun": measured_costs,
    "PlanLayouts.ALimitNothingFitsNamesTheSmallestPlan": one_line_error(
        ["--world", "8", "--memory-limit", "1M"],
        r"train: error: no layout of 8 ranks fits in 1\.00 MiB: the smallest plan \(--pp \d+ --dp \d+ (--tp \d+ )?--schedule .*\) "
        r"needs [0-9.]+ MiB on its heaviest stage"),
    "PlanLayouts.WorldZeroIsOneLine": one_line_error(
        ["--world", "0"], r"train: error: --world 0 is out of range \(must be at least 1\)"),
    "PlanLayouts.ACostsFileThatIsNotATraceIsOneLine": malformed_costs,
}


def check(name):
    with tempfile.TemporaryDirectory(prefix="train_plan_layouts_") as directory:
        return CASES[name](directory)


if __name__ == "__main__":
    sys.exit(run_checks(CASES, check))
