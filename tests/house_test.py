#!/usr/bin/python3
"""The house rules of docs/architecture.md, read from the tree by tools/house_map.py: each room
includes only the rooms it may (data flows one way), no two files call each other through their
includes, no two files share a base name, and no source file is above 450 lines; and every fault
of the mutation check still changes the file it names (files move); and make racecheck's test
binaries, built from the files of the families they run, hold every test of those families
(a family moved into another file would otherwise drop out of the race detector's runs silently).
One check per rule; each
names what breaks it. Run by tools/run_tests.sh:
    /usr/bin/python3 tests/house_test.py [--gtest_filter=PATTERN]
"""
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import house_map  # noqa: E402
from check_runner import run_checks  # noqa: E402

FILES = house_map.tracked_files()


def mutation_faults_apply():
    """tools/mutation_check.sh --applies: a file moved or a function moved out of it leaves a
    fault that changes nothing, and the mutation check would then report it missed or broken."""
    run = subprocess.run([os.path.join(house_map.ROOT, "tools", "mutation_check.sh"), "--applies"],
                         capture_output=True, text=True)
    lines = run.stdout.strip().splitlines() or [run.stderr.strip()]
    return run.returncode == 0, "; ".join(lines)


def racecheck_families_built():
    """Each family of RACECHECK_UNIT_FILTER and RACECHECK_CPU_FILTER (the Makefile's) has all
    its TEST( lines in RACECHECK_UNIT_TEST_SRCS and RACECHECK_CPU_TEST_SRCS, the files the
    racecheck binaries are built from."""
    run = subprocess.run(["make", "-s", "--no-print-directory", "-C", house_map.ROOT, "SETUP_DEPS=0",
                          "--eval=show-racecheck: ; @echo '$(RACECHECK_UNIT_FILTER)|$(RACECHECK_UNIT_TEST_SRCS)|"
                          "$(RACECHECK_CPU_FILTER)|$(RACECHECK_CPU_TEST_SRCS)'", "show-racecheck"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        return False, "make could not print the racecheck lists: " + run.stderr.strip()
    unit_filter, unit_files, cpu_filter, cpu_files = run.stdout.strip().split("|")
    problems, families = [], 0
    for gtest_filter, files, pattern in ((unit_filter, unit_files, "tests/*_test.cu"),
                                         (cpu_filter, cpu_files, "tests/cpu/*_test.cu")):
        built = set(files.split())
        for family in gtest_filter.split("-")[0].rstrip(":").split(":"):
            suite = family.removesuffix(".*")
            families += 1
            test = re.compile(r"^\s*TEST(_F|_P)?\(\s*%s\s*," % re.escape(suite), re.M)
            holders = [f for f in sorted(glob.glob(os.path.join(house_map.ROOT, pattern)))
                       if test.search(open(f).read())]
            holders = [os.path.relpath(f, house_map.ROOT) for f in holders]
            if not holders:
                problems.append("%s: no file of %s holds it" % (suite, pattern))
            problems += ["%s is in %s, which the racecheck build leaves out" % (suite, f)
                         for f in holders if f not in built]
    return not problems, "; ".join(problems) if problems else "%d families, each in its built files" % families


def verdict(problems):
    return (not problems, "; ".join(problems) if problems else "none in %d files" % len(FILES))


CHECKS = {
    "House.EachRoomIncludesOnlyTheRoomsBelowIt": lambda: verdict(house_map.forbidden_includes(FILES)),
    "House.NoTwoFilesIncludeEachOther": lambda: verdict(
        [" -> ".join(c) for c in house_map.include_cycles(house_map.include_graph(FILES))]),
    "House.NoTwoFilesShareABaseName": lambda: verdict(house_map.duplicate_names(FILES)),
    "House.NoSourceFileAboveTheLimit": lambda: verdict(house_map.long_files(FILES)),
    "House.EveryMutationFaultStillChangesItsFile": mutation_faults_apply,
    "House.RacecheckBuildsEveryFileOfTheFamiliesItRuns": racecheck_families_built,
}

if __name__ == "__main__":
    sys.exit(run_checks(list(CHECKS), lambda name: CHECKS[name]()))
