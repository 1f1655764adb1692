"""The language runtime a replayed kernel calls into, found and loaded into the JIT.

C++ code reaches its runtime even when the source never names it: clang wraps
the body of every OpenMP region in an exception cleanup that calls
``std::terminate``, ``__cxa_begin_catch`` and ``__gxx_personality_v0``, and
``std::vector::at`` throws through ``std::__throw_out_of_range_fmt``. The build
linked that runtime into the application; replay loads the same one into the
worker, so that the JIT resolves those calls as the linker did.

Fortran code calls flang's runtime (array assignment, MATMUL, reductions); flang links
it statically, so the worker loads a shared copy of the same archives
(``fortran.runtime_library``).
"""

import ctypes.util
import os
import shutil
import subprocess
from functools import lru_cache

import llvmlite.binding as llvm

from .. import fortran

CXX_SOURCE_EXTS = (".cc", ".cpp", ".cxx", ".c++", ".C", ".ii")
# Shared objects by soname (not the development .so, which may be a linker script),
# with the name ctypes.util.find_library knows them by when the compiler cannot say.
LIBSTDCXX = [("libstdc++.so.6", "stdc++"), ("libgcc_s.so.1", "gcc_s")]
LIBCXX = [("libc++abi.so.1", "c++abi"), ("libc++.so.1", "c++"), ("libgcc_s.so.1", "gcc_s")]


def is_cxx(compile_command, source_file=""):
    """True when the unit was compiled as C++ (by the driver's name, ``-x``, or the source)."""
    if not compile_command:
        return False
    args = compile_command[1:]
    for i, a in enumerate(args):
        if a == "-x" and i + 1 < len(args):
            return args[i + 1].startswith("c++")
    driver = os.path.basename(compile_command[0])
    return "++" in driver or source_file.endswith(CXX_SOURCE_EXTS)


def cxx_runtime(compile_command, source_file=""):
    """Sonames of the C++ runtime the unit was built against: libc++ (and libc++abi) when
    the command says ``-stdlib=libc++``, else libstdc++; libgcc_s (unwinding) with both.
    Empty for C."""
    if not is_cxx(compile_command, source_file):
        return []
    stdlib = [a.split("=", 1)[1] for a in compile_command if a.startswith("-stdlib=")]
    return LIBCXX if stdlib[-1:] == ["libc++"] else LIBSTDCXX


@lru_cache(maxsize=None)
def _locate(compiler, stdlib_flags, soname, short):
    """A loadable path for ``soname``: where the capture's own compiler finds it (the
    library the build linked), else the system's search, else the bare soname (dlopen
    searches the standard directories)."""
    exe = shutil.which(compiler)
    if exe:
        try:
            out = subprocess.run(
                [exe] + list(stdlib_flags) + ["-print-file-name=" + soname], capture_output=True, text=True, timeout=60
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if os.path.isabs(out) and os.path.exists(out):  # a bare name means "not found"
            return out
    return ctypes.util.find_library(short) or soname


def load_cxx_runtime(compile_command, source_file=""):
    """Load the unit's C++ runtime into this process's symbol search (permanently, so the
    candidates forked later inherit it). Returns the sonames that could not be loaded."""
    stdlib_flags = tuple(a for a in compile_command if a.startswith("-stdlib="))
    failed = []
    for soname, short in cxx_runtime(compile_command, source_file):
        try:
            llvm.load_library_permanently(_locate(compile_command[0], stdlib_flags, soname, short))
        except RuntimeError:
            failed.append(soname)
    return failed


def load_fortran_runtime(compile_command, source_file=""):
    """Load flang's runtime for a Fortran unit (as ``load_cxx_runtime``). Returns what could
    not be loaded: empty for other languages."""
    if not fortran.is_fortran_unit(compile_command, source_file):
        return []
    from ..record.runtime import cache_root

    flang = compile_command[0]
    version = fortran.flang_major(flang)
    flang = fortran.flang_of_version(flang, version) if version else None
    library = fortran.runtime_library(flang, os.path.join(cache_root(), "fortran")) if flang else None
    if library is None:
        return ["flang's runtime (libFortranRuntime)"]
    try:
        llvm.load_library_permanently(library)
    except RuntimeError:
        return [library]
    return []


def load_runtime(compile_command, source_file=""):
    """Load the unit's language runtime (C++ or Fortran); returns what could not be loaded."""
    return load_cxx_runtime(compile_command, source_file) + load_fortran_runtime(compile_command, source_file)
