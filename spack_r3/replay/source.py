"""Source variants: a patch to the kernel's unit, compiled to bitcode as record compiled it.

    bitcode = variant_bitcode(capture, capture_dir, variant.source_patch, variant.source_defines,
                              openmp=variant.source_openmp)

The patched unit is written to a scratch folder (never into the user's tree) and compiled
with the flags record used for ``module.bc`` (``Capture.bitcode_args``), from the unit's
compile directory, with the original source's folder first on the quoted include path so
its ``#include "..."`` still resolve (and ``-fopenmp`` added for a variant that adds OpenMP
threads to a unit built without it: ``search.openmp``). The unit's own headers kept in the capture
(``record.headers``) are found at their recorded paths through clang's VFS overlay, so a
worker that does not see the application's tree compiles it too. Called in the worker's
candidate child: a patch is untrusted text. Outputs are cached by (compiler, flags, patched text) in
``$R3_STAGE_CACHE``, so the inner search compiles each source variant once.
"""

import hashlib
import json
import os
import subprocess
import tempfile

from ..fileutil import write_atomic
from ..fortran import is_flang
from ..toolchain import before_llvm_passes
from ..record import headers
from ..sourcepatch import PatchError, apply_patch
from ..compile.stages import CompileError

COMPILE_TIMEOUT_S = 120


def unit_text(capture, directory):
    """The unit's source as recorded (the copy in the capture, else the original file)."""
    ext = os.path.splitext(capture.source_file)[1]
    for path in (os.path.join(directory, "source" + ext), capture.source_file):
        if os.path.isfile(path):
            with open(path, errors="surrogateescape") as f:
                return f.read()
    raise CompileError("the source of %s is gone (%s)" % (capture.kernel, capture.source_file))


def unit_flags(capture):
    """The bitcode flags of the unit (older captures: derived from the compile command)."""
    if capture.bitcode_args:
        return list(capture.bitcode_args)
    from ..record.compileline import CompileLine

    line = CompileLine(capture.compile_command)
    return line.without(drop_sources=True, drop_output=True, drop_deps=True) + (
        ["-O2"] if line.opt_level == "0" else []
    )


def compile_command(capture, source_path, output, defines=None, openmp=False):
    """The clang command that compiles ``source_path`` (a variant of the unit) to bitcode
    (``openmp``: with -fopenmp added)."""
    flags = ["-D%s=%s" % (k, v) for k, v in sorted((defines or {}).items())]
    return (
        [capture.compile_command[0]]
        + unit_flags(capture)
        + (["-fopenmp"] if openmp else [])
        + flags
        # flang has no quoted include path: its INCLUDE lines search -I
        + ["-I" if is_flang(capture.compile_command[0]) else "-iquote", os.path.dirname(capture.source_file)]
        + ["-emit-llvm", "-c"]
        + before_llvm_passes(capture.compile_command[0])
        + [source_path, "-o", output]
    )


def variant_bitcode(capture, directory, patch=None, defines=None, timeout=COMPILE_TIMEOUT_S, openmp=False):
    """Bitcode of the unit with ``patch`` applied and ``defines`` set (``openmp``: compiled with
    -fopenmp added); CompileError with the compiler's first error line (or the patch's) when
    it does not build."""
    text = unit_text(capture, directory)
    if patch:
        try:
            text = apply_patch(text, patch)
        except PatchError as err:
            raise CompileError("the source patch does not apply: %s" % err)
    name = os.path.basename(capture.source_file)
    cache = os.environ.get("R3_STAGE_CACHE")
    probe = compile_command(capture, name, "out.bc", defines, openmp)
    key = hashlib.sha256(
        json.dumps([probe, capture.compile_dir, capture.headers], sort_keys=True).encode()
        + b"\0"
        + text.encode(errors="surrogateescape")
    ).hexdigest()
    cached = os.path.join(cache, "source-" + key + ".bc") if cache else None
    if cached and os.path.isfile(cached):
        with open(cached, "rb") as f:
            return f.read()
    with tempfile.TemporaryDirectory(prefix="r3-variant-") as tmp:
        src, out = os.path.join(tmp, name), os.path.join(tmp, "out.bc")
        with open(src, "w", errors="surrogateescape") as f:
            f.write(text)
        cwd = capture.compile_dir if os.path.isdir(capture.compile_dir) else tmp
        overlay = headers.overlay_flags(capture.headers, directory, capture.compile_dir, tmp)
        cmd = compile_command(capture, src, out, defines, openmp)
        try:
            proc = subprocess.run(
                cmd[:1] + overlay + cmd[1:],
                cwd=cwd,
                timeout=timeout,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        except subprocess.TimeoutExpired:
            raise CompileError("the source variant did not compile within %ss" % timeout)
        if proc.returncode != 0:
            errors = compiler_errors(proc.stderr, src, name)
            if capture.headers is None and cwd == tmp:
                raise CompileError(
                    "the source variant cannot compile here: the unit's source tree (%s) is not on this node and "
                    "its capture keeps none of its headers (recorded before r3 kept them, or where the unit did not "
                    "preprocess: record again); %s" % (capture.compile_dir, errors.splitlines()[0])
                )
            raise CompileError("the source variant does not compile: %s" % errors)
        with open(out, "rb") as f:
            data = f.read()
    if cached:
        os.makedirs(cache, exist_ok=True)
        write_atomic(cached, data)
    return data


def compiler_errors(stderr, path, name, limit=6):
    """The compiler's error lines (with the scratch path shown as the unit's name): what a
    mutator gets back to repair its rewrite."""
    lines = [l.replace(path, name) for l in stderr.splitlines()]
    errors = [i for i, l in enumerate(lines) if " error: " in l or l.startswith("error:")]
    keep = []
    for i in errors[:limit]:
        keep.extend(lines[i : i + 3])  # the error, its source line and the caret
    return "\n".join(keep) or (lines[-1] if lines else "no diagnostic")
