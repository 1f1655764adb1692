"""Fortran as r3 meets it: flang's units, names and runtime.

LLVM's Fortran front end (``flang-new``, Debian's ``flang-19``) writes the same LLVM IR
as clang, so a Fortran unit records, replays and tunes as a C one once three things
differ:

- **Bitcode before optimization.** flang has no ``-disable-llvm-passes``; LLVM's
  ``-opt-bisect-limit=0`` skips every optional LLVM pass instead, after flang's own
  MLIR pipeline at the build's ``-O`` (which adds the alias tags that vectorizing
  Fortran needs), so the IR is what ``-O2`` hands to LLVM.
- **Names.** flang mangles a module procedure ``grid::smooth`` as ``_QMgridPsmooth``
  (``M`` module, ``S`` submodule, ``F`` host procedure, ``P`` procedure); external
  procedures are ``name_``. Users type them as Fortran spells them, in any case.
- **The runtime.** Array assignments, reductions and I/O call ``libFortranRuntime``;
  flang links it statically, so replay (a JIT) loads a shared copy built once from
  the same archives. A kernel that reads a unit, or opens, closes, positions or
  inquires about one, is refused with that reason.
"""

import os
import re
import shutil
import subprocess
import tempfile
from functools import lru_cache

SOURCE_EXTS = (".f", ".F", ".f90", ".F90", ".f95", ".F95", ".f03", ".F03", ".f08", ".F08", ".for", ".FOR", ".ftn")
# What flang needs instead of clang's -Xclang -disable-llvm-passes (see above).
BITCODE_FLAGS = ["-mllvm", "-opt-bisect-limit=0"]
# Runtime calls that make a kernel compute something replay cannot: input from a unit
# (external files and stdin hold what the recording did not keep) and statements that
# connect, position or ask about units (runtime state outside the capture). Output, like
# C's printf, changes nothing the kernel computes; internal READ/WRITE work on memory; a
# STOP on a path the recorded call did not take is not taken in replay either.
UNREPLAYABLE_CALLS = (
    ("_FortranAioBeginExternalListInput", "it reads input (Fortran READ from a unit)"),
    ("_FortranAioBeginExternalFormattedInput", "it reads input (Fortran READ from a unit)"),
    ("_FortranAioBeginUnformattedInput", "it reads input (Fortran READ from a unit)"),
    ("_FortranAioBeginOpen", "it opens Fortran units"),
    ("_FortranAioBeginClose", "it closes Fortran units"),
    ("_FortranAioBeginInquire", "it inquires about Fortran units or files"),
    ("_FortranAioBeginRewind", "it positions Fortran units"),
    ("_FortranAioBeginBackspace", "it positions Fortran units"),
    ("_FortranAioBeginEndfile", "it positions Fortran units"),
)
RUNTIME_ARCHIVES = ("libFortranRuntime.a", "libFortranDecimal.a")
_MANGLED = re.compile(r"_Q((?:[MSFP][a-z0-9_$]+)+)$")
_PART = re.compile(r"([MSFP])([a-z0-9_$]+)")


def is_source(path):
    return path.endswith(SOURCE_EXTS)


def is_flang(compiler):
    """True when ``compiler`` (a path or name) is LLVM's Fortran driver."""
    return bool(compiler) and os.path.basename(compiler).startswith(("flang", "f18"))


def is_fortran_unit(compile_command, source_file=""):
    """True when a recorded unit was Fortran (by its compiler or its source)."""
    return bool(compile_command) and is_flang(compile_command[0]) or is_source(source_file or "")


def demangle(symbol):
    """``_QMgridPsmooth`` -> ``grid::smooth``; None when ``symbol`` is no flang name."""
    m = _MANGLED.match(symbol)
    if not m:
        return None
    return "::".join(name for _, name in _PART.findall(m.group(1)))


def names_match(ref, symbol):
    """True when ``ref`` names the Fortran procedure ``symbol`` by its own name (any
    case): ``smooth`` or ``grid::smooth`` for ``_QMgridPsmooth``, ``axpy`` for ``axpy_``."""
    want = ref.lower()
    full = demangle(symbol)
    if full is not None:
        return want in (full, full.split("::")[-1])
    return symbol.endswith("_") and not symbol.endswith("__") and want == symbol[:-1]


def unreplayable_call(name):
    """Why a call to the runtime function ``name`` stops a kernel replaying, or None."""
    for prefix, reason in UNREPLAYABLE_CALLS:
        if name.startswith(prefix):
            return reason
    return None


def codegen_flags(flags):
    """The build's flags as flang takes them when it compiles IR: it refuses every
    warning option but ``-Werror``."""
    return [a for a in flags if not a.startswith("-W") or a == "-Werror"]


def flang_major(path):
    """Major version of the flang at ``path`` (or a name on PATH), or None."""
    if not path:
        return None
    m = re.search(r"flang(?:-new)?-(\d+)$", os.path.basename(path))
    if m:
        return int(m.group(1))
    exe = shutil.which(path)
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"flang(?:-new)? version (\d+)", out)
    return int(m.group(1)) if m else None


def flang_of_version(recorded, version):
    """A flang of major ``version``: ``recorded`` where it still runs here, else
    ``flang-new-N`` on PATH, else LLVM's own bin directory; None if none."""
    for path in (
        shutil.which(recorded) if recorded else None,
        shutil.which("flang-new-%d" % version),
        shutil.which("flang-%d" % version),
        "/usr/lib/llvm-%d/bin/flang-new" % version,
    ):
        if path and os.access(path, os.X_OK) and flang_major(path) == version:
            return path
    return None


def runtime_archives(flang):
    """The runtime archives ``flang`` links, from its own library directory."""
    exe = shutil.which(flang) or flang
    libdir = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(exe))), "lib")
    paths = [os.path.join(libdir, name) for name in RUNTIME_ARCHIVES]
    return paths if all(os.path.exists(p) for p in paths) else []


@lru_cache(maxsize=None)
def runtime_library(flang, cache_dir):
    """A shared copy of ``flang``'s runtime for replay to load, built once into
    ``cache_dir`` (keyed on the archives' identity); None where it cannot be built."""
    archives = runtime_archives(flang)
    if not archives:
        return None
    stamp = "-".join("%x-%x" % (os.stat(a).st_size, int(os.stat(a).st_mtime)) for a in archives)
    out = os.path.join(cache_dir, "libr3fortran-%s.so" % stamp)
    if os.path.exists(out):
        return out
    os.makedirs(cache_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".libr3fortran-", suffix=".so", dir=cache_dir)
    os.close(fd)
    cmd = [flang, "-shared", "-o", tmp, "-Wl,--whole-archive"] + archives
    cmd += ["-Wl,--no-whole-archive", "-lstdc++", "-lm"]
    if subprocess.run(cmd, capture_output=True).returncode != 0:
        os.unlink(tmp)
        return None
    os.replace(tmp, out)  # two workers building it at once both leave a whole file
    return out
