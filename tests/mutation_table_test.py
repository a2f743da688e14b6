#!/usr/bin/python3
"""tools/mutation_table.py, which writes the mutation check's verdicts into docs/testing.md, on a
small document written here: one row per fault of the script, in the script's order; this run's
verdicts dated with the commit, other faults' rows kept, a fault never run "not run yet", a fault
no longer in the script gone, and the text around the table untouched. Run by tools/run_tests.sh:
    /usr/bin/python3 tests/mutation_table_test.py [--gtest_filter=PATTERN]
One line per check, then "tests: N passed, M failed".
"""
import os
import subprocess
import sys
import tempfile

from check_runner import run_check_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "mutation_table.py")
BEGIN = "<!-- The mutation table: written by tools/mutation_table.py (tools/mutation_check.sh --docs). -->"
END = "<!-- End of the mutation table. -->"
HEADER = "| fault | file | tests | verdict | run |\n|---|---|---|---|---|\n"
DOCUMENT = ("Before.\n\n" + BEGIN + "\n" + HEADER +
            "| kept | a.cu | `unit A.*` failed | caught | 2026-11-01, 1111111 |\n"
            "| rerun | b.cu | `unit B.*` failed | caught | 2026-11-01, 1111111 |\n"
            "| removed | c.cu | `unit C.*` failed | caught | 2026-11-01, 1111111 |\n" + END + "\n\nAfter.\n")
FAULTS = "new\td.cu\nrerun\tb.cu\nkept\ta.cu\n"  # the script's order
RESULTS = "rerun\tb.cu\t`unit B.*` passed\tMISSED\n"
EXPECTED = ("Before.\n\n" + BEGIN + "\n" + HEADER +
            "| new | d.cu | | not run yet | |\n"
            "| rerun | b.cu | `unit B.*` passed | MISSED | 2026-11-26, 2222222 |\n"
            "| kept | a.cu | `unit A.*` failed | caught | 2026-11-01, 1111111 |\n" + END + "\n\nAfter.\n")


def table_rewritten():
    with tempfile.TemporaryDirectory() as folder:
        paths = {}
        for name, text in (("doc.md", DOCUMENT), ("faults.tsv", FAULTS), ("results.tsv", RESULTS)):
            paths[name] = os.path.join(folder, name)
            with open(paths[name], "w") as f:
                f.write(text)
        done = subprocess.run([sys.executable, TOOL, paths["doc.md"], paths["faults.tsv"], paths["results.tsv"],
                               "2026-11-26", "2222222"], capture_output=True, text=True, timeout=30)
        with open(paths["doc.md"]) as f:
            written = f.read()
    ok = done.returncode == 0 and written == EXPECTED
    return ok, "status %d, %s" % (done.returncode, "as expected" if written == EXPECTED else "wrote %r" % written)


CHECKS = {"MutationTable.OneRowPerFaultOfTheScriptInItsOrder": table_rewritten}


if __name__ == "__main__":
    sys.exit(run_check_table(CHECKS))
