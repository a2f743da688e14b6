#!/usr/bin/env python3
"""Compares the loss curves of two ./train --log files (JSON lines, one record per step).

    tools/compare_losses.py REFERENCE.jsonl CANDIDATE.jsonl [--tolerance REL] [--doubling-steps N]

Made for tools/gpu_check.sh: the same run on the CPU build and on GPUs. The builds round
differently (cuBLAS and OpenBLAS sum in other orders, nvcc contracts a*b+c into FMAs, CUDA's expf
is within 2 ulp), so the losses agree closely but not bitwise. Step k's loss, and its val_loss
where both logs have one, may differ by

    |candidate - reference| <= tolerance * 2^((k - 1) / doubling_steps) * |reference|

with tolerance 2e-6 and doubling_steps 10 by default: 2e-6 at step 1, 1.1e-5 at step 25, 6.2e-5 at
step 50, 1e-3 at step 100 (meant for short runs; beyond ~100 steps the bound stops being a check).
Why: step 1's loss is the forward pass alone, a mean over thousands of tokens of fp32 results
(unit roundoff 6e-8) whose rounding differences mostly cancel; every optimizer step then adds its
own differences to the parameters and training carries them on, hence an allowance that grows.
Measured on the CPU build (2026-11-23, AMD EPYC, 2 cores), the default run of 4 ranks for 50 steps
with another OpenBLAS kernel (OPENBLAS_CORETYPE=Sandybridge: no FMA, other blocking) and every
kernel compiled with -mfma -ffp-contract=fast, against the plain build: 6e-10 at step 1, at most
2.4e-7 (step 25). The bound is 45 times that or more at every step, room for what a GPU rounds
differently besides. A real difference is far above it: --lr 1% higher moves the loss by 4.5e-4
at step 3, and a race, a missing synchronisation or wrong data moves it by more.

Prints one line, "compare_losses: PASS: ..." or "compare_losses: FAIL: ..." naming the step or the
line at fault; exits 0 on a pass, 1 on a failure, 2 on wrong arguments.
"""
import argparse
import json
import math
import re
import sys

CURVES = ("loss", "val_loss")
DEFAULT_TOLERANCE = 2e-6
DEFAULT_DOUBLING_STEPS = 10

# ./train prints a non-finite loss with printf's %.17g (nan, -nan, inf, -inf), which JSON lacks;
# they are read as Python's NaN and Infinity so that the verdict can name them.
NON_FINITE = re.compile(r"(:\s*)(-?)(nan|inf)\b")


def json_non_finite(match):
    prefix, minus, word = match.groups()
    return prefix + ("NaN" if word == "nan" else minus + "Infinity")


class LogError(Exception):
    pass


def read_log(path):
    """The log's records by step; LogError names the line of an unreadable or unusable record."""
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise LogError("%s: cannot read the log: %s" % (path, error))
    records = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(NON_FINITE.sub(json_non_finite, line))
        except json.JSONDecodeError as error:
            raise LogError("%s line %d: not a JSON record (%s)" % (path, number, error.msg))
        if not isinstance(record, dict) or type(record.get("step")) is not int or "loss" not in record:
            raise LogError("%s line %d: a record needs an integer \"step\" and a \"loss\"" % (path, number))
        for curve in CURVES:
            if curve not in record:
                continue
            value = record[curve]
            if type(value) not in (int, float):
                raise LogError("%s line %d: %s is not a number" % (path, number, curve))
            if not math.isfinite(value):
                raise LogError("%s step %d: %s is %s" % (path, record["step"], curve, value))
        if record["step"] in records:
            raise LogError("%s line %d: step %d appears twice" % (path, number, record["step"]))
        records[record["step"]] = record
    if not records:
        raise LogError("%s: no steps in the log" % path)
    return records


def describe_steps(steps):
    """[3, 4, 5, 9] -> "3-5, 9"."""
    runs = []
    for step in sorted(steps):
        if runs and step == runs[-1][1] + 1:
            runs[-1][1] = step
        else:
            runs.append([step, step])
    return ", ".join(str(first) if first == last else "%d-%d" % (first, last) for first, last in runs)


def allowed_difference(step, tolerance, doubling_steps):
    return tolerance * 2 ** ((step - 1) / doubling_steps)


def compare(reference_path, candidate_path, tolerance=DEFAULT_TOLERANCE, doubling_steps=DEFAULT_DOUBLING_STEPS):
    """(passed, the verdict after "compare_losses: PASS: " or "FAIL: ")."""
    try:
        reference, candidate = read_log(reference_path), read_log(candidate_path)
    except LogError as error:
        return False, str(error)
    worst = (-1.0, 0, "", 0.0)  # (share of the allowance used, step, curve, relative difference)
    for step in sorted(set(reference) & set(candidate)):
        allowed = allowed_difference(step, tolerance, doubling_steps)
        for curve in CURVES:
            if curve not in reference[step] or curve not in candidate[step]:
                continue
            expected, got = reference[step][curve], candidate[step][curve]
            relative = abs(got - expected) / abs(expected) if expected else abs(got)
            if relative > allowed:
                return False, ("step %d: %s is %.9g in %s but %.9g in %s, a relative difference of %.2g above "
                               "the allowed %.2g" % (step, curve, got, candidate_path, expected, reference_path,
                                                     relative, allowed))
            if allowed and relative / allowed > worst[0]:
                worst = (relative / allowed, step, curve, relative)
    # Checked after the common steps, so that a run which diverged and then stopped is named for the divergence.
    for steps, has, lacks in ((set(reference) - set(candidate), reference_path, candidate_path),
                              (set(candidate) - set(reference), candidate_path, reference_path)):
        if steps:
            return False, "%s lacks step(s) %s that %s has" % (lacks, describe_steps(steps), has)
    share, step, curve, relative = worst
    if relative == 0:
        return True, "%d steps agree bitwise" % len(reference)
    return True, ("%d steps agree; the largest relative difference, %.2g (%s, step %d), is %.2g of the allowed %.2g"
                  % (len(reference), relative, curve, step, share, allowed_difference(step, tolerance, doubling_steps)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", help="the CPU build's --log file")
    parser.add_argument("candidate", help="the GPU build's --log file")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help="allowed relative difference at step 1 (default %(default)g)")
    parser.add_argument("--doubling-steps", type=float, default=DEFAULT_DOUBLING_STEPS,
                        help="steps over which the allowance doubles (default %(default)g)")
    arguments = parser.parse_args()
    if not (arguments.tolerance > 0 and arguments.doubling_steps > 0):
        parser.error("--tolerance and --doubling-steps must be positive")
    passed, verdict = compare(arguments.reference, arguments.candidate, arguments.tolerance,
                              arguments.doubling_steps)
    print("compare_losses: %s: %s" % ("PASS" if passed else "FAIL", verdict))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
