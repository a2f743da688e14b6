"""What every Python check in tests/ shares with a gtest binary, so that tools/run_tests.sh reads
them alike: the --gtest_filter argument, one "PASSED|FAILED|SKIPPED Name: detail" line per check,
the closing "tests: N passed, M failed", and exit status 1 when a check failed."""

import fnmatch
import functools
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def selected(name, gtest_filter):
    """gtest's filter syntax: positive patterns, then optionally '-' and negative ones, ':'-separated."""
    positive, _, negative = gtest_filter.partition("-")
    matches = lambda patterns: any(fnmatch.fnmatchcase(name, p) for p in patterns.split(":") if p)
    return matches(positive or "*") and not matches(negative)


def gtest_filter(arguments=None):
    """The pattern of the last --gtest_filter= among the arguments (sys.argv's by default), or '*'."""
    pattern = "*"
    for argument in sys.argv[1:] if arguments is None else arguments:
        if argument.startswith("--gtest_filter="):
            pattern = argument[len("--gtest_filter="):]
    return pattern


def selected_names(names):
    """The names the command line's filter selects, in their order."""
    pattern = gtest_filter()
    return [name for name in names if selected(name, pattern)]


def run_checks(names, run_one):
    """Runs run_one(name) -> (ok, detail) for each name the command line selects (ok None: the
    check was skipped, detail says why), prints each verdict as it comes and the closing line,
    and returns the exit status."""
    passed = failed = 0
    for name in selected_names(names):
        ok, detail = run_one(name)
        if ok is None:
            print("SKIPPED %s: %s" % (name, detail), flush=True)
            continue
        passed += bool(ok)
        failed += not ok
        print("%s %s: %s" % ("PASSED" if ok else "FAILED", name, detail), flush=True)
    print("tests: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def run_check_table(checks):
    """run_checks over a table of name -> check() -> (ok, detail); a check whose command could not
    be run (OSError, a timeout) fails, saying so."""
    def run_one(name):
        try:
            return checks[name]()
        except (OSError, subprocess.SubprocessError) as error:
            return False, "did not run: %s" % error
    return run_checks(checks, run_one)


@functools.cache
def ranks_refused(ranks):
    """The one error line of `mpirun -np RANKS ./train --help` when this node cannot run that many
    ranks (a GPU node with fewer GPUs: comm/rank_device.h), else None. A check that needs the
    ranks is then skipped with this line, as `make test GPU=1` on a small node expects."""
    command = os.environ.get("MPIRUN", "mpirun").split() + ["-np", str(ranks), os.environ.get(
        "TRAIN", os.path.join(ROOT, "train")), "--help"]
    result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    lines = result.stdout.decode(errors="replace").splitlines()
    return next((line for line in lines if re.match(r"train: error: .*\bGPUs?\b", line)), None)


def skipped_for_ranks(ranks):
    """(None, why) when this node cannot run `ranks` ranks, else None: run_checks' skip."""
    refused = ranks_refused(ranks)
    return (None, "this node cannot run %d ranks: %s" % (ranks, refused)) if refused else None
