#!/usr/bin/python3
"""tools/mutation_check.sh --applies, the check that each fault is still the fault its name says:
its file exists, each of its sed expressions is one command, and each changes the file once the
ones before it are applied. Run on a scratch tree: a copy of the script whose fault list is
replaced by the faults below, and one small file for them to change. Run by tools/run_tests.sh:
    /usr/bin/python3 tests/mutation_faults_test.py [--gtest_filter=PATTERN]
One line per check, then "tests: N passed, M failed".
"""
import os
import re
import subprocess
import tempfile

from check_runner import ROOT, run_check_table

SCRIPT = os.path.join(ROOT, "tools", "mutation_check.sh")
SOURCE = "int a = 1;\nint b = 2;\nint c = 3;\n"


def applies(faults):
    """Runs --applies with `faults` (lines of `fault ...` calls) as the script's whole fault list,
    on a scratch tree holding x.cu; returns (exit status, output)."""
    with open(SCRIPT) as f:
        script = f.read()
    head, rest = script.split("# ---- the faults ----\n", 1)
    definition = re.search(r"^fault\(\) \{\n.*?^\}\n", rest, re.S | re.M).group(0)
    running = rest[rest.index("# ---- running ----\n"):]
    with tempfile.TemporaryDirectory() as tree:
        os.mkdir(os.path.join(tree, "tools"))
        with open(os.path.join(tree, "tools", "mutation_check.sh"), "w") as f:
            f.write(head + "names=() files=() scripts=() tests=()\n" + definition + faults + "\n" + running)
        with open(os.path.join(tree, "x.cu"), "w") as f:
            f.write(SOURCE)
        done = subprocess.run(["bash", os.path.join(tree, "tools", "mutation_check.sh"), "--applies"],
                              capture_output=True, text=True, timeout=60)
        with open(os.path.join(tree, "x.cu")) as f:
            untouched = f.read() == SOURCE
    return done.returncode, done.stdout + done.stderr, untouched


def expect(faults, status, pattern):
    code, output, untouched = applies(faults)
    ok = code == status and re.search(pattern, output) is not None and untouched
    return ok, "status %d (want %d), file %s: %s" % (code, status, "untouched" if untouched else "CHANGED",
                                                      output.strip().replace("\n", " | "))


def every_expression_that_changes_passes():
    # Two expressions, the second applied after the first: it matches only what the first wrote.
    return expect("fault good x.cu 's/a = 1/a = 9/' 's/a = 9;/a = 8;/' 'unit X.*'", 0,
                  r"all 1 faults change their files, each expression")


def the_hold_space_carries_from_one_expression_to_the_next():
    # The second appends the held line after line c, and changes nothing when the hold space is
    # empty: so it passes only if it runs in one sed run after the first, as in the fault itself.
    return expect("fault move x.cu '/^int a/{h;d}' '/^int c/{x;/^$/{x;b};x;G}' 'unit X.*'", 0,
                  r"all 1 faults change")


def a_stale_second_expression_is_named():
    # The first still matches, so the file changes: only the per-expression check sees the second.
    return expect("fault stale x.cu 's/a = 1/a = 9/' 's/int d/int e/' 'unit X.*'", 1,
                  r"fault stale: its expression 's/int d/int e/' changes nothing in x\.cu")


def a_stale_first_expression_is_named():
    return expect("fault stale x.cu 's/int d/int e/' 's/a = 1/a = 9/' 'unit X.*'", 1,
                  r"fault stale: its expression 's/int d/int e/' changes nothing")


def two_commands_in_one_expression_are_refused():
    return expect("fault two x.cu 's/a = 1/a = 9/; s/b = 2/b = 9/' 'unit X.*'", 1,
                  r"fault two: its expression .* holds more than one command")


def a_missing_file_is_named():
    return expect("fault gone y.cu 's/a/b/' 'unit X.*'", 1, r"fault gone: no file y\.cu")


def only_the_bad_fault_of_several_is_named():
    code, output, untouched = applies("fault good x.cu 's/a = 1/a = 9/' 'unit X.*'\n"
                                      "fault stale x.cu 's/b = 2/b = 9/' 's/int d/int e/' 'unit X.*'")
    ok = code == 1 and "fault stale:" in output and "fault good" not in output and untouched
    return ok, "status %d: %s" % (code, output.strip().replace("\n", " | "))


CHECKS = {
    "MutationFaults.EveryExpressionThatChangesPasses": every_expression_that_changes_passes,
    "MutationFaults.TheHoldSpaceCarriesFromOneExpressionToTheNext": the_hold_space_carries_from_one_expression_to_the_next,
    "MutationFaults.AStaleSecondExpressionIsNamed": a_stale_second_expression_is_named,
    "MutationFaults.AStaleFirstExpressionIsNamed": a_stale_first_expression_is_named,
    "MutationFaults.TwoCommandsInOneExpressionAreRefused": two_commands_in_one_expression_are_refused,
    "MutationFaults.AMissingFileIsNamed": a_missing_file_is_named,
    "MutationFaults.OnlyTheBadFaultOfSeveralIsNamed": only_the_bad_fault_of_several_is_named,
}


if __name__ == "__main__":
    import sys
    sys.exit(run_check_table(CHECKS))
