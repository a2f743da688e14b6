#!/usr/bin/python3
"""The project's rooms and the includes between them, read from the tree (docs/architecture.md).

    tools/house_map.py            the rooms, their lines and files, and which rooms each includes
    tools/house_map.py --check    the house rules (tests/house_test.py runs each as a check):
                                  no include outside a room's allowed ones, no include cycle
                                  between files, no two files with one base name, no source file
                                  above MAX_LINES lines

A file is a source (.cu .cpp) or a header (.h .cuh); a source and its header count as one file
(one base name, one node of the include graph). The shadow headers under cpu/include/ carry the
real CUDA headers' names and are left out of the name rule; tests/ and tools/ may include anything.
"""
import collections
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_LINES = 450
EXTENSIONS = (".cu", ".cpp", ".h", ".cuh")

# Each room, the rooms its files may include (besides its own), in the order data flows: the
# trainer's rooms, then pipeline -> model -> kernels with comm beside them, then cpu/'s rooms,
# which nothing outside cpu/ includes (only cpu/ knows it is not CUDA).
PROJECT = ["pipeline", "model", "comm", "kernels"]
RULES = collections.OrderedDict([
    ("trainer/program", ["trainer/checkpoints", "trainer/safety", "trainer/step", "trainer/data",
                         "trainer/command_line"] + PROJECT),
    ("trainer/checkpoints", ["trainer/step", "trainer/data", "trainer/command_line"] + PROJECT),
    ("trainer/step", ["trainer/safety", "trainer/data", "trainer/command_line"] + PROJECT),
    ("trainer/safety", ["trainer/data", "trainer/command_line"] + PROJECT),
    ("trainer/data", []),
    ("trainer/command_line", []),
    ("pipeline", ["model", "comm", "kernels"]),
    ("model", ["comm", "kernels"]),
    ("comm", ["kernels"]),
    ("kernels", []),
    # The shadow headers: the CUDA headers' names over cpu/launch; kernels/launch.cuh's shadow
    # reports a failed launch with the project's own CUDA_CHECK (kernels/cuda_check.cuh).
    ("cpu/include", ["cpu/launch", "kernels"]),
    ("cpu/blas", ["cpu/runtime", "cpu/launch", "cpu/check"]),
    ("cpu/nccl", ["cpu/runtime", "cpu/launch", "cpu/check"]),
    ("cpu/launch", ["cpu/runtime", "cpu/check"]),
    ("cpu/runtime", ["cpu/check"]),
    ("cpu/check", []),
])
ANYTHING = ("tests", "tools")
ROOMS = list(RULES) + list(ANYTHING)


def room_of(path):
    """The room of a file: trainer/main.cu is the program's; a file outside every room gives None."""
    if path == "trainer/main.cu":
        return "trainer/program"
    for room in ROOMS:
        if path.startswith(room + "/"):
            return room
    return None


def tracked_files(root=ROOT):
    """Every C++ file of the tree (paths relative to root), build/ and hidden folders left out."""
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and d != "build")
        for name in sorted(files):
            if name.endswith(EXTENSIONS):
                found.append(os.path.relpath(os.path.join(folder, name), root))
    return found


def unit_of(path):
    """The file a source and its header share: the path without its extension; a header named
    X_internal (what X's own sources share, e.g. model/gpt_internal.cuh) is part of X."""
    stem = os.path.splitext(path)[0]
    return stem[:-len("_internal")] if stem.endswith("_internal") else stem


def includes_of(path, root=ROOT):
    """The project files a file includes by its path from the root ("dir/name.h"), and the cpu/
    shadow headers' own "../x/y.h" includes, resolved."""
    found = []
    with open(os.path.join(root, path), encoding="utf-8") as f:
        for line in f:
            match = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not match:
                continue
            target = match.group(1)
            if target.startswith("../"):
                target = os.path.normpath(os.path.join(os.path.dirname(path), target))
            if os.path.exists(os.path.join(root, target)):
                found.append(target)
    return found


def include_graph(files, root=ROOT):
    """unit -> the units it includes (not itself)."""
    graph = collections.defaultdict(set)
    for path in files:
        for target in includes_of(path, root):
            if unit_of(target) != unit_of(path):
                graph[unit_of(path)].add(unit_of(target))
    return graph


def forbidden_includes(files, root=ROOT):
    """'file includes target: room A may not include room B' for every include the rules forbid."""
    problems = []
    for path in files:
        room = room_of(path)
        if room is None:
            if path.startswith(tuple(r.split("/")[0] + "/" for r in RULES)):
                problems.append("%s is in no room (tools/house_map.py's RULES)" % path)
            continue
        if room in ANYTHING:
            continue
        for target in includes_of(path, root):
            target_room = room_of(target)
            if target_room != room and target_room not in RULES[room]:
                problems.append("%s includes %s: %s may not include %s" % (path, target, room, target_room))
    return problems


def include_cycles(graph):
    """One cycle (a list of units, first repeated last) per strongly connected group of units."""
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(unit):
        index[unit] = low[unit] = counter[0]
        counter[0] += 1
        stack.append(unit)
        on_stack.add(unit)
        for target in sorted(graph.get(unit, ())):
            if target not in index:
                visit(target)
                low[unit] = min(low[unit], low[target])
            elif target in on_stack:
                low[unit] = min(low[unit], index[target])
        if low[unit] == index[unit]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == unit:
                    break
            if len(group) > 1:
                cycles.append(sorted(group) + [sorted(group)[0]])

    for unit in sorted(graph):
        if unit not in index:
            visit(unit)
    return cycles


def duplicate_names(files):
    """'name: a, b' for every base name two units share (cpu/include/ left out)."""
    by_name = collections.defaultdict(set)
    for path in files:
        if not path.startswith("cpu/include/"):
            by_name[os.path.basename(unit_of(path))].add(unit_of(path))
    return ["%s: %s" % (name, ", ".join(sorted(units))) for name, units in sorted(by_name.items()) if len(units) > 1]


def long_files(files, root=ROOT, limit=MAX_LINES):
    """'path: N lines' for every file above limit lines."""
    problems = []
    for path in files:
        with open(os.path.join(root, path), encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        if lines > limit:
            problems.append("%s: %d lines" % (path, lines))
    return problems


def room_summary(files, root=ROOT):
    """room -> (files, lines, the other rooms it includes)."""
    summary = collections.OrderedDict((room, [0, 0, set()]) for room in ROOMS)
    for path in files:
        room = room_of(path)
        if room is None:
            continue
        with open(os.path.join(root, path), encoding="utf-8") as f:
            summary[room][1] += sum(1 for _ in f)
        summary[room][0] += 1
        for target in includes_of(path, root):
            if room_of(target) not in (room, None):
                summary[room][2].add(room_of(target))
    return summary


def main():
    files = tracked_files()
    if "--check" in sys.argv[1:]:
        problems = (forbidden_includes(files) + ["include cycle: " + " -> ".join(c)
                                                 for c in include_cycles(include_graph(files))]
                    + ["same base name: " + d for d in duplicate_names(files)] + long_files(files))
        for problem in problems:
            print(problem)
        return 1 if problems else 0
    for room, (count, lines, uses) in room_summary(files).items():
        order = [r for r in ROOMS if r in uses]
        print("%-22s %3d files %6d lines  includes %s" % (room, count, lines, ", ".join(order) or "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
