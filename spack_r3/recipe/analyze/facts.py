"""What an analysis of a source tree finds (``Analysis`` and its parts), and the helpers
every build system's reader uses: reading files, walking the tree, names of variants,
the license, the description."""

import json
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional


SKIP_DIRS = {".git", ".hg", ".svn", "build", "_build", "spack-build", "node_modules", "__pycache__"}
BUILD_SYSTEMS = ("cmake", "meson", "autotools", "makefile", "python")


@dataclass
class RecipeVariant:
    """A variant of the recipe: one option of the build system (``data.Variant`` is a tuned one)."""

    name: str  # Spack variant name
    default: bool
    description: str
    option: str  # the build system's own name (CMake var, meson option, feature)
    kind: str  # cmake | meson | enable | with


@dataclass
class Dependency:
    name: str  # the project's name for it (ZLIB, r3tvec, m)
    kind: str  # cmake | pkgconfig | library | python | tool
    source: str  # where it was found, e.g. "CMakeLists.txt: find_package(ZLIB REQUIRED)"
    type: List[str] = field(default_factory=lambda: ["build", "link"])
    when: Optional[str] = None  # a Spack condition, e.g. "+zlib"
    required: bool = True
    spack: Optional[str] = None  # resolved Spack package (or virtual) name
    system: bool = False  # provided by libc / the compiler: no Spack dependency
    # other names the project looks for it by (find_library(... NAMES siloh5 silo)): the
    # first of name + alternatives that maps to a Spack package is the dependency
    alternatives: List[str] = field(default_factory=list)


@dataclass
class RecipeCheck:
    """A test command the build system declares (add_test, meson's test(), make check)."""

    exe: str
    args: List[str]
    source: str


@dataclass
class Analysis:
    name: str
    root: str
    build_system: str
    version: str
    languages: List[str] = field(default_factory=list)
    variants: List[RecipeVariant] = field(default_factory=list)
    dependencies: List[Dependency] = field(default_factory=list)
    license: Optional[str] = None
    description: str = ""
    homepage: Optional[str] = None
    executables: List[str] = field(default_factory=list)
    checks: List[RecipeCheck] = field(default_factory=list)
    build: Dict[str, object] = field(default_factory=dict)  # build-system specifics
    notes: List[str] = field(default_factory=list)

    def to_dict(self):
        d = asdict(self)
        for dep in d["dependencies"]:
            if not dep["alternatives"]:
                del dep["alternatives"]  # only where there are some
        return d

    def to_json(self):
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, d):
        d = dict(d)
        d["variants"] = [RecipeVariant(**v) for v in d.get("variants", [])]
        d["dependencies"] = [Dependency(**x) for x in d.get("dependencies", [])]
        d["checks"] = [RecipeCheck(**c) for c in d.get("checks", [])]
        return cls(**d)

    def spack_dependencies(self):
        """Resolved, non-system dependencies, one per (spack name, when)."""
        seen, out = set(), []
        for d in self.dependencies:
            if d.system or not d.spack:
                continue
            key = (d.spack, d.when)
            if key in seen:
                continue
            seen.add(key)
            out.append(d)
        return out

    def unresolved(self):
        return [d for d in self.dependencies if not d.system and not d.spack]


# -- helpers ------------------------------------------------------------------------------


def read_file(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def walk_tree(root, max_files=4000):
    n = 0
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("."))
        for f in sorted(files):
            n += 1
            if n > max_files:
                return
            yield os.path.join(d, f)


def strip_comments(text, marker="#"):
    return "\n".join(line.split(marker, 1)[0] if marker in line else line for line in text.splitlines())


def variant_name(option, prefixes=()):
    """``R3T_WITH_ZLIB`` -> ``zlib``; ``BUILD_SHARED_LIBS`` -> ``shared``."""
    if option == "BUILD_SHARED_LIBS":
        return "shared"
    name = option
    for p in prefixes:
        if p and name.upper().startswith(p.upper() + "_") and len(name) > len(p) + 1:
            name = name[len(p) + 1 :]
            break
    name = re.sub(r"^(WITH|ENABLE|USE|BUILD|DO|HAVE)_", "", name, flags=re.I)
    name = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").lower()
    if name in ("shared_libs", "shared_lib", "shared_libraries"):  # JANSSON_BUILD_SHARED_LIBS: Spack says shared
        return "shared"
    return name or option.lower()


def autoconf_configure(root):
    """Whether ``root/configure`` is Autoconf's (or takes its ``--prefix``): a hand-written one
    that wants the architecture as its argument (HPCG's ``configure Linux_Serial``) is not."""
    text = read_file(os.path.join(root, "configure"))[:200000]
    return bool(re.search(r"Generated by GNU Autoconf|--prefix", text))


def detect_build_system(root):
    has = lambda *names: any(os.path.isfile(os.path.join(root, n)) for n in names)  # noqa: E731
    if has("CMakeLists.txt"):
        return "cmake"
    if has("meson.build"):
        return "meson"
    if has("configure.ac", "configure.in") or (has("configure") and autoconf_configure(root)):
        return "autotools"
    if has("Makefile", "makefile", "GNUmakefile"):
        return "makefile"
    if has("pyproject.toml", "setup.py"):
        return "python"
    return None


LANG_EXT = {
    ".c": "c",
    ".cc": "cxx",
    ".cpp": "cxx",
    ".cxx": "cxx",
    ".C": "cxx",
    ".hpp": "cxx",
    ".f": "fortran",
    ".f90": "fortran",
    ".F90": "fortran",
    ".F": "fortran",
    ".f77": "fortran",
    ".cu": "cuda",
}


def languages_from_files(root):
    langs = set()
    for p in walk_tree(root):
        ext = os.path.splitext(p)[1]
        if ext in LANG_EXT:
            langs.add(LANG_EXT[ext])
    return [x for x in ("c", "cxx", "fortran") if x in langs]


def detect_license(root, hint=None):
    if hint:
        return hint
    for n in ("LICENSE", "LICENSE.txt", "LICENSE.md", "COPYING", "COPYING.txt", "LICENCE"):
        text = read_file(os.path.join(root, n))
        if not text:
            continue
        t = " ".join(text.split())
        if "Permission is hereby granted, free of charge" in t:
            return "MIT"
        if "Apache License" in t and "Version 2.0" in t:
            return "Apache-2.0"
        if "Redistribution and use in source and binary forms" in t:
            return "BSD-3-Clause" if "Neither the name" in t else "BSD-2-Clause"
        if "GNU LESSER GENERAL PUBLIC LICENSE" in t:
            return "LGPL-3.0-or-later" if "Version 3" in t else "LGPL-2.1-or-later"
        if "GNU GENERAL PUBLIC LICENSE" in t:
            return "GPL-3.0-or-later" if "Version 3" in t else "GPL-2.0-or-later"
        if "Mozilla Public License" in t:
            return "MPL-2.0"
    for p in walk_tree(root, max_files=200):
        m = re.search(r"SPDX-License-Identifier:\s*([\w.+-]+(?:\s+(?:OR|AND)\s+[\w.+-]+)*)", read_file(p)[:2000])
        if m:
            return m.group(1)
    return None


def detect_description(root, name):
    for n in ("README.md", "README", "README.rst", "README.txt"):
        text = read_file(os.path.join(root, n))
        if not text:
            continue
        para = []
        for line in text.splitlines():
            s = line.strip()
            if not s:
                if para and not (len(para) == 1 and para[0].lower() == name.lower()):
                    break
                para = []
                continue
            if s.startswith(("#", "=", "-", "[!", "<", "![")) or re.match(r"^[=~^-]{3,}$", s):
                if para:
                    break
                continue
            para.append(s)
        if para and not (len(para) == 1 and para[0].lower() == name.lower()):
            desc = " ".join(para)
            return desc[:300].rstrip()
    return "%s, packaged from its source tree by spack-r3." % name


SYSTEM_LIBS = {"m", "c", "dl", "pthread", "rt", "util", "stdc++", "gcc", "gomp", "omp"}
# an option that builds the project's tests (UTF8PROC_ENABLE_TESTING, JANSSON_WITHOUT_TESTS)
TEST_OPTION_RE = re.compile(r"(^|_)(BUILD_|ENABLE_|WITH_|WITHOUT_|DO_)?(TESTS?|TESTING|UNIT_?TESTS?)$")
RESERVED_VARIANTS = {
    "build_type",
    "generator",
    "ipo",
    "build_system",
    "patches",
    "dev_path",
    "buildtype",
    "default_library",
    "arch",
    "os",
    "target",
    "platform",
    # compiler flag names: "+ldflags" is not a variant to Spack (mxml's --with-ldflags)
    "cflags",
    "cxxflags",
    "fflags",
    "cppflags",
    "ldflags",
    "ldlibs",
}
