#!/usr/bin/python3
"""Writes the verdicts of a mutation check run into docs/testing.md's table.

    tools/mutation_table.py DOC FAULTS RESULTS DATE COMMIT

FAULTS: the script's faults, "name<TAB>file" a line, in its order. RESULTS: this run's verdicts,
"name<TAB>file<TAB>runs<TAB>verdict" a line (tools/mutation_check.sh writes both). The table
between DOC's two marker lines gets one row per fault of the script, in its order: this run's
verdict dated DATE at COMMIT, or else the row already there, or else "not run yet". Rows of
faults no longer in the script go, so the table lists exactly the faults the script has.
"""
import os
import sys

BEGIN = "<!-- The mutation table: written by tools/mutation_table.py (tools/mutation_check.sh --docs). -->"
END = "<!-- End of the mutation table. -->"
HEADER = ["| fault | file | tests | verdict | run |", "|---|---|---|---|---|"]


def read_tsv(path, columns):
    with open(path) as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    for row in rows:
        if len(row) != columns:
            sys.exit("mutation_table: %s: expected %d tab-separated fields in %r" % (path, columns, row))
    return rows


def main(doc, faults_path, results_path, date, commit):
    with open(doc) as f:
        lines = f.read().split("\n")
    if lines.count(BEGIN) != 1 or lines.count(END) != 1 or lines.index(BEGIN) > lines.index(END):
        sys.exit("mutation_table: %s has not exactly one table between its marker lines" % doc)
    begin, end = lines.index(BEGIN), lines.index(END)
    old = {}
    for row in lines[begin + 1 + len(HEADER):end]:
        old[row.split("|")[1].strip()] = row
    verdicts = {name: (file, runs, verdict) for name, file, runs, verdict in read_tsv(results_path, 4)}
    table = []
    for name, file in read_tsv(faults_path, 2):
        if name in verdicts:
            _, runs, verdict = verdicts[name]
            table.append("| %s | %s | %s | %s | %s, %s |" % (name, file, runs, verdict, date, commit))
        elif name in old:
            table.append(old[name])
        else:
            table.append("| %s | %s | | not run yet | |" % (name, file))
    lines[begin + 1:end] = HEADER + table
    with open(doc + ".tmp", "w") as f:
        f.write("\n".join(lines))
    os.replace(doc + ".tmp", doc)
    print("mutation_table: %d rows in %s, %d of them from this run" % (len(table), doc, len(verdicts)))


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__.strip().split("\n\n")[1])
    main(*sys.argv[1:])
