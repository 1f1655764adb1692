"""What a recorded run's build read from outside its own tree, by content: a record is
reused only while every such file still holds what it held.

    inputs = outside_inputs(record_dir, own=[run_dir])   # {absolute path: sha256}, in record.json
    why = changed(inputs)                                # "PATH changed" / "PATH is gone" / None

The tree's digest (``sourcetree``) keys a record on the tree it copied; a build also reads
files outside it: a header through ``CPPFLAGS=-I/elsewhere``, a unit compiled from
``/elsewhere/helper.c`` that a kernel calls into (its link unit), a dependency's headers
in a Spack install tree. Each unit the record build compiled through r3-record
(``record/tus/*/tu.json``) names its source file, and its headers are clang's own
dependency list of its compile command (``headers.closure``: the compiler's and the
system's are left out). Those outside ``own`` (the run's directory: its copy of the tree,
its record; for a Spack record, the sandbox's build stage, whose source Spack keys on the
spec's version) are kept with their SHA-256.
"""

import glob
import json
import os
from concurrent.futures import ThreadPoolExecutor

from ..fileutil import sha256_file
from . import headers

KEY = "inputs"  # record.json: {path: sha256}


def _under(path, dirs):
    return any(path == d or path.startswith(d.rstrip(os.sep) + os.sep) for d in dirs)


def _unit_flags(tu):
    """The flags the unit's bitcode was compiled with (as ``replay.source.unit_flags``)."""
    if tu.get("bitcode_args"):
        return list(tu["bitcode_args"])
    from .compileline import CompileLine

    return CompileLine(tu["compile_command"]).without(drop_sources=True, drop_output=True, drop_deps=True)


def unit_inputs(tu_dir):
    """The files the unit of ``tu_dir`` read: its source file and its headers (the list
    ingest kept in ``headers.json``, else clang's dependency list now); None when they
    cannot be listed (its compile command does not preprocess here)."""
    try:
        with open(os.path.join(tu_dir, "tu.json")) as f:
            tu = json.load(f)
        source, command, cwd = tu["source_file"], tu["compile_command"], tu["compile_dir"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        with open(os.path.join(tu_dir, "headers.json")) as f:
            listed = json.load(f)
    except (OSError, ValueError):
        try:
            listed = sorted(headers.closure(command[0], _unit_flags(tu), source, cwd))
        except (headers.ClosureError, OSError, IndexError):
            listed = None
    if listed is None:
        return None
    return [os.path.normpath(os.path.join(cwd, source))] + list(listed)


def outside_inputs(record_dir, own=()):
    """{path: sha256} of the files the run's units read that lie outside ``own`` (the
    run's own directories): what ``changed`` checks before the run is reused."""
    inside = sorted({os.path.realpath(d) for d in own} | {os.path.abspath(d) for d in own})
    tus = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(record_dir, "tus", "*", "tu.json")))
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
        listed = list(pool.map(unit_inputs, tus))
    out = {}
    for paths in listed:
        for path in paths or ():
            if path in out or _under(path, inside) or _under(os.path.realpath(path), inside):
                continue
            try:
                out[path] = sha256_file(path)
            except OSError:
                continue  # gone already (a temporary file of the build): nothing to compare
    return dict(sorted(out.items()))


def changed(inputs):
    """The first of ``inputs`` ({path: sha256}) that no longer holds what it held, in one
    phrase ("PATH changed", "PATH is gone"), or None when each still does."""
    for path, digest in sorted((inputs or {}).items()):
        try:
            now = sha256_file(path)
        except FileNotFoundError:
            return "%s is gone" % path
        except OSError as err:
            return "%s cannot be read (%s)" % (path, err.strerror or err)
        if now != digest:
            return "%s changed" % path
    return None


def capture_inputs(captures, own=()):
    """{path: sha256} of the headers outside ``own`` that ``captures`` name
    (``Capture.headers``): what a run recorded before record.json kept its inputs is
    checked on."""
    inside = sorted({os.path.realpath(d) for d in own} | {os.path.abspath(d) for d in own})
    out = {}
    for c in captures:
        for path, digest in sorted((c.headers or {}).items()):
            if not (_under(path, inside) or _under(os.path.realpath(path), inside)):
                out.setdefault(path, digest)
    return out
