#!/usr/bin/python3
"""tools/compare_losses.py (the loss-curve comparison of tools/gpu_check.sh) as a specification.

Logs come from short real runs of ./train (a 2-layer model, 8 steps, validation every 4 steps:
about 2 s each) and from copies of them edited as a broken run would be. Every check runs the
tool as gpu_check.sh does and asserts its exit status and its one verdict line. Run by
tools/run_tests.sh with Debian's /usr/bin/python3:
    /usr/bin/python3 tests/compare_losses_test.py [--gtest_filter=PATTERN]
TRAIN names the program (default ./train). One line per check, then "tests: N passed, M failed".
"""
import functools
import os
import re
import subprocess
import sys
import tempfile

from check_runner import run_checks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "compare_losses.py")
TRAIN = os.environ.get("TRAIN", os.path.join(ROOT, "train"))
SMALL_RUN = ["--steps", "8", "--layers", "2", "--heads", "2", "--dim", "32", "--seq-len", "16", "--batch", "2",
             "--microbatches", "2", "--val-every", "4", "--val-batches", "2", "--sample-every", "0"]
# The tool's defaults (its docstring says why): allowed relative difference at step k.
TOLERANCE, DOUBLING_STEPS, CAP = 2e-6, 2, 1e-3
DIRECTORY = tempfile.TemporaryDirectory()


def allowed(step):
    return min(TOLERANCE * 2 ** ((step - 1) / DOUBLING_STEPS), CAP)


@functools.lru_cache(maxsize=None)
def real_log(name, *extra_options, environment=()):
    """The log of the small run with extra options and environment, written once under name."""
    path = os.path.join(DIRECTORY.name, name + ".jsonl")
    subprocess.run([TRAIN] + SMALL_RUN + list(extra_options) + ["--log", path], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60,
                   env=dict(os.environ, **dict(environment)))
    return path


def reference():
    return real_log("reference")


def edited_copy(name, edit):
    """A copy of the reference log with edit applied to its list of lines."""
    with open(reference()) as file:
        lines = file.read().splitlines()
    path = os.path.join(DIRECTORY.name, name + ".jsonl")
    with open(path, "w") as file:
        file.write("\n".join(edit(lines)) + "\n")
    return path


def set_value(lines, step, key, value):
    """Lines with the number after "key": on step's line replaced by value (text as ./train prints)."""
    pattern = re.compile(r'("%s": )[^,}]+' % key)
    return [pattern.sub(lambda m: m.group(1) + value, line, count=1) if line.startswith('{"step": %d,' % step)
            else line for line in lines]


def value_of(lines, step, key):
    """The number after "key": on step's line, or None if the line has no key."""
    line = next(line for line in lines if line.startswith('{"step": %d,' % step))
    found = re.search(r'"%s": ([^,}]+)' % key, line)
    return float(found.group(1)) if found else None


def scale_losses(lines, factor_of_step, key="loss"):
    """Lines with key's value on each step's line that has one multiplied by factor_of_step(step)."""
    for step in range(1, len(lines) + 1):
        if value_of(lines, step, key) is not None:
            lines = set_value(lines, step, key, "%.17g" % (value_of(lines, step, key) * factor_of_step(step)))
    return lines


def verdict(candidate, options=()):
    """(exit status, the verdict line) of the tool on the reference and candidate; asserts one line."""
    result = subprocess.run([sys.executable, TOOL, reference(), candidate] + list(options), capture_output=True,
                            text=True, timeout=30)
    lines = result.stdout.splitlines()
    if len(lines) != 1 or result.stderr:
        return result.returncode, "not one verdict line: stdout %r stderr %r" % (result.stdout, result.stderr)
    return result.returncode, lines[0]


def expect(candidate, passes, *phrases, options=()):
    """(ok, detail): the tool passes or fails the candidate with a verdict containing every phrase."""
    status, line = verdict(candidate, options)
    wanted = "compare_losses: %s: " % ("PASS" if passes else "FAIL")
    ok = status == (0 if passes else 1) and line.startswith(wanted) and all(p in line for p in phrases)
    return ok, "exit %d, %s" % (status, line)


def same_run_twice():
    return expect(real_log("again"), True, "8 steps agree bitwise")


def rounding_differences():
    # Another OpenBLAS kernel (no FMA, other blocking): a real run that rounds differently, as a GPU does.
    return expect(real_log("sandybridge", environment=(("CUDA_CPU_BLAS_CORE", "Sandybridge"),)), True,
                  "8 steps agree; the largest relative difference")


def differences_within_tolerance():
    # Every loss and val_loss moved by 0.9 of its step's allowance, up and down in turn.
    factor = lambda step: 1 + (-1) ** step * 0.9 * allowed(step)
    path = edited_copy("within", lambda lines: scale_losses(scale_losses(lines, factor), factor, "val_loss"))
    return expect(path, True, "8 steps agree", "0.9 of the allowed")


def diverging_step():
    # Step 5 moved by 1.5 of its allowance, steps after it by 0.5: the verdict names step 5.
    factor = lambda step: 1 + (1.5 if step == 5 else 0.5 if step > 5 else 0) * allowed(step)
    return expect(edited_copy("diverging", lambda lines: scale_losses(lines, factor)), False, "step 5: loss")


def diverging_val_loss():
    # Step 8's val_loss moved by twice its allowance, its training loss left alone.
    moved = lambda lines: set_value(lines, 8, "val_loss", "%.17g" % (value_of(lines, 8, "val_loss") * (1 + 2 * allowed(8))))
    return expect(edited_copy("val", moved), False, "step 8: val_loss")


def cap_bounds_later_steps():
    # Step 8's loss moved by 1.5e-5: inside its default allowance (2.3e-5), above a cap of 1e-5.
    path = edited_copy("capped", lambda lines: scale_losses(lines, lambda step: 1 + (1.5e-5 if step == 8 else 0)))
    within, detail = expect(path, True, "8 steps agree")
    capped, capped_detail = expect(path, False, "step 8: loss", options=("--cap", "1e-5"))
    return within and capped, detail + "; with --cap 1e-5: " + capped_detail


def small_real_change():
    # --lr 1% higher: step 1 runs at lr 0 (warm-up), so step 3's loss is the first the change reaches.
    return expect(real_log("lr", "--lr", "0.00303"), False, "step 3: loss")


def missing_steps():
    return expect(edited_copy("missing", lambda lines: lines[:2] + lines[4:]), False, "lacks step(s) 3-4")


def run_that_stopped():
    return expect(edited_copy("stopped", lambda lines: lines[:5]), False, "lacks step(s) 6-8")


def malformed_json():
    return expect(edited_copy("malformed", lambda lines: lines[:4] + [lines[4][:40]] + lines[5:]), False,
                  "line 5: not a JSON record")


def nan_loss():
    # printf's %.17g, as ./train writes a NaN: "nan" or "-nan", which JSON has no word for.
    return expect(edited_copy("nan", lambda lines: set_value(lines, 6, "loss", "-nan")), False, "step 6: loss is nan")


CHECKS = {
    "CompareLosses.SameRunTwiceAgreesBitwise": same_run_twice,
    "CompareLosses.RunRoundingDifferentlyPasses": rounding_differences,
    "CompareLosses.DifferencesWithinTolerancePass": differences_within_tolerance,
    "CompareLosses.DivergingStepFailsNamingIt": diverging_step,
    "CompareLosses.DivergingValLossFailsNamingIt": diverging_val_loss,
    "CompareLosses.CapBoundsTheAllowanceOfLaterSteps": cap_bounds_later_steps,
    "CompareLosses.SmallRealChangeFailsAtTheFirstStepItReaches": small_real_change,
    "CompareLosses.MissingStepsFailNamingThem": missing_steps,
    "CompareLosses.RunThatStoppedFailsNamingTheLostSteps": run_that_stopped,
    "CompareLosses.MalformedJsonFailsNamingTheLine": malformed_json,
    "CompareLosses.NanLossFailsNamingTheStep": nan_loss,
}


def run_one(name):
    try:
        return CHECKS[name]()
    except (OSError, subprocess.SubprocessError) as error:
        said = (getattr(error, "stderr", None) or "").strip().splitlines()
        return False, "%s did not run: %s" % (TRAIN, said[-1] if said else error)


if __name__ == "__main__":
    with DIRECTORY:
        sys.exit(run_checks(CHECKS, run_one))
