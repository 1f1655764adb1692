"""Build the record runtime (runtime/*.c) once per clang and link it into recorded apps.

The runtime's files (one a subsystem, runtime/r3rt.c has the overview) are compiled and
linked into one relocatable object, r3rt.o, whose symbols other than the ABI of r3rt.h and the
libc functions it defines are made local: what its files share is hidden, so it can clash
with nothing the application defines, as when the runtime was one file of statics.

The object is cached under ``$XDG_CACHE_HOME/spack-r3/runtime/<key>/r3rt.o`` (``~/.cache``
without XDG_CACHE_HOME), where the key hashes the runtime sources, the clang path and the
clang version, so a changed source or compiler builds a fresh object and concurrent builds
never see a half-written one (build to a temporary name, then ``os.replace``).

The object defines malloc and friends (the arena heap), ``__r3_enter`` / ``__r3_exit`` and
the profile and capture writers; see runtime/r3rt.h for the ABI.
"""

import hashlib
import os
import shutil
import subprocess
import tempfile

from ..errors import ToolchainError

RUNTIME_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime")
# the record runtime's files, linked into one r3rt.o (SOURCE names it)
RUNTIME_FILES = (
    "r3rt.c",
    "util.c",
    "arena.c",
    "output.c",
    "config.c",
    "probes.c",
    "profiler.c",
    "capture.c",
    "calls.c",
    "pages.c",
    "regions.c",
    "mappings.c",
    "r3rt.h",
    "r3rt_internal.h",
    "launchrec.h",  # shared by the launch recorders, r3offload.c and r3cuda.c
    "gpurec.h",  # the GPU launch recorder r3cuda.c and r3hip.c share
    "gpuapi.h",  # what gpurec.h and the +r3 build's launch shim r3launch.c share
    "cudatypes.h",  # CUDA's types for r3cuda.c and r3launch.c
    "hiptypes.h",  # HIP's types for r3hip.c and r3hiplaunch.c
    "r3launch.h",  # the +r3 build's launch shim, r3launch.c (CUDA) and r3hiplaunch.c (HIP)
)
SOURCE = os.path.join(RUNTIME_DIR, "r3rt.c")
SOURCES = tuple(os.path.join(RUNTIME_DIR, f) for f in RUNTIME_FILES if f.endswith(".c"))
HEADERS = tuple(os.path.join(RUNTIME_DIR, f) for f in RUNTIME_FILES if f.endswith(".h"))
# OpenMP target offload: launches intercepted and captured (record/offload.py)
OFFLOAD_SOURCE = os.path.join(RUNTIME_DIR, "r3offload.c")

# -fno-builtin-*: the runtime *is* the allocator; keep clang from rewriting its code into
# calls of the functions it defines (e.g. malloc+memset into calloc).
CFLAGS = [
    "-O2",
    "-fPIC",
    "-pthread",
    "-fno-builtin-malloc",
    "-fno-builtin-calloc",
    "-fno-builtin-realloc",
    "-fno-builtin-free",
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
        raise ToolchainError(
            "%s --version failed (exit %d); cannot build the record runtime" % (clang, proc.returncode)
        )
    return proc.stdout


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise ToolchainError("record runtime source missing: %s (%s)" % (path, err.strerror))


def _sources(source):
    """The files compiled into ``source``'s object: the record runtime's, or ``source``."""
    return SOURCES if source == SOURCE else (source,)


def cache_key(clang, source=SOURCE):
    """sha256 of the runtime's sources (+ headers), the clang path and its version."""
    clang = os.path.abspath(clang) if os.sep in clang else clang
    h = hashlib.sha256()
    for path in _sources(source) + HEADERS:
        h.update(os.path.basename(path).encode() + b"\0" + _read(path) + b"\0")
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
    work = tempfile.mkdtemp(prefix=".r3rt-", dir=out_dir)
    try:
        sources = _sources(source)
        objs = [os.path.join(work, os.path.splitext(os.path.basename(s))[0] + ".o") for s in sources]
        for src, o in zip(sources, objs):
            _run(clang, [clang] + CFLAGS + ["-I", RUNTIME_DIR, "-c", src, "-o", o])
        tmp = objs[0]
        if len(objs) > 1:
            # one object, its files' shared (hidden) symbols made local as statics were
            tmp = os.path.join(work, "linked.o")
            _run(clang, [clang, "-r", "-o", tmp] + objs)
            _run(clang, [_objcopy(clang), "--localize-hidden", tmp])
        os.replace(tmp, obj)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return obj


def _run(clang, cmd):
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ToolchainError("cannot build the record runtime with %s: %s" % (clang, err))
    if proc.returncode != 0:
        raise ToolchainError(
            "building the record runtime with %s failed: %s" % (clang, _first_error(proc.stderr or proc.stdout))
        )


def _objcopy(clang):
    """llvm-objcopy beside ``clang`` (or on PATH), else binutils' objcopy."""
    path = shutil.which(clang)
    near = [os.path.join(os.path.dirname(os.path.realpath(path)), "llvm-objcopy")] if path else []
    for tool in near + ["llvm-objcopy", "objcopy"]:
        found = shutil.which(tool)
        if found:
            return found
    raise ToolchainError("no llvm-objcopy or objcopy found to build the record runtime with %s" % clang)


def link_args(clang):
    """Extra arguments for linking an executable with the record runtime."""
    return [runtime_object(clang)] + LINK_LIBS


def offload_link_args(clang):
    """What a link that builds an OpenMP offload executable adds: the launch recorder."""
    return [runtime_object(clang, OFFLOAD_SOURCE)]
