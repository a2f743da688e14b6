#!/usr/bin/python3
"""make's dependency check (tools/setup_deps.sh) as a specification.

Runs `make -n` (which parses the Makefile, and so runs the check, but builds nothing) and the
script itself with the script's test hooks: a package reported missing, a dry run that prints
the install command without running it, a user who is neither root nor can sudo, another
/etc/os-release. Nothing is installed. Run by tools/run_tests.sh with Debian's /usr/bin/python3:
    /usr/bin/python3 tests/setup_deps_test.py [--gtest_filter=PATTERN]
One line per check, then "tests: N passed, M failed".
"""
import os
import subprocess
import sys
import tempfile
import time

from check_runner import run_checks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tools", "setup_deps.sh")
BUILD_PACKAGES = ["g++", "make", "pkg-config", "mpich", "libmpich-dev", "libopenblas-dev", "libboost-context-dev",
                  "libgtest-dev", "bible-kjv"]
# make test runs this file, and a make inside make is a sub-make, which skips the check: the
# checks below are top-level makes, as a user's.
CLEAN_ENVIRONMENT = {k: v for k, v in os.environ.items()
                     if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS") and not k.startswith("SETUP_DEPS")}


def run(command, **hooks):
    """(exit status, stdout, stderr, seconds) of command in the repository with the hooks set."""
    start = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(CLEAN_ENVIRONMENT, **hooks))
    return done.returncode, done.stdout, done.stderr, time.monotonic() - start


def everything_installed():
    # make test's own check installed the test group before this runs. A second is generous:
    # one dpkg-query takes about 0.05 s here (2 shared cores, 2026-11-23).
    status, out, err, seconds = run([SCRIPT, "build", "test"])
    ok = status == 0 and out == "" and err == "" and seconds < 1
    return ok, "status %d in %.2f s, said %r" % (status, seconds, (out + err).strip())


def missing_package_unprivileged():
    status, out, err, _ = run(["make", "-n"], SETUP_DEPS_PRETEND_MISSING="libgtest-dev",
                              SETUP_DEPS_PRETEND_UNPRIVILEGED="1")
    command = "apt-get install -y --no-install-recommends libgtest-dev"
    said = err.strip().splitlines()
    # A machine with sudo (that asks for a password) is told to use it.
    ok = (status != 0 and out == "" and len(said) == 3 and "missing libgtest-dev; install them" in said[0]
          and said[1].strip() in (command, "sudo " + command) and said[2].endswith("said why above.  Stop."))
    return ok, "status %d, nothing built: %s, said %r" % (status, out == "", said)


def missing_package_as_root():
    status, out, err, _ = run(["make", "-n", "train"], SETUP_DEPS_PRETEND_MISSING="libgtest-dev",
                              SETUP_DEPS_DRY_RUN="1")
    expected = "tools/setup_deps.sh: missing libgtest-dev; running: apt-get install -y --no-install-recommends libgtest-dev"
    ok = status == 0 and err.strip() == expected
    return ok, "status %d, said %r" % (status, err.strip())


def not_debian():
    with tempfile.NamedTemporaryFile("w", suffix="os-release") as os_release:
        os_release.write('ID=fedora\nID_LIKE="rhel centos"\n')
        os_release.flush()
        status, out, err, _ = run(["make", "-n"], SETUP_DEPS_OS_RELEASE=os_release.name)
    first = err.strip().splitlines()[0] if err.strip() else ""
    ok = (status != 0 and out == "" and "not Debian or Ubuntu" in first
          and all(name in first.split() for name in BUILD_PACKAGES))
    return ok, "status %d, said %r" % (status, first)


def cuda_without_nvcc():
    status, out, err, _ = run(["make", "-n", "cuda", "CUDA=/nonexistent/cuda"])
    ok = status != 0 and out == "" and "/nonexistent/cuda/bin/nvcc is missing" in err
    return ok, "status %d, said %r" % (status, err.strip().splitlines()[:1])


def clean_and_sub_makes_skip_the_check():
    hooks = dict(SETUP_DEPS_PRETEND_MISSING="libgtest-dev", SETUP_DEPS_PRETEND_UNPRIVILEGED="1")
    clean = run(["make", "-n", "clean"], **hooks)
    sub_make = run(["make", "-n", "train"], MAKELEVEL="1", **hooks)
    ok = clean[0] == 0 and sub_make[0] == 0 and "missing" not in clean[2] + sub_make[2]
    return ok, "make clean: status %d, a sub-make: status %d" % (clean[0], sub_make[0])


CHECKS = {
    "SetupDeps.EverythingInstalledPassesSilentlyWithinASecond": everything_installed,
    "SetupDeps.MissingPackageWithoutRootStopsMakePrintingTheAptCommand": missing_package_unprivileged,
    "SetupDeps.MissingPackageAsRootPrintsTheOneCommandItRuns": missing_package_as_root,
    "SetupDeps.NotDebianNamesEveryPackageAndStops": not_debian,
    "SetupDeps.CudaWithoutNvccSaysWhereItLooked": cuda_without_nvcc,
    "SetupDeps.CleanAndSubMakesSkipTheCheck": clean_and_sub_makes_skip_the_check,
}


def run_one(name):
    try:
        return CHECKS[name]()
    except (OSError, subprocess.SubprocessError) as error:
        return False, "did not run: %s" % error


if __name__ == "__main__":
    sys.exit(run_checks(CHECKS, run_one))
