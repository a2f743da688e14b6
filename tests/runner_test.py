#!/usr/bin/python3
"""tools/run_tests.sh's counting, on stand-in checks whose verdicts are known.

Each check runs the runner in a temporary folder on a small Python check it writes there (the
runner runs a *.py with /usr/bin/python3, as make test runs ours) or on a stand-in for the GPU
build's mpi_tests, with a stand-in nvidia-smi that sees no GPU, and reads its closing line
"N passed, M failed, K skipped" and exit status. Run by tools/run_tests.sh:
    /usr/bin/python3 tests/runner_test.py [--gtest_filter=PATTERN]
One line per check, then "tests: N passed, M failed".
"""
import os
import subprocess
import sys
import tempfile

from check_runner import run_check_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNER = os.path.join(ROOT, "tools", "run_tests.sh")

# A Python check that skips one test and passes another (tests/check_runner.py's lines).
SKIPPING_CHECK = """print("SKIPPED Stand.In: this machine lacks something")
print("PASSED Stand.Other: ok")
print("tests: 1 passed, 0 failed")
"""


def run_runner(folder, checks, ci):
    """(exit status, closing line) of the runner on checks, run in folder, with CI=true or not."""
    environment = {k: v for k, v in os.environ.items() if k not in ("CI", "FILTER")}
    environment["PATH"] = folder + os.pathsep + environment["PATH"]  # the stand-in nvidia-smi
    if ci:
        environment["CI"] = "true"
    done = subprocess.run([RUNNER] + checks, cwd=folder, capture_output=True, text=True, timeout=120,
                          env=environment)
    lines = done.stdout.strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


def write(path, text, executable=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    if executable:
        os.chmod(path, 0o755)


def expect(checks_of, wanted_outside_ci, wanted_in_ci):
    """(ok, detail): the runner's (status, closing line) outside CI and under CI=true."""
    with tempfile.TemporaryDirectory() as folder:
        write(os.path.join(folder, "nvidia-smi"), "#!/bin/sh\nexit 0\n", executable=True)
        checks = checks_of(folder)
        outside, inside = run_runner(folder, checks, False), run_runner(folder, checks, True)
    ok = outside == wanted_outside_ci and inside == wanted_in_ci
    return ok, "outside CI %r, under CI=true %r" % (outside, inside)


def python_skip_counted():
    def checks(folder):
        path = os.path.join(folder, "skipping_test.py")
        write(path, SKIPPING_CHECK)
        return [path]
    return expect(checks, (0, "1 passed, 0 failed, 1 skipped"), (1, "1 passed, 1 failed, 1 skipped"))


def gpu_build_skip_counted():
    # No GPU: neither the 4-rank suite nor the layouts can run; each is one skip, under CI=true a
    # failure (run_tests.sh's SKIP_ALLOWED names none).
    def checks(folder):
        path = os.path.join(folder, "build", "gpu", "tests", "mpi_tests")
        write(path, "#!/bin/sh\necho 'tests: 1 passed, 0 failed'\n", executable=True)
        return [path]
    return expect(checks, (0, "0 passed, 0 failed, 2 skipped"), (1, "0 passed, 2 failed, 2 skipped"))


CHECKS = {
    "Runner.APythonChecksSkipIsCountedAndFailsUnderCi": python_skip_counted,
    "Runner.AGpuBuildRunWithoutItsGpusIsCountedAndFailsUnderCi": gpu_build_skip_counted,
}


if __name__ == "__main__":
    sys.exit(run_check_table(CHECKS))
