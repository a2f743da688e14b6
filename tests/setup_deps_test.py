#!/usr/bin/python3
"""make's dependency check (tools/setup_deps.sh) as a specification.

Runs `make -n` (which parses the Makefile, and so runs the check, but builds nothing) and the
script itself with the script's test hooks: a package reported missing, package lists that know
no candidate, root, a user with sudo and one without, a dry run that prints the install command
without running it, another /etc/os-release. Nothing is installed. Run by tools/run_tests.sh with Debian's /usr/bin/python3:
    /usr/bin/python3 tests/setup_deps_test.py [--gtest_filter=PATTERN]
One line per check, then "tests: N passed, M failed".
"""
import os
import subprocess
import sys
import tempfile
import time

from check_runner import run_check_table

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
    # make test's own check installed the test group before this runs. "Costs little" is measured
    # against the least the script must do, timed here in the same conditions: start bash, make
    # one dpkg-query of the packages and sort. Four times that is generous on a loaded machine
    # as on an idle one (0.31 s against 0.12 s, 2 cores busy with builds, 2026-11-26), and far
    # below what asking apt for the candidates on every make would add (apt-cache policy: 5 s).
    least = ["bash", "-c", "dpkg-query -W %s | sort -u" % " ".join(BUILD_PACKAGES)]
    start = time.monotonic()
    subprocess.run(least, capture_output=True)
    least_seconds = time.monotonic() - start
    status, out, err, seconds = run([SCRIPT, "build", "test"])
    ok = status == 0 and out == "" and err == "" and seconds < 4 * least_seconds + 0.1
    return ok, "status %d in %.2f s (the least it must do: %.2f s), said %r" % (
        status, seconds, least_seconds, (out + err).strip())


def missing_package_unprivileged():
    status, out, err, _ = run(["make", "-n"], SETUP_DEPS_PRETEND_MISSING="libgtest-dev",
                              SETUP_DEPS_UID="1000", SETUP_DEPS_SUDO="no")
    command = "apt-get install -y --no-install-recommends libgtest-dev"
    said = err.strip().splitlines()
    # A machine with sudo (that asks for a password) is told to use it.
    ok = (status != 0 and out == "" and len(said) == 3 and "missing libgtest-dev; install them" in said[0]
          and said[1].strip() in (command, "sudo " + command) and said[2].endswith("said why above.  Stop."))
    return ok, "status %d, nothing built: %s, said %r" % (status, out == "", said)


def dry_run(**hooks):
    """(status, stderr) of `make -n train` with libgtest-dev missing, installing nothing."""
    status, out, err, _ = run(["make", "-n", "train"], SETUP_DEPS_PRETEND_MISSING="libgtest-dev",
                              SETUP_DEPS_DRY_RUN="1", **hooks)
    return status, err.strip()


def missing_package_as_root():
    status, said = dry_run(SETUP_DEPS_UID="0", SETUP_DEPS_SUDO="no")
    expected = "tools/setup_deps.sh: missing libgtest-dev; running: apt-get install -y --no-install-recommends libgtest-dev"
    return status == 0 and said == expected, "status %d, said %r" % (status, said)


def missing_package_with_sudo():
    status, said = dry_run(SETUP_DEPS_UID="1000", SETUP_DEPS_SUDO="yes")
    expected = ("tools/setup_deps.sh: missing libgtest-dev; running as root with sudo -n: "
                "apt-get install -y --no-install-recommends libgtest-dev")
    return status == 0 and said == expected, "status %d, said %r" % (status, said)


def package_lists_without_the_package_are_updated_first():
    # A fresh image has no package lists: apt knows no candidate, and installing would fail.
    status, said = dry_run(SETUP_DEPS_UID="0", SETUP_DEPS_PRETEND_NO_CANDIDATE="libgtest-dev")
    expected = ("tools/setup_deps.sh: missing libgtest-dev; running: "
                "apt-get update && apt-get install -y --no-install-recommends libgtest-dev")
    return status == 0 and said == expected, "status %d, said %r" % (status, said)


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
    hooks = dict(SETUP_DEPS_PRETEND_MISSING="libgtest-dev", SETUP_DEPS_UID="1000", SETUP_DEPS_SUDO="no")
    clean = run(["make", "-n", "clean"], **hooks)
    sub_make = run(["make", "-n", "train"], MAKELEVEL="1", **hooks)
    ok = clean[0] == 0 and sub_make[0] == 0 and "missing" not in clean[2] + sub_make[2]
    return ok, "make clean: status %d, a sub-make: status %d" % (clean[0], sub_make[0])


CHECKS = {
    "SetupDeps.EverythingInstalledPassesSilentlyInAboutOneDpkgQuery": everything_installed,
    "SetupDeps.MissingPackageWithoutRootStopsMakePrintingTheAptCommand": missing_package_unprivileged,
    "SetupDeps.MissingPackageAsRootPrintsTheOneCommandItRuns": missing_package_as_root,
    "SetupDeps.MissingPackageWithSudoRunsItThroughSudo": missing_package_with_sudo,
    "SetupDeps.PackageListsWithoutThePackageAreUpdatedFirst": package_lists_without_the_package_are_updated_first,
    "SetupDeps.NotDebianNamesEveryPackageAndStops": not_debian,
    "SetupDeps.CudaWithoutNvccSaysWhereItLooked": cuda_without_nvcc,
    "SetupDeps.CleanAndSubMakesSkipTheCheck": clean_and_sub_makes_skip_the_check,
}


if __name__ == "__main__":
    sys.exit(run_check_table(CHECKS))
