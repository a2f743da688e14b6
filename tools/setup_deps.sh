#!/usr/bin/env bash
# Sets up a fresh Debian or Ubuntu machine for a make target: checks that the packages of each
# GROUP are installed and installs the missing ones with apt-get, printing the one command it
# runs, when it runs as root or `sudo -n` works; otherwise it stops, printing that command.
#   tools/setup_deps.sh GROUP...    groups: build test sanitize racecheck fuzz cuda
# The Makefile runs it before anything is built (make: build; make test: test; make cuda: cuda),
# so on a machine that has everything it must cost little: one dpkg-query, about 0.1 s.
# Not Debian or Ubuntu: it names the packages (by their Debian names) and stops.
#
# Test hooks (tests/setup_deps_test.py), each standing in for one fact of the machine, so that
# every branch runs with the real code around it: SETUP_DEPS_PRETEND_MISSING="pkg..." reports
# those packages missing; SETUP_DEPS_PRETEND_NO_CANDIDATE="pkg..." as if apt's package lists
# knew no candidate for them; SETUP_DEPS_UID=N acts as user N (0: root); SETUP_DEPS_SUDO=yes|no
# as if `sudo -n` worked or not; SETUP_DEPS_DRY_RUN=1 prints the install command without
# running it; SETUP_DEPS_OS_RELEASE=FILE reads FILE in place of /etc/os-release.
set -euo pipefail

me=tools/setup_deps.sh
# The packages of each group. sanitize: libasan.so and libubsan.so for g++-12 come with
# libgcc-12-dev, their runtimes with libasan8 and libubsan1; racecheck: clang's ThreadSanitizer
# runtime comes with libclang-rt-14-dev. cuda: the GPU build needs what the
# CPU build needs, plus the CUDA toolkit (checked by its nvcc, not installed: NVIDIA's, not Debian's).
packages_of() {
  case "$1" in
    build) echo g++ make pkg-config mpich libmpich-dev libopenblas-dev libboost-context-dev libgtest-dev bible-kjv ;;
    test) packages_of build; echo python3 python3-numpy python3-torch python3-matplotlib ;;
    sanitize) packages_of build; echo libgcc-12-dev libasan8 libubsan1 ;;
    racecheck) packages_of build; echo clang-14 libclang-rt-14-dev ;;
    fuzz) packages_of build; echo clang-14 libfuzzer-14-dev ;;
    cuda) packages_of build ;;
    *) echo "$me: unknown group '$1' (groups: build test sanitize racecheck fuzz cuda)" >&2; return 1 ;;
  esac
}

[ $# -gt 0 ] || { echo "usage: $me GROUP... (groups: build test sanitize racecheck fuzz cuda)" >&2; exit 2; }
wanted=()
for group in "$@"; do
  list=$(packages_of "$group") || exit 2
  wanted+=($list)
done
mapfile -t wanted < <(printf '%s\n' "${wanted[@]}" | sort -u)

os_release=${SETUP_DEPS_OS_RELEASE:-/etc/os-release}
os_ids=$(. "$os_release" 2>/dev/null; echo "${ID:-} ${ID_LIKE:-}")
if [[ " $os_ids " != *" debian "* && " $os_ids " != *" ubuntu "* ]] || ! command -v dpkg-query >/dev/null; then
  echo "$me: this is not Debian or Ubuntu, so the packages cannot be checked; install these (Debian's names)" \
       "and run make with SETUP_DEPS=0: ${wanted[*]}" >&2
  exit 1
fi

# dpkg-query names every installed package it knows, "ii" when fully installed; a package it does
# not know it leaves out (and complains on stderr, which says nothing we do not say below).
installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${wanted[@]}" 2>/dev/null | awk '$2 == "ii" { print $1 }' || true)
missing=()
for name in "${wanted[@]}"; do
  if [[ " ${SETUP_DEPS_PRETEND_MISSING:-} " == *" $name "* ]] || ! grep -qxF "$name" <<<"$installed"; then
    missing+=("$name")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  install="apt-get install -y --no-install-recommends ${missing[*]}"
  # The package lists are read only when something is missing: a fresh image has none, and a
  # list that knows no candidate for a missing package is refreshed first.
  asked=()
  for name in "${missing[@]}"; do
    [[ " ${SETUP_DEPS_PRETEND_NO_CANDIDATE:-} " == *" $name "* ]] || asked+=("$name")
  done
  candidates=0
  if [ ${#asked[@]} -gt 0 ]; then
    candidates=$(apt-cache policy "${asked[@]}" 2>/dev/null | grep -c '^  Candidate: [^(]' || true)
  fi
  [ "$candidates" -eq ${#missing[@]} ] || install="apt-get update && $install"
  case "${SETUP_DEPS_SUDO:-}" in
    yes) sudo_works() { true; } ;;
    no) sudo_works() { false; } ;;
    *) sudo_works() { command -v sudo >/dev/null && sudo -n true 2>/dev/null; } ;;
  esac
  # apt-get asks no questions with DEBIAN_FRONTEND=noninteractive, which sudo would drop but for env.
  if [ "${SETUP_DEPS_UID:-$(id -u)}" -eq 0 ]; then
    run=(env DEBIAN_FRONTEND=noninteractive sh -c "$install")
    said="running: $install"
  elif sudo_works; then
    run=(sudo -n env DEBIAN_FRONTEND=noninteractive sh -c "$install")
    said="running as root with sudo -n: $install"
  else
    if command -v sudo >/dev/null; then
      echo "$me: missing ${missing[*]}; install them with:" >&2
      echo "  ${install//apt-get /sudo apt-get }" >&2
    else
      echo "$me: missing ${missing[*]}; install them as root with:" >&2
      echo "  $install" >&2
    fi
    exit 1
  fi
  echo "$me: missing ${missing[*]}; $said" >&2
  if [ "${SETUP_DEPS_DRY_RUN:-}" != 1 ]; then
    "${run[@]}" >&2 || { echo "$me: the installation failed (above)" >&2; exit 1; }
    now_installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${missing[@]}" 2>/dev/null | awk '$2 == "ii"' | wc -l || true)
    [ "$now_installed" -eq ${#missing[@]} ] || { echo "$me: still missing after apt-get: see its output above" >&2; exit 1; }
  fi
fi

for group in "$@"; do
  if [ "$group" = cuda ] && [ ! -x "${CUDA:-/usr/local/cuda}/bin/nvcc" ]; then
    echo "$me: the GPU build needs the CUDA toolkit (with NCCL) at ${CUDA:-/usr/local/cuda}, and" \
         "${CUDA:-/usr/local/cuda}/bin/nvcc is missing: install it from NVIDIA (make CUDA=DIR names another place)" >&2
    exit 1
  fi
done
