"""Specs with ``dev_path=DIR`` (``spack develop``): each r3 build gets its own copy of DIR.

Spack builds a develop spec in place and incrementally. An r3 build there would write its
objects into the user's tree, and, finding the user's objects up to date, compile nothing
through the record or apply launcher: XSBench built with ``dev_path`` ran without the
record runtime (its ``.o`` files were from an earlier plain build). So every build r3 makes
of such a spec builds a copy of DIR without build outputs, and DIR is only read.
"""

import os
import re
import shutil

from .. import sourcetree
from ..errors import R3Error

_DEV_PATH = re.compile(r"(?<![\w-])dev_path=(\"[^\"]*\"|'[^']*'|\S+)")

# What a build leaves in a source tree: objects, libraries, Fortran modules, precompiled
# headers, and the build directories and logs Spack puts there (0.x ``spack-build-<hash>``,
# 1.x ``build-<arch>-<hash>``).
OUTPUT_SUFFIXES = (".o", ".obj", ".a", ".so", ".lo", ".la", ".mod", ".smod", ".gch", ".pch", ".pcm", ".pyc")
_SPACK_BUILD_DIR = re.compile(r"^(spack-build-[a-z0-9]{7}|build-.+-[a-z0-9]{7})$")


def dev_path(spec):
    """The directory a spec's ``dev_path`` names, or None."""
    m = _DEV_PATH.search(spec or "")
    return m.group(1).strip("\"'") if m else None


def _ignored(directory, names):
    out = []
    for name in names:
        path = os.path.join(directory, name)
        if name.endswith(OUTPUT_SUFFIXES) and not os.path.isdir(path):
            out.append(name)
        elif name.startswith(("spack-build-", ".spack")) or _SPACK_BUILD_DIR.match(name):  # 1.x: a link
            out.append(name)
    return out


def tree_digest(spec):
    """The content digest of a spec's ``dev_path`` tree as its builds copy it, or None."""
    src = dev_path(spec)
    return sourcetree.digest(os.path.abspath(os.path.expanduser(src)), _ignored) if src else None


def private_copy(spec, dest):
    """(spec, copy): ``spec`` with its ``dev_path`` pointed at a fresh copy of that tree in
    ``dest`` (build outputs left out), or (spec, None) for a spec without one."""
    src = dev_path(spec)
    if not src:
        return spec, None
    src = os.path.abspath(os.path.expanduser(src))
    if not os.path.isdir(src):
        raise R3Error("dev_path=%s is not a directory" % src)
    shutil.rmtree(dest, ignore_errors=True)
    try:
        sourcetree.copy(src, dest, ignore=_ignored)
    except OSError as err:
        raise R3Error("cannot copy dev_path=%s to %s: %s" % (src, dest, err))
    return _DEV_PATH.sub(lambda m: "dev_path=" + dest, spec, count=1), dest
