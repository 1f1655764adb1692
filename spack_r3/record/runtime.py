"""Build the record runtime (runtime/r3rt.c) once per clang and link it into recorded apps.

The object is cached under ``$XDG_CACHE_HOME/spack-r3/runtime/<key>/r3rt.o`` (``~/.cache``
without XDG_CACHE_HOME), where the key hashes the runtime source, the clang path and the
clang version, so a changed source or compiler builds a fresh object and concurrent builds
never see a half-written one (build to a temporary name, then ``os.replace``).

The object defines malloc and friends (the arena heap), ``__r3_enter`` / ``__r3_exit`` and
the profile and capture writers; see runtime/r3rt.h for the ABI.
"""

import hashlib
import os
import subprocess
import tempfile

from ..errors import ToolchainError

RUNTIME_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime")
SOURCE = os.path.join(RUNTIME_DIR, "r3rt.c")
HEADER = os.path.join(RUNTIME_DIR, "r3rt.h")
# OpenMP target offload: launches intercepted and captured (record/offload.py)
OFFLOAD_SOURCE = os.path.join(RUNTIME_DIR, "r3offload.c")

# -fno-builtin-*: the runtime *is* the allocator; keep clang from rewriting its code into
# calls of the functions it defines (e.g. malloc+memset into calloc).
CFLAGS = [
    "-O2", "-fPIC", "-pthread",
    "-fno-builtin-malloc", "-fno-builtin-calloc", "-fno-builtin-realloc", "-fno-builtin-free",
]
LINK_LIBS = ["-lpthread", "-ldl", "-lrt"]  # -ldl: dlsym, -lrt: timer_create (both in libc since glibc 2.34)


def cache_root():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "spack-r3", "runtime")


def _clang_version_text(clang):
    try:
        proc = subprocess.run([clang, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ToolchainError("cannot run %s --version to build the record runtime: %s" % (clang, err))
    if proc.returncode != 0:
        raise ToolchainError("%s --version failed (exit %d); cannot build the record runtime"
                             % (clang, proc.returncode))
    return proc.stdout


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise ToolchainError("record runtime source missing: %s (%s)" % (path, err.strerror))


def cache_key(clang, source=SOURCE):
    """sha256 of the runtime source (+ header), the clang path and its version."""
    clang = os.path.abspath(clang) if os.sep in clang else clang
    h = hashlib.sha256()
    h.update(_read(source))
    h.update(b"\0")
    if os.path.exists(HEADER):
        h.update(_read(HEADER))
    h.update(b"\0" + clang.encode() + b"\0" + _clang_version_text(clang).encode())
    h.update(b"\0" + " ".join(CFLAGS).encode())
    return h.hexdigest()


def _first_error(text):
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower():
            return ln
    return lines[0] if lines else "no diagnostic"


def runtime_object(clang, source=SOURCE):
    """Path of r3rt.o (or of another runtime ``source``: OFFLOAD_SOURCE) built with
    ``clang``; built once and cached."""
    out_dir = os.path.join(cache_root(), cache_key(clang, source))
    obj = os.path.join(out_dir, os.path.splitext(os.path.basename(source))[0] + ".o")
    if os.path.isfile(obj):
        return obj
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as err:
        raise ToolchainError("cannot create runtime cache %s: %s" % (out_dir, err.strerror))
    fd, tmp = tempfile.mkstemp(prefix=".r3rt-", suffix=".o", dir=out_dir)
    os.close(fd)
    cmd = [clang] + CFLAGS + ["-I", RUNTIME_DIR, "-c", source, "-o", tmp]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as err:
        _unlink(tmp)
        raise ToolchainError("cannot build the record runtime with %s: %s" % (clang, err))
    if proc.returncode != 0:
        _unlink(tmp)
        raise ToolchainError("building the record runtime with %s failed: %s"
                             % (clang, _first_error(proc.stderr or proc.stdout)))
    os.replace(tmp, obj)
    return obj


def link_args(clang, offload=False):
    """Extra arguments for linking an executable with the record runtime (``offload``: and
    with the offload one, for a link that builds an OpenMP offload executable)."""
    extra = [runtime_object(clang, OFFLOAD_SOURCE)] if offload else []
    return [runtime_object(clang)] + extra + LINK_LIBS


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass
