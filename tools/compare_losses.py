#!/usr/bin/env python3
"""Compares the loss curves of two ./train --log files (JSON lines, one record per step).

    tools/compare_losses.py REFERENCE.jsonl CANDIDATE.jsonl [--tolerance REL] [--doubling-steps N] [--cap REL]

Made for tools/gpu_check.sh: the same 50-step run on the CPU build and on GPUs. The builds round
differently (cuBLAS and OpenBLAS sum in other orders, nvcc contracts a*b+c into FMAs, CUDA's expf
is within 2 ulp), so the losses agree closely but not bitwise. Step k's loss, and its val_loss
where both logs have one, may differ by

    |candidate - reference| <= min(tolerance * 2^((k - 1) / doubling_steps), cap) * |reference|

with tolerance 2e-6, doubling_steps 2 and cap 1e-3 by default: 2e-6 at step 1, 4e-6 at step 3,
6.4e-5 at step 11, 1e-3 from step 19 on (meant for short runs: 50 steps is what it was measured on).
Why: step 1's loss is the forward pass alone, a mean over thousands of tokens whose rounding
differences mostly cancel; every optimizer step then adds its own differences to the parameters
and training carries them on, fastest while the learning rate is at its peak. Both builds
multiply fp32 matrices in TF32 by default (docs/training.md, "TF32"): inputs rounded to 10
mantissa bits, to nearest with ties away from zero in the CPU build, as PTX's cvt.rna.tf32.f32
and CUTLASS do. A difference of 1e-7 in an input moves its rounded value by a whole TF32 unit
(2^-10 relative) when it crosses a rounding boundary, so the runs drift apart much faster than
in full fp32.
Measured on the CPU build (2026-11-26, AMD EPYC, 2 cores shared), the default run of 4 ranks for
50 steps, TF32, with another OpenBLAS kernel set (CUDA_CPU_BLAS_CORE=Sandybridge: no FMA, other
blocking) against the default (Haswell): 1.7e-7 at step 1, at most 4e-7 up to step 10, 1.4e-5
at step 15, a peak of 1.0e-4 at step 21 and 2.5e-5 at step 50; with Nehalem's (SSE) kernels 2e-7
at step 1, 1.4e-6 at step 10 and a peak of 7.9e-5 at step 25. The allowance is 10 times the
difference at step 1 and at least 9.5 times it at every step. In full fp32 (--no-tf32 on both
sides) the same comparison, with every kernel also compiled with -mfma -ffp-contract=fast,
differed by 6e-10 at step 1 and at most 2.4e-7 (2026-11-23), far inside.
A real difference is above it: --lr 1% higher moves the loss by 4.5e-4 at step 3, and a race, a
missing synchronisation or wrong data moves it by more. So is a GPU whose cuBLAS truncates its
inputs to TF32 instead of rounding them (the CPU build truncating, against it rounding: 2.6e-5 at
step 1, 2e-4 at step 10, 7.5e-3 at step 26): there, run both sides with --no-tf32.

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
DEFAULT_DOUBLING_STEPS = 2
DEFAULT_CAP = 1e-3

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


def allowed_difference(step, tolerance, doubling_steps, cap):
    return min(tolerance * 2 ** ((step - 1) / doubling_steps), cap)


def compare(reference_path, candidate_path, tolerance=DEFAULT_TOLERANCE, doubling_steps=DEFAULT_DOUBLING_STEPS,
            cap=DEFAULT_CAP):
    """(passed, the verdict after "compare_losses: PASS: " or "FAIL: ")."""
    try:
        reference, candidate = read_log(reference_path), read_log(candidate_path)
    except LogError as error:
        return False, str(error)
    worst = (-1.0, 0, "", 0.0)  # (share of the allowance used, step, curve, relative difference)
    for step in sorted(set(reference) & set(candidate)):
        allowed = allowed_difference(step, tolerance, doubling_steps, cap)
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
                  % (len(reference), relative, curve, step, share,
                     allowed_difference(step, tolerance, doubling_steps, cap)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", help="the CPU build's --log file")
    parser.add_argument("candidate", help="the GPU build's --log file")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help="allowed relative difference at step 1 (default %(default)g)")
    parser.add_argument("--doubling-steps", type=float, default=DEFAULT_DOUBLING_STEPS,
                        help="steps over which the allowance doubles (default %(default)g)")
    parser.add_argument("--cap", type=float, default=DEFAULT_CAP,
                        help="largest allowed relative difference at any step (default %(default)g)")
    arguments = parser.parse_args()
    if not (arguments.tolerance > 0 and arguments.doubling_steps > 0 and arguments.cap > 0):
        parser.error("--tolerance, --doubling-steps and --cap must be positive")
    passed, verdict = compare(arguments.reference, arguments.candidate, arguments.tolerance,
                              arguments.doubling_steps, arguments.cap)
    print("compare_losses: %s: %s" % ("PASS" if passed else "FAIL", verdict))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
