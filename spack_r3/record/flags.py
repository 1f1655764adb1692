"""Flags and compilers every recorded unit's kind shares (host, offload, CUDA/HIP): the
launcher and its per-kind parts (``cuda.py``, ``offload.py``) read them here, so no part
imports the launcher that dispatches to it."""

import os
import shutil

from ..toolchain import clang_version, find_clang


def unoptimized_args(line):
    # -O0 would mark every function optnone: the replay pipeline could not optimize them.
    return ["-O2"] if line.opt_level == "0" else []


def target_flags():
    """Extra flags that pin the recorded build to the machine it is tuned for
    (``R3_TARGET_FLAGS``, set by ``r3 record --target``), so the recording computes
    what the native replay baseline computes (e.g. with FMA contraction)."""
    return os.environ.get("R3_TARGET_FLAGS", "").split()


def clang_for_runtime(compiler):
    """The record runtime is built with the build's own compiler when it is clang.

    The runtime is C: a C++ link (``clang++-19``) builds it with the C driver beside it
    (``clang-19``), since clang++ would compile r3rt.c as C++."""
    path = shutil.which(compiler) or compiler
    folder, base = os.path.split(path)
    if "clang++" in base:
        path = os.path.join(folder, base.replace("clang++", "clang", 1))
    return path if os.access(path, os.X_OK) and clang_version(path) else find_clang()


# What a compile line's GPU sources are: ``-x cuda`` / ``-x hip`` or the extension (the
# names are the backends'; backends/cuda.py and hip.py claim a line by it).
GPU_EXTS = {".cu": "cuda", ".hip": "hip"}


def unit_kind(args):
    """cuda, hip or None: what a compile line's sources are, by ``-x`` or their extension."""
    for i, a in enumerate(args):
        if a == "-x" and i + 1 < len(args) and args[i + 1] in GPU_EXTS.values():
            return args[i + 1]
        if a in ("-xcuda", "-xhip"):
            return a[2:]
    for a in args:
        if not a.startswith("-") and os.path.splitext(a)[1] in GPU_EXTS:
            return GPU_EXTS[os.path.splitext(a)[1]]
    return None
