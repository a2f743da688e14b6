#!/usr/bin/python3
"""The house rules of docs/architecture.md, read from the tree by tools/house_map.py: each room
includes only the rooms it may (data flows one way), no two files call each other through their
includes, no two files share a base name, and no source file is above 450 lines; and every fault
of the mutation check still changes the file it names (files move). One check per rule; each
names what breaks it. Run by tools/run_tests.sh:
    /usr/bin/python3 tests/house_test.py [--gtest_filter=PATTERN]
"""
import os
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


def verdict(problems):
    return (not problems, "; ".join(problems) if problems else "none in %d files" % len(FILES))


CHECKS = {
    "House.EachRoomIncludesOnlyTheRoomsBelowIt": lambda: verdict(house_map.forbidden_includes(FILES)),
    "House.NoTwoFilesIncludeEachOther": lambda: verdict(
        [" -> ".join(c) for c in house_map.include_cycles(house_map.include_graph(FILES))]),
    "House.NoTwoFilesShareABaseName": lambda: verdict(house_map.duplicate_names(FILES)),
    "House.NoSourceFileAboveTheLimit": lambda: verdict(house_map.long_files(FILES)),
    "House.EveryMutationFaultStillChangesItsFile": mutation_faults_apply,
}

if __name__ == "__main__":
    sys.exit(run_checks(list(CHECKS), lambda name: CHECKS[name]()))
