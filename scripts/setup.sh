#!/usr/bin/env bash
# Install what spack-r3 needs on a fresh Debian/Ubuntu machine: a virtualenv with
# the package, clang + the LLVM OpenMP runtime (apt, when root), and an offline
# Spack configuration when a Spack is present (SPACK_ROOT, spack on PATH, ~/spack).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "setup: $*"; }

# 1. clang >= 15 and libomp for record builds and OpenMP replay; opt, llvm-link and
#    llvm-dis of the same LLVM (package llvm-19) for the Polly stage of r3 tune.
have_clang() { for c in ${R3_CLANG:-} clang-22 clang-21 clang-20 clang-19 clang-18 clang-17 clang-16 clang-15; do command -v "$c" >/dev/null 2>&1 && return 0; done; return 1; }
if ! have_clang || ! ls /usr/lib/llvm-*/lib/libomp.so >/dev/null 2>&1 || { [ -z "${R3_CLANG:-}" ] && ! command -v llvm-dis-19 >/dev/null; }; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing clang-19, libomp-19-dev and llvm-19 with apt"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang-19 libomp-19-dev llvm-19 >/dev/null
  else
    say "need clang >= 15, libomp and llvm tools (Debian: sudo apt-get install clang-19 libomp-19-dev llvm-19), or set R3_CLANG"
    exit 1
  fi
fi

# 1a. LLVM's Fortran front end (flang-new-19, Debian's flang-19): Fortran units record,
#     replay and tune through it, and Spack's clang gets it as its Fortran compiler (below).
if ! command -v flang-new-19 >/dev/null && ! command -v flang-new >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing flang-19 with apt (Fortran kernels)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq flang-19 >/dev/null \
      || say "flang-19 could not be installed: the Fortran tests will skip"
  else
    say "no flang: the Fortran tests will skip (Debian: sudo apt-get install flang-19)"
  fi
fi

# 1b. PostgreSQL's server (initdb, pg_ctl) for the tests of r3 tune --storage postgresql://,
#     which start a server of their own in a temporary directory (no service is used).
if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing postgresql with apt (its binaries, for the --storage postgresql tests)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    say "no PostgreSQL server found: the --storage postgresql tests will skip (Debian: sudo apt-get install postgresql)"
  fi
fi

# 1b2. The autotools (autoconf, automake, libtool, m4), which a facility registers as Spack
#      externals: recipes of Autotools trees without a generated configure regenerate it.
if ! command -v autoreconf >/dev/null || ! command -v automake >/dev/null || ! command -v libtoolize >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing autoconf, automake, libtool with apt (for recipes that regenerate configure)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq autoconf automake libtool m4 >/dev/null \
      || say "the autotools could not be installed: the autoreconf recipe test will skip"
  else
    say "no autotools: the autoreconf recipe test will skip (Debian: sudo apt-get install autoconf automake libtool)"
  fi
fi

# 1c. ROCm's HIP headers and runtime library (Debian's libamdhip64-dev) for the tests that
#     build the HIP recorder (record/runtime/r3hip.c) against them; no AMD GPU is needed.
if [ ! -f /usr/include/hip/hip_runtime_api.h ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing libamdhip64-dev with apt (HIP headers, for the HIP recorder's tests)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libamdhip64-dev >/dev/null \
      || say "libamdhip64-dev could not be installed: the HIP recorder's tests will skip"
  else
    say "no HIP headers: the HIP recorder's tests will skip (Debian: sudo apt-get install libamdhip64-dev)"
  fi
fi

# 1c'. ROCm's device libraries (Debian's rocm-device-libs: ocml, ockl, oclc_*), which clang
#     links into an AMD GPU's device code as the build would: a kernel calling sin() has its
#     real register count only with them (device/deviceir.py); no AMD GPU is needed.
if ! ls /usr/lib/*/amdgcn/bitcode/ocml.bc >/dev/null 2>&1 && ! ls /opt/rocm*/amdgcn/bitcode/ocml.bc >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing rocm-device-libs with apt (AMD GPU math, for the device screening's tests)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rocm-device-libs >/dev/null \
      || say "rocm-device-libs could not be installed: AMD device code calling math is screened unresolved"
  else
    say "no ROCm device libraries: AMD device code calling math is screened unresolved (Debian: sudo apt-get install rocm-device-libs)"
  fi
fi

# 1d. LLVM's linker (Debian's lld-19) for the device link of a HIP unit (clang's own, and the
#     +r3 build's code object: emit/hip.py, tests/device/test_hip_apply.py); no GPU is needed.
if ! command -v ld.lld-19 >/dev/null && ! command -v ld.lld >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing lld-19 with apt (the HIP device link, for the HIP +r3 build's tests)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lld-19 >/dev/null \
      || say "lld-19 could not be installed: the HIP +r3 build's tests will skip"
  else
    say "no ld.lld: the HIP +r3 build's tests will skip (Debian: sudo apt-get install lld-19)"
  fi
fi

# 2. The virtualenv with the project and its test dependencies.
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import llvmlite, optuna, openai, archspec, clingo, pytest, matplotlib, distributed, dask_jobqueue, psycopg2" \
  || { say "the virtualenv lacks a dependency"; exit 1; }
# ptxas of the nvidia-cuda-nvcc-cu12 wheel (test extra): device code generation without a GPU
.venv/bin/python -c "from spack_r3.device.tools import find_ptxas; find_ptxas()" \
  || { say "ptxas missing: .venv/bin/pip install nvidia-cuda-nvcc-cu12"; exit 1; }

# 3. Spack, configured to work offline (see ../shared/SPACK.md).
spack_root=${SPACK_ROOT:-}
if [ -z "$spack_root" ] && command -v spack >/dev/null 2>&1; then spack_root=$(cd "$(dirname "$(command -v spack)")/.." && pwd); fi
if [ -z "$spack_root" ] && [ -x "$HOME/spack/bin/spack" ]; then spack_root=$HOME/spack; fi
if [ -n "$spack_root" ]; then
  export SPACK_PYTHON=$PWD/.venv/bin/python
  spack="$spack_root/bin/spack"
  "$spack" bootstrap disable >/dev/null 2>&1 || true
  if ! "$spack" compilers 2>/dev/null | grep -q clang; then
    say "registering compilers with Spack (first time: about a minute)"
    "$spack" compiler find >/dev/null
  fi
  # Spack looks for a clang's Fortran compiler as "flang"; Debian names it flang-new-19
  # (scripts/spack_flang.py sets it as fc and f77 of the clang of its version).
  "$PWD/.venv/bin/python" scripts/spack_flang.py "$spack"
  if ! grep -qs "cmake" "$HOME/.spack/packages.yaml"; then
    "$spack" external find --not-buildable cmake gmake >/dev/null
  fi
  say "Spack at $spack_root"
else
  say "no Spack found (SPACK_ROOT, spack on PATH, ~/spack): Spack tests will skip; get one with: git clone https://github.com/spack/spack ~/spack"
fi
