#!/usr/bin/python3
"""Launchers that give each rank one GPU (comm/rank_device.h): with CUDA_VISIBLE_DEVICES set per
rank by tools/one_gpu_per_rank.sh, every rank sees its GPU as device 0, and `mpirun -np 4 ./train`
trains with the same losses and gradient norms, to the bit, as with every GPU visible to every
rank. The same CUDA_VISIBLE_DEVICES on every rank puts them all on one GPU: the run is refused
before any training, in one line from world rank 0 that names two world ranks and the GPU, and
every rank exits with status 1.

The CPU build honours CUDA_VISIBLE_DEVICES as CUDA does (cpu/runtime/devices.h); on a GPU machine with
fewer than 4 GPUs each check says SKIPPED. MPICH's mpirun (hydra) is assumed, for -prepend-rank
and MPI_LOCALRANKID.
    /usr/bin/python3 tests/train_visible_devices_test.py [--gtest_filter=PATTERN]
TRAIN names the program (default ./train), MPIRUN the launcher (default mpirun). One line per
check, then "tests: N passed, M failed" (exit status 1 on a failure), as tools/run_tests.sh expects.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from check_runner import run_checks
from train_failure_test import ROOT, SMALL_MODEL, write_text

WRAPPER = os.path.join(ROOT, "tools", "one_gpu_per_rank.sh")
# A run of 2 steps takes about 2 s here, a refusal well under 1 s; 60 s is far above both.
TIMEOUT = 60
CASES = [
    "VisibleDevices.OneGpuPerRankTrainsBitwiseAsAllGpusVisible",
    "VisibleDevices.TheSameGpuOnEveryRankIsRefusedNamingTwoRanks",
]
SHORT_OF_GPUS = re.compile(r"train: error: \d+ ranks on .* but (\d+ GPUs?|no GPU) for world rank \d+(:|$| \()")


def run_train(directory, wrapper, visible):
    """mpirun -np 4 [wrapper] ./train --steps 2 on a small model, CUDA_VISIBLE_DEVICES=visible
    (None: as it is); returns (exit status, output lines, the log's steps)."""
    data = os.path.join(directory, "text.txt")
    log = os.path.join(directory, "run.jsonl")
    write_text(data)
    if os.path.exists(log):
        os.remove(log)
    mpirun = os.environ.get("MPIRUN", "mpirun").split()
    train = os.environ.get("TRAIN", os.path.join(ROOT, "train"))
    command = mpirun + ["-prepend-rank", "-np", "4"] + ([wrapper] if wrapper else []) + \
        [train, "--train-data", data, "--steps", "2", "--log", log] + SMALL_MODEL
    environment = dict(os.environ)
    if visible is not None:
        environment["CUDA_VISIBLE_DEVICES"] = visible
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment, cwd=ROOT,
                            timeout=TIMEOUT)
    steps = []
    if os.path.exists(log):
        with open(log) as file:
            steps = [record for record in map(json.loads, file) if "loss" in record]
    return result.returncode, result.stdout.decode(errors="replace").splitlines(), steps


def figures(steps):
    """Each step's loss and gradient norm as the log writes them (%.17g: every bit)."""
    return [(record["step"], repr(record["loss"]), repr(record["grad_norm"])) for record in steps]


def check(name):
    with tempfile.TemporaryDirectory(prefix="train_visible_") as directory:
        if name.endswith("BitwiseAsAllGpusVisible"):
            status, lines, all_visible = run_train(directory, None, None)
            if any(SHORT_OF_GPUS.search(line) for line in lines):
                return None, "this machine cannot run 4 ranks: %s" % [l for l in lines if "error" in l]
            wrapped_status, wrapped_lines, one_each = run_train(directory, WRAPPER, None)
            ok = status == 0 and wrapped_status == 0 and len(all_visible) == 2 and \
                figures(all_visible) == figures(one_each)
            return ok, "status %d and %d with the wrapper; all visible %s, one each %s%s" % (
                status, wrapped_status, figures(all_visible), figures(one_each),
                "" if wrapped_status == 0 else "; last lines: %s" % wrapped_lines[-3:])
        status, lines, steps = run_train(directory, None, "1")
        errors = [line for line in lines if "error" in line]
        expected = re.compile(r"\[0\] train: error: 4 ranks on this node but 1 GPU for world rank 1: it would share "
                              r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12} with world rank 0 "
                              r"\(device 0 of each\): run at most 1 rank per node .*CUDA_VISIBLE_DEVICES per rank.*$")
        ok = status == 1 and not steps and len(errors) == 1 and expected.match(errors[0]) is not None
        return ok, "status %d, %d steps logged, error lines %s" % (status, len(steps), errors)


if __name__ == "__main__":
    sys.exit(run_checks(CASES, check))
