"""Find the clang that record builds need (bitcode before optimization)."""

import os
import re
import shutil
import subprocess
from functools import lru_cache

from .errors import ToolchainError

MIN_CLANG = 15
# Newest first: the newest clang usually matches llvmlite's LLVM best.
CANDIDATES = ["clang"] + ["clang-%d" % v for v in range(22, MIN_CLANG - 1, -1)]


def clang_version(path):
    """Major version of the clang at ``path``, or None if it is not clang."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"clang version (\d+)", out)
    return int(m.group(1)) if m else None


@lru_cache(maxsize=None)
def find_clang():
    """Absolute path of a clang >= MIN_CLANG: ``R3_CLANG`` first, then PATH."""
    explicit = os.environ.get("R3_CLANG")
    names = [explicit] if explicit else CANDIDATES
    seen = []
    for name in names:
        path = shutil.which(name)
        if not path:
            continue
        version = clang_version(path)
        seen.append("%s (%s)" % (path, version))
        if version and version >= MIN_CLANG:
            return path
    hint = "set R3_CLANG or install it (Debian: apt-get install clang-19 libomp-19-dev)"
    if explicit:
        raise ToolchainError("R3_CLANG=%s is not a clang >= %d; %s" % (explicit, MIN_CLANG, hint))
    found = ("; found only " + ", ".join(seen)) if seen else ""
    raise ToolchainError("no clang >= %d found for recording%s; %s" % (MIN_CLANG, found, hint))


def clang_libdir(clang):
    """The LLVM library directory of ``clang`` (where its libomp.so lives)."""
    out = subprocess.run([clang, "-print-resource-dir"], capture_output=True, text=True).stdout.strip()
    # resource dir is <prefix>/lib/clang/<ver>
    return os.path.normpath(os.path.join(out, "..", ".."))


def find_libomp(clang=None):
    """Path of the LLVM OpenMP runtime matching ``clang``, or None."""
    dirs = []
    if os.environ.get("R3_LIBOMP"):
        return os.environ["R3_LIBOMP"]
    try:
        dirs.append(clang_libdir(clang or find_clang()))
    except ToolchainError:
        pass
    dirs += ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib"]
    for d in dirs:
        for name in ("libomp.so", "libomp.so.5"):
            p = os.path.join(d, name)
            if os.path.exists(p):
                return p
    return None
