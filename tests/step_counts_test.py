#!/usr/bin/python3
"""build/cpu/tools/step_counts' tensor-parallel column (issue 33 item 7): under mpirun -np 4 at
tp 2 x pp 2, each stage's "tp:" line gives its tp communicator's calls and bytes without
sequence parallelism and with it, which must be the layers' collectives counted by hand here
(docs/pipeline.md, "The tensor-parallel column"), not by the code under test.

    /usr/bin/python3 tests/step_counts_test.py [--gtest_filter=PATTERN]
STEP_COUNTS names the program (default build/cpu/tools/step_counts), MPIRUN the launcher (default
mpirun). One line per check, then "tests: N passed, M failed", as tools/run_tests.sh expects.
"""
import os
import re
import subprocess
import sys

from check_runner import ROOT, run_checks, skipped_for_ranks

TIMEOUT = 300
L, NH, C, T, B, M, V = 4, 4, 128, 64, 8, 4, 256  # two blocks a stage; Vp = V
TP, PP = 2, 2
FLOAT = 4  # fp32 activations, and the loss's row reductions and the norm's partial sums in fp32
TP_LINE = re.compile(r"^  tp: all_reduce (\d+) \((\d+) bytes\), with --sequence-parallel (\d+) calls \((\d+) bytes\)$")


def by_hand(stage):
    """(calls, bytes) of the stage's tp communicator in one step: without sequence parallelism, with it."""
    n = B * T                  # a microbatch's token rows
    full = n * C * FLOAT       # B T C: an all-reduce's or reduce-scatter's buffer
    shard = full // TP         # an all-gather's input, the rank's rows
    blocks = L // PP
    norm = (1, (12 * L + 4) * FLOAT)  # one all-reduce of the norm's partial sums a step
    # Without: a block's 2 row-parallel outputs and 2 column-parallel input gradients; the
    # embedding's output; the head's input gradient and the loss's maxima (B T) and sums (2 B T).
    calls, size = 4 * blocks, 4 * blocks * full
    # With: a block's 4 all-gathers before the column-parallel layers and the row-parallel
    # backwards, 2 more of the LayerNorm outputs for the weight gradients, 2 reduce-scatters after
    # the row-parallel layers, 2 of the column-parallel input gradients, and its 4 LayerNorm
    # gradients (4 C) summed; the embedding's reduce-scatter and its gradient's all-gather; the
    # head's lnf gathered twice, its input gradient reduce-scattered, lnf's 2 C gradients summed
    # and the loss's two reductions.
    sp_calls, sp_size = 11 * blocks, blocks * (6 * shard + 4 * full + 4 * C * FLOAT)
    if stage == 0:
        calls, size = calls + 1, size + full
        sp_calls, sp_size = sp_calls + 2, sp_size + full + shard
    if stage == PP - 1:
        loss = n * FLOAT + 2 * n * FLOAT
        calls, size = calls + 3, size + full + loss
        sp_calls, sp_size = sp_calls + 6, sp_size + 2 * shard + full + 2 * C * FLOAT + loss
    return (M * calls + norm[0], M * size + norm[1]), (M * sp_calls + norm[0], M * sp_size + norm[1])


def tp_column_is_counted_by_hand():
    skipped = skipped_for_ranks(TP * PP)
    if skipped:
        return skipped
    program = os.environ.get("STEP_COUNTS", os.path.join(ROOT, "build", "cpu", "tools", "step_counts"))
    command = os.environ.get("MPIRUN", "mpirun").split() + ["-np", str(TP * PP), program, "--tp", str(TP), "--pp",
                                                            str(PP), "--layers", str(L), "--heads", str(NH), "--dim",
                                                            str(C), "--seq-len", str(T), "--batch", str(B),
                                                            "--microbatches", str(M), "--vocab", str(V)]
    result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT)
    lines = result.stdout.decode(errors="replace").splitlines()
    printed = [TP_LINE.match(line) for line in lines if TP_LINE.match(line)]
    if result.returncode != 0 or len(printed) != PP:
        return False, "status %d, %d tp lines; output %s" % (result.returncode, len(printed), lines[-6:])
    for stage, line in enumerate(printed):
        got = tuple(int(value) for value in line.groups())
        (calls, size), (sp_calls, sp_size) = by_hand(stage)
        if got != (calls, size, sp_calls, sp_size):
            return False, "stage %d: printed %s, by hand %s" % (stage, got, (calls, size, sp_calls, sp_size))
    return True, "; ".join(line.group(0).strip() for line in printed)


CASES = {"StepCounts.TensorParallelColumnWithAndWithoutSequenceParallelismIsCountedByHand": tp_column_is_counted_by_hand}

if __name__ == "__main__":
    sys.exit(run_checks(CASES, lambda name: CASES[name]()))
