"""Find a Spack installation: SPACK_ROOT, then ``spack`` on PATH, then ~/spack."""

import os
import shutil


def find_spack_root():
    """The root of a usable Spack, or None."""
    candidates = []
    if os.environ.get("SPACK_ROOT"):
        candidates.append(os.environ["SPACK_ROOT"])
    exe = shutil.which("spack")
    if exe:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(exe))))
    candidates.append(os.path.join(os.path.expanduser("~"), "spack"))
    for root in candidates:
        if os.access(os.path.join(root, "bin", "spack"), os.X_OK):
            return os.path.abspath(root)
    return None


def spack_executable(root=None):
    root = root or find_spack_root()
    return os.path.join(root, "bin", "spack") if root else None
