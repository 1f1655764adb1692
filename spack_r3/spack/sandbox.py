"""A self-contained Spack configuration scope for isolated runs (tests, benchmarks).

Everything Spack writes goes under one directory: install tree, source cache, build stage,
test stage and the misc cache (seeded from the user's, so package indexes need not be
rebuilt). The tools a build needs come from the system as non-buildable externals, so no
download is ever attempted: cmake, gmake, ninja, meson, pkgconf, and zlib when its headers
are installed. The user's configuration (compilers) is still read; nothing is written to it.
"""

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Dict

from .repos import write_scope


@dataclass
class Sandbox:
    root: str
    scope: str
    install_root: str
    externals: Dict[str, str] = field(default_factory=dict)  # name -> "spec@version prefix"


def _version(cmd, pattern=r"(\d+\.\d+(?:\.\d+)?)"):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(pattern, out)
    return m.group(1) if m else None


def find_externals(extra_bin_dirs=()) -> Dict[str, dict]:
    """System tools Spack can use as externals: {package: {"spec": ..., "prefix": ...}}."""
    found = {}
    path = os.pathsep.join(list(extra_bin_dirs) + [os.environ.get("PATH", "")])

    def which(exe):
        p = shutil.which(exe, path=path)
        return (os.path.dirname(os.path.dirname(p)), p) if p else (None, None)

    for pkg, exe, args in (
        ("cmake", "cmake", ["--version"]),
        ("gmake", "make", ["--version"]),
        ("ninja", "ninja", ["--version"]),
        ("meson", "meson", ["--version"]),
        ("pkgconf", "pkgconf", ["--version"]),
        # the autotools a recipe regenerating configure depends on
        ("autoconf", "autoconf", ["--version"]),
        ("automake", "automake", ["--version"]),
        ("libtool", "libtoolize", ["--version"]),
        ("m4", "m4", ["--version"]),
    ):
        prefix, p = which(exe)
        if not p and pkg == "pkgconf":
            prefix, p = which("pkg-config")
        if not p:
            continue
        v = _version([p] + args)
        if v:
            found[pkg] = {"spec": "%s@%s" % (pkg, v), "prefix": prefix}
    if "meson" in found:
        # Spack gives an external Python package (meson) the python of its prefix; declare
        # that python, or Spack 0.2x fails with "Spec version is not concrete: python@..."
        py = os.path.join(found["meson"]["prefix"], "bin", "python3")
        v = _version([py, "--version"]) if os.path.exists(py) else None
        if v:
            found["python"] = {"spec": "python@%s" % v, "prefix": found["meson"]["prefix"]}
    for inc in ("/usr/include/zlib.h",):
        if os.path.isfile(inc):
            with open(inc, errors="replace") as f:
                m = re.search(r'#define ZLIB_VERSION "([\d.]+)', f.read())
            if m:
                found["zlib"] = {"spec": "zlib@%s" % m.group(1), "prefix": "/usr"}
    return found


def make_sandbox(root, repos=(), extra_bin_dirs=(), seed_cache=True, scope_name="scope") -> Sandbox:
    """Create (or reuse) the sandbox at ``root``; returns its scope directory for ``spack -C``.
    Scopes of other names (other repository lists) share its install tree and caches."""
    root = os.path.abspath(root)
    scope = os.path.join(root, scope_name)
    misc = os.path.join(root, "misc-cache")
    user_cache = os.path.join(
        os.environ.get("SPACK_USER_CACHE_PATH") or os.path.join(os.path.expanduser("~"), ".spack"), "cache"
    )
    if seed_cache and not os.path.isdir(misc) and os.path.isdir(user_cache):
        shutil.copytree(user_cache, misc, ignore=shutil.ignore_patterns("*.lock"))
    externals = find_externals(extra_bin_dirs)
    packages = {}
    for pkg, ext in externals.items():
        packages[pkg] = {"externals": [ext], "buildable": False}
    if "pkgconf" in externals:
        packages["pkgconfig"] = {"require": "pkgconf"}
    if "zlib" in externals:
        packages["zlib-api"] = {"require": "zlib"}
    config = {
        "install_tree": {"root": os.path.join(root, "opt")},
        "source_cache": os.path.join(root, "source-cache"),
        "misc_cache": misc,
        "build_stage": [os.path.join(root, "stage")],
        "test_stage": os.path.join(root, "test-stage"),
        "build_jobs": 2,
    }
    extra = {"mirrors.yaml": {"mirrors:": {}}}
    write_scope(scope, repos=repos, config=config, packages=packages, extra=extra)
    return Sandbox(
        root,
        scope,
        config["install_tree"]["root"],
        {k: "%s %s" % (v["spec"], v["prefix"]) for k, v in externals.items()},
    )
