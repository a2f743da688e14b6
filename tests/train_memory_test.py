#!/usr/bin/python3
"""The memory plan in the train program (trainer/program/memory_report.h), as a user meets it.

- --print-memory for GPT-2 124M's shape, from the header of an --init checkpoint, prints every
  stage's items and peak without reading the 500 MB of parameters: checked by the process's peak
  resident memory (getrusage of the child), which does not depend on the machine's load as a time
  limit would. The checkpoint is a sparse file: a real llm.c header, then a hole of the right size.
- A layout that does not fit the device (CUDA_CPU_DEVICE_MB=64, --batch 64 on 4 stages) is refused
  before anything is allocated: exit status 1, rank 0 alone prints the error, which names the rank
  and its stage, lists its items and the changes that would fit; running with the first suggested
  change trains.
- --memory-limit below a stage's plan refuses the run the same way, naming --memory-limit; when
  only the last stage's plan is above it (AFAB holds every microbatch on every stage, and the last
  stage has the head), rank 0, which prints the refusal, names rank 3, and the run exits with status
  1: the ranks exchange their figures before anything is allocated.
- A run with --attention materialized above the limit where the fused attention is below it:
  the refusal's first change that fits is --attention fused, and with it the run trains.
- Bad input, one line and status 1 each: a limit that is not a byte count, out of range, --world
  without --print-memory, a layout the schedule rejects, a plan whose bytes overflow 64 bits.
    /usr/bin/python3 tests/train_memory_test.py [--gtest_filter=PATTERN]
TRAIN names the program (default ./train), MPIRUN the launcher (default mpirun).
"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading

from check_runner import run_checks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.environ.get("TRAIN", os.path.join(ROOT, "train"))
MPIRUN = os.environ.get("MPIRUN", "mpirun").split()
TIMEOUT = 300
GPT2_124M = ["--layers", "12", "--heads", "12", "--dim", "768", "--seq-len", "1024"]
SMALL_RUN = ["--val-every", "0", "--sample-every", "0", "--steps", "1"]


def run(command, environment=None):
    """(status, stdout + stderr lines, peak resident kB of the command's own process); a run still
    going after TIMEOUT seconds is killed (status -9)."""
    env = dict(os.environ)
    env.update(environment or {})
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    timer = threading.Timer(TIMEOUT, process.kill)
    timer.start()
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)  # its own rusage, which subprocess's wait does not give
    timer.cancel()
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace").splitlines(), usage.ru_maxrss


def write_sparse_gpt2_checkpoint(path):
    """An llm.c fp32 model file of GPT-2 124M's shape: the 256-int header, then a hole as long as
    the 124,475,904 parameters (llm.c's count with Vp = 50304)."""
    maxT, V, L, NH, C, Vp = 1024, 50257, 12, 12, 768, 50304
    parameters = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
    assert parameters == 124475904
    header = [20240326, 3, maxT, V, L, NH, C, Vp] + [0] * 248
    with open(path, "wb") as file:
        file.write(struct.pack("<256i", *header))
        file.truncate(4 * 256 + 4 * parameters)


def print_memory_without_the_parameters():
    with tempfile.TemporaryDirectory(prefix="train_memory_") as directory:
        path = os.path.join(directory, "gpt2_124M.bin")
        write_sparse_gpt2_checkpoint(path)
        status, lines, peak_kb = run([TRAIN, "--print-memory", "--init", path, "--seq-len", "1024", "--batch", "1",
                                      "--microbatches", "8", "--world", "4"])
    peaks = [line for line in lines if line.startswith("peak, bytes")]
    # Reading the parameters alone would take 498 MB (4 bytes each); the table needs a few MB.
    ok = status == 0 and len(peaks) == 1 and len(peaks[0].split()) == 2 + 4 and peak_kb < 200 * 1024
    return ok, "status %d, peak resident %d MB, %s" % (status, peak_kb // 1024, peaks or lines[-3:])


def refusal(lines):
    """The error lines: the one starting 'train: error:' and the indented ones after it."""
    start = [i for i, line in enumerate(lines) if line.startswith("train: error:")]
    if len(start) != 1:
        return None
    end = start[0] + 1
    while end < len(lines) and lines[end].startswith("  "):
        end += 1
    return lines[start[0]:end]


def too_large_for_the_device_is_refused_and_a_suggestion_trains():
    environment = {"CUDA_CPU_DEVICE_MB": "64"}
    status, lines, _ = run(MPIRUN + ["-np", "4", TRAIN, "--batch", "64"] + SMALL_RUN, environment)
    error = refusal(lines)
    if status != 1 or error is None:
        return False, "status %d, output %s" % (status, lines[-4:])
    first = re.match(r"train: error: rank 0 \(stage 0\) plans ([\d.]+ \w+) of device memory, above the "
                     r"([\d.]+ \w+) it may use \(free memory less 1/32 of the device\): nothing was allocated$",
                     error[0])
    items = len(error) > 1 and error[1].startswith("  its items: ") and "slot activations" in error[1]
    fits = [line for line in error if line.startswith("  would fit (the heaviest stage's plan): ")]
    if not (first and items and fits):
        return False, "the refusal does not name rank 0's stage, items and a change that fits: %s" % error
    change = fits[0].split(": ", 1)[1].split(";")[0].rsplit(":", 1)[0].split()
    status, lines, _ = run(MPIRUN + ["-np", "4", TRAIN, "--batch", "64"] + change + SMALL_RUN, environment)
    done = any(line.startswith("done: 1/1 steps") for line in lines)
    return status == 0 and done, "refused (%s above %s); with %s: status %d%s" % (
        first.group(1), first.group(2), " ".join(change), status, "" if done else ", " + str(lines[-3:]))


def memory_limit_refuses():
    status, lines, _ = run(MPIRUN + ["-np", "2", TRAIN, "--memory-limit", "4M"] + SMALL_RUN)
    error = refusal(lines)
    ok = status == 1 and error is not None and re.match(
        r"train: error: rank 0 \(stage 0\) plans .* above the 4\.00 MiB it may use \(--memory-limit\)", error[0])
    return bool(ok), "status %d, %s" % (status, error or lines[-3:])


def peaks_of(options):
    """Each stage's planned peak in bytes, from --print-memory's "peak, bytes" row."""
    status, lines, _ = run([TRAIN, "--print-memory"] + options)
    row = next((line for line in lines if line.startswith("peak, bytes")), None)
    if status != 0 or row is None:
        raise RuntimeError("--print-memory %s: status %d, %s" % (" ".join(options), status, lines[-3:]))
    return [int(cell) for cell in row[len("peak, bytes"):].split()]


def only_the_last_stage_above_the_limit_is_refused_on_every_rank():
    layout = ["--schedule", "afab"]
    peaks = peaks_of(["--world", "4"] + layout)
    if max(peaks) != peaks[3] or peaks[3] == max(peaks[:3]):
        return False, "the test's premise: AFAB's last stage alone is the heaviest, got %s" % peaks
    limit = (max(peaks[:3]) + peaks[3]) // 2
    status, lines, _ = run(MPIRUN + ["-np", "4", TRAIN, "--memory-limit", str(limit)] + layout + SMALL_RUN)
    error = refusal(lines)
    ok = status == 1 and error is not None and re.match(
        r"train: error: rank 3 \(stage 3\) plans .* it may use \(--memory-limit\)", error[0]) is not None
    return ok, "peaks %s, limit %d: status %d, %s" % (peaks, limit, status, error or lines[-3:])


def materialized_attention_refused_suggests_the_fused_one():
    """A limit between the fused and the materialised attention's peaks at a longer sequence: the
    materialised run is refused, its first change that fits is --attention fused, and the run trains
    with it."""
    layout = ["--seq-len", "256", "--batch", "4"]
    fused, materialized = (max(peaks_of(["--world", "4", "--attention", kind] + layout))
                           for kind in ("fused", "materialized"))
    if not fused < materialized:
        return False, "the test's premise: the fused attention's peak %d below the materialised one's %d" % (
            fused, materialized)
    limit = ["--memory-limit", str((fused + materialized) // 2)]
    status, lines, _ = run(MPIRUN + ["-np", "4", TRAIN, "--attention", "materialized"] + limit + layout + SMALL_RUN)
    error = refusal(lines)
    fits = [line for line in error or [] if line.startswith("  would fit (the heaviest stage's plan): ")]
    first = fits[0].split(": ", 1)[1].split(";")[0].rsplit(":", 1)[0] if fits else None
    if status != 1 or first != "--attention fused":
        return False, "status %d, first change that fits %r: %s" % (status, first, error or lines[-3:])
    status, lines, _ = run(MPIRUN + ["-np", "4", TRAIN, "--attention", "fused"] + limit + layout + SMALL_RUN)
    done = any(line.startswith("done: 1/1 steps") for line in lines)
    return status == 0 and done, "peaks %d fused, %d materialized: refused, then with --attention fused status %d%s" % (
        fused, materialized, status, "" if done else ", " + str(lines[-3:]))


def pipedream_plan_is_what_each_stage_holds():
    """--schedule pipedream at -np 4: each stage's printed peak less its set-up transient is the
    device bytes the stage holds during the run (its stashed weight versions and the head's ring
    among them, from the --log's stage records), and a --memory-limit one byte below stage 0's peak
    (3 stashed versions of its parameters above 1f1b's) refuses the run before anything is allocated,
    offering --recompute, which it does not offer without stashing."""
    layout = ["--schedule", "pipedream", "--grad-clip", "0", "--steps", "2"]
    peaks = peaks_of(["--world", "4"] + layout)
    status, lines, _ = run([TRAIN, "--print-memory", "--world", "4"] + layout)
    row = next(line for line in lines if line.startswith("set-up's transient"))
    transients = [int(cell) for cell in re.findall(r"(\d+) B", row)]
    with tempfile.TemporaryDirectory() as folder:
        log = os.path.join(folder, "log.jsonl")
        status, lines, _ = run(MPIRUN + ["-np", "4", TRAIN, "--log", log] + layout + SMALL_RUN[:4])
        if status != 0:
            return False, "the run: status %d, %s" % (status, lines[-3:])
        with open(log) as f:
            held = [[stage["device_bytes"] for stage in json.loads(line)["stages"]] for line in f]
    planned = [peak - transient for peak, transient in zip(peaks, transients)]
    if any(step != planned for step in held):
        return False, "planned %s, held %s" % (planned, held)
    status, lines, _ = run(MPIRUN + ["-np", "4", TRAIN, "--memory-limit", str(peaks[0] - 1)] + layout + SMALL_RUN[:4])
    error = refusal(lines)
    fits = [line for line in error or [] if line.startswith("  would fit")]
    # Changes pipedream runs with: --recompute (with stashing, the default: one working set instead
    # of stage 0's 4 slots of activations) and bf16.
    ok = (status == 1 and error is not None and re.match(r"train: error: rank 0 \(stage 0\) plans ", error[0])
          and any("--recompute" in fit for fit in fits) and any("--dtype bf16" in fit for fit in fits))
    if not ok:
        return False, "planned %s held each step; limit %d: status %d, %s" % (planned, peaks[0] - 1, status,
                                                                                error or lines[-3:])
    # Without stashing pipedream refuses --recompute, so the refusal does not offer it, though it
    # would fit (stage 0's 4 slots of activations, the most it saves); another change does.
    unstashed = layout + ["--weight-stashing", "off"]
    limit = peaks_of(["--world", "4"] + unstashed)[0] - 1
    status, lines, _ = run(MPIRUN + ["-np", "4", TRAIN, "--memory-limit", str(limit)] + unstashed + SMALL_RUN[:4])
    error = refusal(lines)
    fits = [line for line in error or [] if line.startswith("  would fit")]
    ok = status == 1 and len(fits) == 1 and "--recompute" not in fits[0]
    return ok, "planned %s held each step; refusals with stashing and without: status %d, %s" % (
        planned, status, error or lines[-3:])


BAD_INPUT = {
    "MemoryBadInput.LimitNotANumber": (["--memory-limit", "12X"], "--memory-limit: '12X' is not a byte count"),
    "MemoryBadInput.LimitNegative": (["--memory-limit", "-1G"], "--memory-limit: '-1G' is not a byte count"),
    "MemoryBadInput.LimitAbsurd": (["--memory-limit", "2048P"], "--memory-limit 2048P is out of range"),
    "MemoryBadInput.LimitTooSmall": (["--memory-limit", "100K"], "--memory-limit 100K is out of range"),
    "MemoryBadInput.WorldWithoutPrintMemory": (["--world", "4"], "--world needs --print-memory"),
    "MemoryBadInput.LayoutTheScheduleRejects": (
        ["--print-memory", "--world", "4", "--schedule", "interleaved", "--microbatches", "3"], "interleaved"),
    "MemoryBadInput.BytesBeyond64Bits": (
        ["--print-memory", "--batch", "2000000000", "--dim", "16384", "--heads", "16", "--seq-len", "1024"],
        "64 bits"),
}


def bad_input(name):
    options, expected = BAD_INPUT[name]
    status, lines, _ = run([TRAIN] + options)
    ok = status == 1 and len(lines) == 1 and lines[0].startswith("train: error: ") and expected in lines[0]
    return ok, "status %d, %s" % (status, lines)


CHECKS = {
    "TrainMemory.PrintMemoryReadsOnlyTheCheckpointsHeader": print_memory_without_the_parameters,
    "TrainMemory.TooLargeForTheDeviceIsRefusedAndASuggestionTrains":
        too_large_for_the_device_is_refused_and_a_suggestion_trains,
    "TrainMemory.MemoryLimitRefusesAStageAboveIt": memory_limit_refuses,
    "TrainMemory.OnlyTheLastStageAboveTheLimitIsRefusedOnEveryRank":
        only_the_last_stage_above_the_limit_is_refused_on_every_rank,
    "TrainMemory.MaterializedAttentionRefusedSuggestsTheFusedOne": materialized_attention_refused_suggests_the_fused_one,
    "TrainMemory.PipeDreamPlanIsWhatEachStageHolds": pipedream_plan_is_what_each_stage_holds,
}


def check(name):
    return CHECKS[name]() if name in CHECKS else bad_input(name)


if __name__ == "__main__":
    sys.exit(run_checks(list(CHECKS) + list(BAD_INPUT), check))
