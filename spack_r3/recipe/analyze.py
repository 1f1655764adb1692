"""Analyze a source tree: build system, version, variants, dependencies, languages, license.

Pure file reading: nothing here builds or runs anything from the tree. Dependency names are
the project's own (``find_package(ZLIB)``, ``pkg_check_modules(... r3tvec)``, ``-lm``);
``names.resolve`` maps them to Spack package names afterwards.
"""

import json
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

from ..errors import R3Error

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


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _walk(root, max_files=4000):
    n = 0
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("."))
        for f in sorted(files):
            n += 1
            if n > max_files:
                return
            yield os.path.join(d, f)


def _strip_comments(text, marker="#"):
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


def detect_build_system(root):
    has = lambda *names: any(os.path.isfile(os.path.join(root, n)) for n in names)  # noqa: E731
    if has("CMakeLists.txt"):
        return "cmake"
    if has("meson.build"):
        return "meson"
    if has("configure", "configure.ac", "configure.in"):
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


def _languages_from_files(root):
    langs = set()
    for p in _walk(root):
        ext = os.path.splitext(p)[1]
        if ext in LANG_EXT:
            langs.add(LANG_EXT[ext])
    return [x for x in ("c", "cxx", "fortran") if x in langs]


def detect_license(root, hint=None):
    if hint:
        return hint
    for n in ("LICENSE", "LICENSE.txt", "LICENSE.md", "COPYING", "COPYING.txt", "LICENCE"):
        text = _read(os.path.join(root, n))
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
    for p in _walk(root, max_files=200):
        m = re.search(r"SPDX-License-Identifier:\s*([\w.+-]+(?:\s+(?:OR|AND)\s+[\w.+-]+)*)", _read(p)[:2000])
        if m:
            return m.group(1)
    return None


def detect_description(root, name):
    for n in ("README.md", "README", "README.rst", "README.txt"):
        text = _read(os.path.join(root, n))
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


# -- CMake --------------------------------------------------------------------------------

CMAKE_CMD_RE = re.compile(r"(?m)^[ \t]*([A-Za-z_]\w*)[ \t]*\(((?:[^()]|\([^()]*\))*)\)")


def _cmake_commands(text):
    text = re.sub(r"#\[\[.*?\]\]", "", text, flags=re.S)
    text = "\n".join(re.sub(r"(?<![\"\\])#.*$", "", line) for line in text.splitlines())
    for m in CMAKE_CMD_RE.finditer(text):
        yield m.group(1).lower(), m.group(2), m.group(0)


def _cmake_args(argtext):
    return re.findall(r'"[^"]*"|[^\s"]+', argtext)


def _unq(s):
    return s[1:-1] if len(s) >= 2 and s[0] == s[-1] == '"' else s


def analyze_cmake(a: Analysis):
    files = [p for p in _walk(a.root) if os.path.basename(p) == "CMakeLists.txt" or p.endswith(".cmake")]
    files.sort(key=lambda p: (p.count(os.sep), p))
    texts = {path: _read(path) for path in files}
    # options first, so that an if() sees an option declared in a file read later (include())
    options, cmake_vars = {}, {}
    for path in files:
        # options only the project's tests or a bundled project read (zfp's
        # ZFP_BUILD_TESTING_SMALL in tests/, googletest's INSTALL_GTEST under if(BUILD_TESTING))
        # are no variants
        in_tests = bool(re.search(TEST_DIRS, os.path.relpath(path, a.root)))
        blocks = []
        for cmd, argtext, _whole in _cmake_commands(texts[path]):
            args = [_unq(x) for x in _cmake_args(argtext)]
            if cmd == "if":
                blocks.append(any(TEST_OPTION_RE.search(x) for x in args))
            elif cmd == "endif" and blocks:
                blocks.pop()
            if cmd in ("option", "cmake_dependent_option") and len(args) >= 2:
                if in_tests or any(blocks):
                    continue
                default = len(args) > 2 and args[2].upper() in ("ON", "TRUE", "1", "YES")
                options[args[0]] = (args[1], default)
            elif cmd == "set" and len(args) >= 2 and args[0] not in cmake_vars:
                # set(X "" CACHE STRING "doc"): the value stops at CACHE (zfp's library prefix
                # was "STRING Prefix to prepend...", its OUTPUT_NAME then no file name)
                value = args[1 : args.index("CACHE")] if "CACHE" in args else args[1:]
                cmake_vars[args[0]] = " ".join(x for x in value if x != "PARENT_SCOPE")
    project_prefix = None
    dir_conds = {}  # directory -> option literals under which its add_subdirectory() was reached
    exe_conditional = {}  # program -> option literals it is built under
    output_names = {}
    langs = None
    exes, tests = [], []
    bindings = {}  # option -> the language of the binding it builds
    found_in_module = []  # (dependency, N) of find_library/find_path in a FindN.cmake module
    for path in files:
        rel = os.path.relpath(path, a.root)
        module = re.match(r"^Find(.+)\.cmake$", os.path.basename(path))
        # one entry per open if() block: [condition of the branch we are in, negations of the
        # conditions of the branches before it (None: not expressible)]; a condition is a list
        # of option literals ("WITH_X", "~WITH_X") that all hold in the branch
        # what holds wherever this file is read: the conditions of the add_subdirectory()
        # calls that lead to its directory (a subproject behind an option)
        here, base = os.path.dirname(path), []
        while True:
            base = dir_conds.get(here, []) + base
            if here == a.root or os.path.dirname(here) == here:
                break
            here = os.path.dirname(here)
        conds = [[list(dict.fromkeys(base)), None]] if base else []
        for cmd, argtext, whole in _cmake_commands(texts[path]):
            args = [_unq(x) for x in _cmake_args(argtext)]
            if cmd == "project" and args and project_prefix is None:
                project_prefix = re.sub(r"\W", "_", args[0]).upper()
                cmake_vars.setdefault("PROJECT_NAME", args[0])
                cmake_vars.setdefault("CMAKE_PROJECT_NAME", args[0])
                if "VERSION" in args and args.index("VERSION") + 1 < len(args):
                    a.version = _cmake_expand(args[args.index("VERSION") + 1], cmake_vars)
                if "HOMEPAGE_URL" in args:
                    a.homepage = args[args.index("HOMEPAGE_URL") + 1]
                if "DESCRIPTION" in args:
                    a.description = args[args.index("DESCRIPTION") + 1]
                if "LANGUAGES" in args:
                    langs = [x for x in args[args.index("LANGUAGES") + 1 :] if x.isupper()]
                elif len(args) > 1 and all(x in ("C", "CXX", "Fortran", "CUDA") for x in args[1:]):
                    langs = args[1:]
            elif cmd == "cmake_minimum_required" and "VERSION" in args and "cmake_minimum" not in a.build:
                v = args[args.index("VERSION") + 1] if args.index("VERSION") + 1 < len(args) else ""
                m = re.match(r"^(\d+\.\d+)", v)
                if m:
                    a.build["cmake_minimum"] = m.group(1)  # depends_on("cmake@3.18:", type="build")
            elif cmd == "enable_language" and args and not _cmake_when(conds, options, project_prefix):
                langs = (langs or []) + [args[0]]  # one behind an option is that option's (zfp's Fortran)
            elif cmd == "add_subdirectory" and args:
                sub = os.path.normpath(os.path.join(os.path.dirname(path), _cmake_expand(args[0], cmake_vars)))
                lits = [x for cond, _neg in conds for x in cond]
                dir_conds[sub] = lits
                sub_text = texts.get(os.path.join(sub, "CMakeLists.txt"), "")
                if len(lits) == 1 and not lits[0].startswith("~") and sub_text:
                    # a binding in another language behind its own option: named for the
                    # language, as Spack's recipes name them (zfp's BUILD_ZFORP, BUILD_ZFPY)
                    if re.search(r"enable_language\s*\(\s*Fortran|project\s*\([^)]*\bFortran\b", sub_text, re.I):
                        bindings.setdefault(lits[0], "fortran")
                    elif re.search(r"find_package\s*\(\s*(Python\w*|PythonLibs|PythonInterp)\b", sub_text):
                        bindings.setdefault(lits[0], "python")
                if not os.path.isdir(sub) or not os.listdir(sub):
                    # a git submodule the tarball lacks: the option that reads it must be off
                    a.build.setdefault("missing_subdirs", []).append([os.path.relpath(sub, a.root), lits])
            elif cmd == "if":
                lits, exact = _cmake_condition(args, options)
                conds.append([lits, _negation(lits, exact, [])])
            elif cmd in ("elseif", "else"):
                if conds:
                    before = conds[-1][1]  # what holds once the branches so far were not taken
                    if cmd == "else":
                        conds[-1] = [list(before or []), None]
                    else:
                        lits, exact = _cmake_condition(args, options)
                        conds[-1] = [list(before or []) + lits, _negation(lits, exact, before)]
            elif cmd == "endif":
                if conds:
                    conds.pop()
            elif cmd in ("find_library", "find_path") and len(args) >= 2:
                found = _cmake_find_names(args, cmd)
                if found:
                    kind = "library" if cmd == "find_library" else "header"
                    dep = Dependency(
                        found[0],
                        kind,
                        "%s: %s" % (rel, " ".join(whole.split())),
                        ["build", "link"],
                        _cmake_when(conds, options, project_prefix),
                        "REQUIRED" in args,
                        system=kind == "library" and found[0] in SYSTEM_LIBS,
                        alternatives=found[1:],
                    )
                    if module:
                        found_in_module.append((dep, module.group(1)))
                    else:
                        a.dependencies.append(dep)
            elif cmd == "find_package" and args and "@" not in args[0]:  # not a *.cmake.in template's
                args[0] = _cmake_expand(args[0], cmake_vars)
                when = _cmake_when(conds, options, project_prefix)
                required = "REQUIRED" in args
                kind = "tool" if args[0] in CMAKE_TOOLS else "cmake"
                dep = Dependency(
                    args[0],
                    kind,
                    "%s: %s" % (rel, " ".join(whole.split())),
                    ["build"] if kind == "tool" else ["build", "link"],
                    when,
                    required,
                )
                comps = args[args.index("COMPONENTS") + 1 :] if "COMPONENTS" in args else []
                if comps:
                    dep.source += ""
                a.dependencies.append(dep)
            elif cmd in ("pkg_check_modules", "pkg_search_module") and len(args) >= 2:
                when = _cmake_when(conds, options, project_prefix)
                required = "REQUIRED" in args
                for mod in args[1:]:
                    if mod in (
                        "REQUIRED",
                        "QUIET",
                        "IMPORTED_TARGET",
                        "GLOBAL",
                        "NO_CMAKE_PATH",
                        "NO_CMAKE_ENVIRONMENT_PATH",
                    ):
                        continue
                    mod = re.split(r"[<>=]", mod)[0]
                    a.dependencies.append(
                        Dependency(
                            mod,
                            "pkgconfig",
                            "%s: %s" % (rel, " ".join(whole.split())),
                            ["build", "link"],
                            when,
                            required,
                        )
                    )
            elif cmd == "add_executable" and args and "IMPORTED" not in args and "ALIAS" not in args:
                exes.append(_cmake_expand(args[0], cmake_vars))
                lits = [x for cond, _neg in conds for x in cond]
                if lits:
                    exe_conditional[exes[-1]] = lits  # an example or tool behind an option
            elif cmd in ("set_target_properties", "set_property") and "OUTPUT_NAME" in args:
                # the file a target makes: zfp's program target zfpcmd is installed as bin/zfp
                i = args.index("OUTPUT_NAME")
                targets = (
                    args[1 : args.index("PROPERTY")]
                    if cmd == "set_property" and "PROPERTY" in args
                    else args[: args.index("PROPERTIES")]
                    if "PROPERTIES" in args
                    else []
                )
                for t in targets:
                    if i + 1 < len(args):
                        output_names[_cmake_expand(t, cmake_vars)] = _cmake_expand(args[i + 1], cmake_vars)
            elif cmd == "add_library" and args:
                lib = _cmake_expand(args[0], cmake_vars)
                if "$" in lib:  # named in a loop (iniparser's ${PROJECT_NAME}-${TARGET_TYPE}): the project's name
                    lib = cmake_vars.get("PROJECT_NAME", lib)
                a.build.setdefault("own_names", []).append(lib)
                if not set(args[1:2]) & {"STATIC", "SHARED", "MODULE", "OBJECT", "INTERFACE", "IMPORTED", "ALIAS"}:
                    a.build["shared_by_default"] = True  # BUILD_SHARED_LIBS decides
            elif cmd == "install":
                a.build["has_install"] = True
                if args and args[0] == "TARGETS":
                    for t in args[1:]:
                        if re.fullmatch(r"[A-Z_]+", t):  # EXPORT, RUNTIME... ("${PROJECT_NAME}" is a target)
                            break
                        a.build.setdefault("installed", []).append(_cmake_expand(t, cmake_vars))
            elif cmd == "add_test" and args:
                if args[0] == "NAME" and "COMMAND" in args:
                    i = args.index("COMMAND")
                    cmdline = args[i + 1 :]
                else:
                    cmdline = args[1:]
                if cmdline:
                    tests.append(
                        RecipeCheck(
                            cmdline[0],
                            [x for x in cmdline[1:] if not x.startswith("$<")],
                            "%s: %s" % (rel, " ".join(whole.split())),
                        )
                    )
            elif cmd == "target_link_libraries" and len(args) >= 2:
                for lib in args[1:]:
                    if lib in ("PUBLIC", "PRIVATE", "INTERFACE") or "::" in lib or "$" in lib:
                        continue
                    if lib in ("m", "dl", "pthread", "rt"):
                        a.dependencies.append(
                            Dependency(lib, "library", "%s: %s" % (rel, " ".join(whole.split())), system=True)
                        )
    _module_dependencies(a, found_in_module)
    if langs is None:
        langs = ["C", "CXX"]
    lang_map = {"C": "c", "CXX": "cxx", "Fortran": "fortran", "CUDA": "cuda"}
    a.languages = list(dict.fromkeys(lang_map[x] for x in langs if x in lang_map and x != "CUDA"))
    prefixes = [project_prefix] if project_prefix else []
    # common prefix of options (e.g. R3T_) counts as the project's prefix too
    opt_names = [o for o in options if o not in ("BUILD_SHARED_LIBS", "BUILD_TESTING")]
    if len(opt_names) >= 2:
        common = os.path.commonprefix(opt_names)
        if "_" in common:
            prefixes.insert(0, common[: common.rindex("_")])
    elif len(opt_names) == 1 and "_" in opt_names[0]:
        first = opt_names[0].split("_")[0]
        if project_prefix and (project_prefix.startswith(first) or first.startswith(project_prefix[:3])):
            prefixes.insert(0, first)
    a.build["cmake_prefixes"] = prefixes
    used = set()
    for opt, (desc, default) in options.items():
        if opt == "BUILD_TESTING":
            continue
        if TEST_OPTION_RE.search(opt):
            # the project's own tests: built when Spack runs them (`spack install --test=root`
            # runs ctest), as Spack's recipes write it, not a variant
            a.build.setdefault("test_options", []).append([opt, bool(re.search(r"WITHOUT|NO_|DISABLE", opt))])
            continue
        name = variant_name(opt, prefixes)
        if bindings.get(opt) and bindings[opt] not in options and list(bindings.values()).count(bindings[opt]) == 1:
            name = bindings[opt]
        while name in used or name in RESERVED_VARIANTS:
            name = name + "_opt"
        used.add(name)
        a.variants.append(RecipeVariant(name, default, desc or opt, opt, "cmake"))
    # dependency conditions were recorded with option names; map to variant names
    vmap = {v.option: v.name for v in a.variants}
    # what only the project's tests need (utf8proc's test/app finds utf8proc itself) is no
    # dependency of the package: those options are Spack's run_tests, not variants
    tests_on = {("~" if neg else "") + opt for opt, neg in a.build.get("test_options", [])}
    a.dependencies = [d for d in a.dependencies if not (set((d.when or "").split()) & tests_on)]
    for d in a.dependencies:
        if d.when:
            parts = []
            for lit in d.when.split():
                opt = lit.lstrip("~")
                if opt in vmap:
                    parts.append(("~" if lit.startswith("~") else "+") + vmap[opt])
            d.when = "".join(dict.fromkeys(parts)) or None
    _cmake_optional_packages(a)
    if (
        a.build.get("shared_by_default")
        and "BUILD_SHARED_LIBS" not in options
        and not any(v.name == "shared" for v in a.variants)  # JANSSON_BUILD_SHARED_LIBS says it
    ):
        # a library whose kind BUILD_SHARED_LIBS decides: the variant Spack's recipes give it
        a.variants.append(RecipeVariant("shared", True, "Build shared libraries", "BUILD_SHARED_LIBS", "cmake"))
    for sub, lits in a.build.get("missing_subdirs", []):
        on = [vmap[x] for x in lits if not x.startswith("~") and x in vmap]
        for v in a.variants:
            if on and v.name == on[-1] and v.default:
                v.default = False
                a.notes.append(
                    "%s is missing from the tree (a git submodule?): variant %s defaults off" % (sub, v.name)
                )
    a.build.setdefault("has_install", False)
    installed = a.build.get("installed")
    # a program counts where it is installed and built with the options' defaults
    defaults = {v.option: v.default for v in a.variants}

    def built(e):
        return all(defaults.get(x.lstrip("~"), False) != x.startswith("~") for x in exe_conditional.get(e, []))

    a.executables = [output_names.get(e, e) for e in exes if built(e) and (installed is None or e in installed)]
    # the targets by their CMake names too: find_package(utf8proc) of the project's own test app
    # is no dependency, even where the file is libutf8proc_static (OUTPUT_NAME)
    a.build["own_targets"] = [x for x in a.build.get("own_names", []) if output_names.get(x, x) != x]
    a.build["own_names"] = [output_names.get(x, x) for x in a.build.get("own_names", [])]
    a.checks = [c for c in tests if c.exe in a.executables]


def _cmake_expand(text, cmake_vars, depth=0):
    """``${VAR}`` replaced by what ``set(VAR ...)`` gave it (unknown ones kept)."""
    if depth > 5 or "${" not in text:
        return text
    out = re.sub(r"\$\{(\w+)\}", lambda m: cmake_vars.get(m.group(1), m.group(0)), text)
    return _cmake_expand(out, cmake_vars, depth + 1) if out != text else out


# find_package() names that are a feature of the build rather than a library: a variant with no
# dependency when optional (the compiler has OpenMP; Threads is libc's)
FEATURE_PACKAGES = {"OpenMP": "openmp", "Threads": None}
DOC_TOOLS = {"Doxygen", "Sphinx", "LATEX", "LaTeX", "Pandoc", "Asciidoctor"}


def _cmake_optional_packages(a):
    """A ``find_package(X)`` without REQUIRED and outside any option is an optional dependency
    the project builds without: a variant (off, or on for OpenMP), with the dependency behind
    it and ``CMAKE_DISABLE_FIND_PACKAGE_X`` when off, as Spack's recipes write it."""
    names = {v.name for v in a.variants}
    for d in a.dependencies:
        if d.required or d.when or d.kind not in ("cmake", "tool") or d.name in ("PkgConfig", "Git"):
            continue
        if d.name in FEATURE_PACKAGES and FEATURE_PACKAGES[d.name] is None:
            continue
        name = FEATURE_PACKAGES.get(d.name) or (
            "docs" if d.name in DOC_TOOLS else re.sub(r"\d+$", "", variant_name(d.name)) or variant_name(d.name)
        )
        if name == "pythoninterp" or name == "pythonlibs":
            name = "python"
        if name not in names:
            names.add(name)
            a.variants.append(
                RecipeVariant(name, d.name == "OpenMP", "Build with %s (optional)" % d.name, d.name, "cmake-find")
            )
        d.when = "+" + name


# an option that builds the project's tests (UTF8PROC_ENABLE_TESTING, JANSSON_WITHOUT_TESTS)
TEST_OPTION_RE = re.compile(r"(^|_)(BUILD_|ENABLE_|WITH_|WITHOUT_|DO_)?(TESTS?|TESTING|UNIT_?TESTS?)$")
# directories of the project's tests and of projects it bundles
TEST_DIRS = r"(^|/)(tests?|testing|unittests?|third.?party|extern(al)?|vendor|deps|googletest|gtest)/"

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
CMAKE_TOOLS = {"PkgConfig", "Git", "Doxygen", "Python", "Python3", "PythonInterp", "Perl", "BISON", "FLEX", "SWIG"}


# the keywords of find_library / find_path after the result variable
CMAKE_FIND_KEYWORDS = {
    "NAMES",
    "NAMES_PER_DIR",
    "HINTS",
    "PATHS",
    "PATH_SUFFIXES",
    "DOC",
    "REQUIRED",
    "OPTIONAL",
    "NO_CACHE",
    "VALIDATOR",
    "REGISTRY_VIEW",
    "ENV",
    "NO_DEFAULT_PATH",
    "NO_PACKAGE_ROOT_PATH",
    "NO_CMAKE_PATH",
    "NO_CMAKE_ENVIRONMENT_PATH",
    "NO_SYSTEM_ENVIRONMENT_PATH",
    "NO_CMAKE_SYSTEM_PATH",
    "NO_CMAKE_INSTALL_PREFIX",
    "CMAKE_FIND_ROOT_PATH_BOTH",
    "ONLY_CMAKE_FIND_ROOT_PATH",
    "NO_CMAKE_FIND_ROOT_PATH",
}


def _cmake_find_names(args, cmd):
    """The names a ``find_library(VAR NAMES a b ...)`` / ``find_path(VAR x.h ...)`` looks for,
    in order (a library without ``lib`` prefix or file suffix); variables left out."""
    if "NAMES" in args:
        names = []
        for x in args[args.index("NAMES") + 1 :]:
            if x in CMAKE_FIND_KEYWORDS:
                break
            names.append(x)
    else:
        names = [args[1]] if args[1] not in CMAKE_FIND_KEYWORDS else []
    out = []
    for n in names:
        if not n or "$" in n or "<" in n:
            continue
        if cmd == "find_library":
            n = re.sub(r"\.(a|lib|dll|dylib|so(\.\d+)*)$", "", n)
            n = n[3:] if n.startswith("lib") and len(n) > 3 else n
        if n and n not in out:
            out.append(n)
    return out


def _cmake_condition(args, options):
    """(literals, exact) of an ``if()``/``elseif()`` condition: the options that must be on
    (``"WITH_X"``) or off (``"~WITH_X"``) in the branch; ``exact`` when that is all it says.
    ``X``, ``${X}``, ``NOT X`` and ``AND`` of those are understood; anything else (``OR``,
    parentheses, comparisons, platform checks) adds no literal."""
    if not args or "OR" in args or any("(" in x or ")" in x for x in args):
        return [], False
    lits, exact, part = [], True, []
    for tok in args + ["AND"]:
        if tok != "AND":
            part.append(tok)
            continue
        neg = len(part) == 2 and part[0] == "NOT"
        name = part[-1] if len(part) == (2 if neg else 1) else None
        if name:
            m = re.match(r"^\$\{(\w+)\}$", name)
            name = m.group(1) if m else name
        if name in options:
            lits.append(("~" if neg else "") + name)
        else:
            exact = False
        part = []
    return lits, exact


def _negation(lits, exact, before):
    """What holds after a branch with condition ``lits`` was not taken (given ``before``, what
    held before it), as literals, or None when that is not a plain list of options."""
    if before is None or not exact or len(lits) != 1:
        return None
    lit = lits[0]
    return list(before) + [lit[1:] if lit.startswith("~") else "~" + lit]


def _module_dependencies(a, found_in_module):
    """What a FindN.cmake module of the project looks for is needed where ``find_package(N)``
    is called: once per condition of those calls; not at all if nothing calls it."""
    for dep, module in found_in_module:
        whens = [d.when for d in a.dependencies if d.kind in ("cmake", "tool") and d.name.lower() == module.lower()]
        if None in whens:
            whens = [None]
        for when in dict.fromkeys(whens):
            lits = ((when or "") + " " + (dep.when or "")).split()
            a.dependencies.append(
                Dependency(
                    dep.name,
                    dep.kind,
                    dep.source,
                    list(dep.type),
                    " ".join(dict.fromkeys(lits)) or None,
                    dep.required,
                    system=dep.system,
                    alternatives=list(dep.alternatives),
                )
            )


def _cmake_when(conds, options, prefix):
    """The options guarding the current block, outermost first, as one string of literals
    (``"WITH_X ~WITH_Y"``); mapped to a Spack condition (``+x~y``) once variants are named."""
    lits = [lit for cond, _neg in conds for lit in cond]
    return " ".join(dict.fromkeys(lits)) or None


# -- Meson --------------------------------------------------------------------------------


def _meson_kwarg(text, key):
    m = re.search(r"\b%s\s*:\s*('([^']*)'|\[([^\]]*)\]|(true|false))" % key, text)
    if not m:
        return None
    if m.group(2) is not None:
        return m.group(2)
    if m.group(3) is not None:
        return re.findall(r"'([^']*)'", m.group(3))
    return m.group(4) == "true"


def _meson_calls(text, func):
    """(argument text, start) of every ``func(...)`` call, with balanced parentheses."""
    for m in re.finditer(r"\b%s\s*\(" % re.escape(func), text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            if text[i] == "(":
                depth += 1
            elif text[i] == ")":
                depth -= 1
            elif text[i] == "'":
                j = text.find("'", i + 1)
                i = j if j > 0 else i
            i += 1
        yield text[m.end() : i - 1], m.start()


def _meson_when(text, pos):
    """(the Spack condition of the ``if get_option('x')`` blocks around ``pos``, whether a
    block there is for another platform: Windows, macOS)."""
    stack = []
    for line in text[:pos].splitlines():
        s = line.strip()
        m = re.match(r"^(if|elif)\b(.*)$", s)
        if m:
            cond = m.group(2)
            om = re.match(r"^\s*(not\s+)?get_option\s*\(\s*'([\w.-]+)'\s*\)\s*$", cond)
            lit = (("~" if om.group(1) else "+") + variant_name(om.group(2))) if om else None
            plat = bool(re.search(r"(windows|darwin|cygwin|haiku|sunos)", cond))
            if m.group(1) == "if":
                stack.append((lit, plat))
            elif stack:
                stack[-1] = (lit, plat)
        elif re.match(r"^else\b", s) and stack:
            lit = stack[-1][0]
            stack[-1] = ((("+" if lit[0] == "~" else "~") + lit[1:]) if lit else None, False)
        elif re.match(r"^endif\b", s) and stack:
            stack.pop()
    when = "".join(lit for lit, _p in stack if lit) or None
    return when, any(p for _l, p in stack)


def analyze_meson(a: Analysis):
    files = [p for p in _walk(a.root) if os.path.basename(p) == "meson.build"]
    files.sort(key=lambda p: (p.count(os.sep), p))
    exe_vars = {}
    exes, tests, installed_exes = [], [], []
    for path in files:
        rel = os.path.relpath(path, a.root)
        text = _strip_comments(_read(path))
        for args, _ in _meson_calls(text, "project"):
            strs = re.findall(r"'([^']*)'", args.split(":")[0]) if ":" in args else re.findall(r"'([^']*)'", args)
            head = re.split(r"\w+\s*:", args)[0]
            strs = re.findall(r"'([^']*)'", head)
            langs = strs[1:]
            a.languages = [
                {"c": "c", "cpp": "cxx", "fortran": "fortran"}[x] for x in langs if x in ("c", "cpp", "fortran")
            ]
            v = _meson_kwarg(args, "version")
            if isinstance(v, str):
                a.version = v
            lic = _meson_kwarg(args, "license")
            if lic:
                a.license = lic if isinstance(lic, str) else " AND ".join(lic)
        for args, _ in _meson_calls(text, "add_languages"):
            for lang in re.findall(r"'(\w+)'", re.split(r"\w+\s*:", args)[0]):
                lang = {"c": "c", "cpp": "cxx", "fortran": "fortran"}.get(lang)
                if lang and lang not in a.languages:
                    a.languages.append(lang)
        for args, start in _meson_calls(text, "dependency"):
            names = re.findall(r"'([^']*)'", re.split(r"\w+\s*:", args)[0])
            if not names:
                continue
            name = names[0]
            required = _meson_kwarg(args, "required") is not False
            line = text[:start].count("\n") + 1
            when, other_platform = _meson_when(text, start)
            if name in ("threads", "openmp", "dl", "m") or other_platform:
                a.dependencies.append(
                    Dependency(name, "library", "%s:%d dependency('%s')" % (rel, line, name), system=True)
                )
            else:
                a.dependencies.append(
                    Dependency(
                        name,
                        "pkgconfig",
                        "%s:%d dependency('%s')" % (rel, line, name),
                        ["build", "link"],
                        when,
                        required,
                    )
                )
        for args, start in _meson_calls(text, "find_library"):
            names = re.findall(r"'([^']*)'", args)
            if names:
                line = text[:start].count("\n") + 1
                when, other_platform = _meson_when(text, start)
                a.dependencies.append(
                    Dependency(
                        names[0],
                        "library",
                        "%s:%d find_library('%s')" % (rel, line, names[0]),
                        ["build", "link"],
                        when,
                        _meson_kwarg(args, "required") is not False,
                        system=names[0] in SYSTEM_LIBS or other_platform,
                    )
                )
        for m in re.finditer(r"(?m)^\s*(\w+)\s*=\s*executable\s*\(", text):
            exe_vars[m.group(1)] = None
        for args, start in _meson_calls(text, "executable"):
            names = re.findall(r"'([^']*)'", args)
            if names:
                if _meson_kwarg(args, "install") is True:  # only those Meson installs
                    installed_exes.append(names[0])
                exes.append(names[0])
                pre = text[:start]
                m = re.search(r"(\w+)\s*=\s*$", pre)
                if m:
                    exe_vars[m.group(1)] = names[0]
        for args, _ in _meson_calls(text, "test"):
            parts = [p.strip() for p in re.split(r",(?![^\[]*\])", args)]
            if len(parts) >= 2:
                target = parts[1]
                exe = exe_vars.get(target) or target.strip("'")
                targs = _meson_kwarg(args, "args") or []
                if isinstance(targs, str):
                    targs = [targs]
                tests.append(RecipeCheck(exe, targs, "%s: test(%s)" % (rel, " ".join(args.split()))))
    opt_file = next(
        (
            os.path.join(a.root, n)
            for n in ("meson.options", "meson_options.txt")
            if os.path.isfile(os.path.join(a.root, n))
        ),
        None,
    )
    if opt_file:
        text = _strip_comments(_read(opt_file))
        for args, _ in _meson_calls(text, "option"):
            names = re.findall(r"'([^']*)'", args)
            typ = _meson_kwarg(args, "type")
            if not names or typ not in ("boolean", "feature"):
                continue
            if TEST_OPTION_RE.search(names[0].upper()):
                # the project's tests: built when Spack runs them, as Spack's recipes write
                # it (-Dtests=true under --test), not a variant
                a.build.setdefault("test_options", []).append([names[0], False, typ])
                continue
            val = _meson_kwarg(args, "value")
            default = (val is not False) if typ == "boolean" else (val == "enabled")
            name = variant_name(names[0])
            a.variants.append(
                RecipeVariant(
                    name,
                    bool(default),
                    _meson_kwarg(args, "description") or names[0],
                    names[0],
                    "meson" if typ == "boolean" else "meson-feature",
                )
            )
    # what only the tests need (libmpdclient's check under get_option('test')) is no dependency
    test_vars = {variant_name(opt) for opt, _neg, _typ in a.build.get("test_options", [])}
    kept = []
    for d in a.dependencies:
        lits = re.findall(r"[+~]\w+", d.when or "")
        if any(x[0] == "+" and x[1:] in test_vars for x in lits):
            continue
        d.when = "".join(x for x in lits if x[1:] not in test_vars) or None  # ~tests: the default
        kept.append(d)
    a.dependencies = kept
    a.executables = installed_exes
    a.checks = [c for c in tests if c.exe in installed_exes]


# -- Autotools ----------------------------------------------------------------------------


def _m4_args(argtext):
    """Top-level comma-separated arguments of an m4 macro call, brackets stripped."""
    out, depth, parens, cur = [], 0, 0, ""
    for ch in argtext:
        if ch == "[":
            depth += 1
            if depth == 1:
                continue
        elif ch == "]":
            depth -= 1
            if depth == 0:
                continue
        elif ch in "()" and depth == 0:  # an unquoted macro call's own commas (AS_HELP_STRING(--x, doc))
            parens += 1 if ch == "(" else -1
        if ch == "," and depth == 0 and parens <= 0:
            out.append(cur.strip())
            cur = ""
            continue
        cur += ch
    out.append(cur.strip())
    return out


def _autotools_guards(text, options):
    """[(start, end, "+variant")] of the parts of configure.ac that run only with an
    ``--enable-x``/``--with-x``: the AC_ARG_ENABLE/WITH call itself, and ``if test ...
    $enable_x ...; then ... fi`` / ``AS_IF([test ... $enable_x ...], [...])`` blocks
    (jemalloc's libunwind under --enable-prof-libunwind)."""
    out = []
    norm = {re.sub(r"[^a-z0-9]", "_", o.lower()): n for o, n in options.items()}
    for macro in ("AC_ARG_ENABLE", "AC_ARG_WITH"):
        for args, pos in _meson_calls(text, macro):
            parts = _m4_args(args)
            name = norm.get(re.sub(r"[^a-z0-9]", "_", (parts[0] if parts else "").lower()))
            if name:
                out.append((pos, pos + len(args) + len(macro) + 2, "+" + name))
    for m in re.finditer(r"\bif\s+test\b[^\n]*?\$\{?(?:enable|with)_(\w+?)\}?\b[^\n]*", text):
        name = norm.get(m.group(1).lower())
        if not name:
            continue
        depth, i = 1, m.end()
        for t in re.finditer(r"\b(if|fi)\b", text[m.end() :]):
            depth += 1 if t.group(1) == "if" else -1
            if depth == 0:
                i = m.end() + t.end()
                break
        # a test for "no" guards the other way; that is not a variant's dependency
        if not re.search(r"(?<!!)=\s*\"?x?no\"?", m.group(0)):
            out.append((m.start(), i, "+" + name))
    for args, pos in _meson_calls(text, "AS_IF"):
        parts = _m4_args(args)
        cm = re.search(r"\$\{?(?:enable|with)_(\w+?)\}?\b", parts[0] if parts else "")
        if cm and norm.get(cm.group(1).lower()) and not re.search(r"(?<!!)=\s*\"?x?no\"?", parts[0]):
            start = pos + args.find(parts[1]) if len(parts) > 1 else pos
            out.append((start, pos + len(args) + 8, "+" + norm[cm.group(1).lower()]))
    return out


def analyze_autotools(a: Analysis):
    ac = next(
        (os.path.join(a.root, n) for n in ("configure.ac", "configure.in") if os.path.isfile(os.path.join(a.root, n))),
        None,
    )
    a.build["configure_present"] = os.path.isfile(os.path.join(a.root, "configure"))
    langs = []
    if ac:
        rel = os.path.relpath(ac, a.root)
        text = _strip_comments(_read(ac), "dnl ")
        for args, _ in _meson_calls(text, "AC_INIT"):
            parts = _m4_args(args)
            if len(parts) >= 2 and parts[1]:
                a.version = parts[1]
            if len(parts) >= 4 and parts[3]:
                a.build["tarname"] = parts[3]
            if len(parts) >= 5 and parts[4]:
                a.homepage = parts[4]
        for macro, lang in (
            ("AC_PROG_CC", "c"),
            ("AC_PROG_CXX", "cxx"),
            ("AC_PROG_FC", "fortran"),
            ("AC_PROG_F77", "fortran"),
        ):
            if re.search(r"\b%s\b" % macro, text) and lang not in langs:
                langs.append(lang)
        for macro, kind in (("AC_ARG_ENABLE", "enable"), ("AC_ARG_WITH", "with")):
            for args, _ in _meson_calls(text, macro):
                parts = _m4_args(args)
                if not parts or not parts[0]:
                    continue
                helptext = parts[1] if len(parts) > 1 else ""
                hm = re.search(r"AS_HELP_STRING\(\s*\[?([^\],]*)\]?\s*,\s*\[?([^\]]*)\]?", helptext)
                flag = hm.group(1) if hm else helptext
                desc = (hm.group(2) if hm else parts[0]).strip() or parts[0]
                if desc.count(")") > desc.count("("):  # AS_HELP_STRING's own parenthesis
                    desc = desc[: desc.rindex(")")].strip()
                default = ("--disable-" in flag) if kind == "enable" else ("--without-" in flag)
                if default:  # the help text describes turning it off
                    desc = "%s %s (%s: %s)" % ("enable" if kind == "enable" else "with", parts[0], flag.strip(), desc)
                # --with-ldflags=FLAGS takes a value: off is saying nothing (--without-ldflags
                # would make "no" the flags: mxml's link failed on "cannot find no")
                value = bool(re.search(r"--(?:with|enable)-[\w-]+\[?=(?!yes\b|no\b)", flag)) and not default
                if re.search(r"--(?:with|enable)-[\w-]+=(?:\.\.\.|(?:FLAGS|ARG|\w*DIR)\b)", flag) or (
                    kind == "with" and re.search(r"(dir|flags|path)$|^prefix$", parts[0])
                ):
                    # a setting, not a feature (Mini-XML's --with-ldflags=..., --with-docdir):
                    # maintainers pass it where they need it, no variant
                    continue
                a.variants.append(
                    RecipeVariant(variant_name(parts[0]), default, desc, parts[0], kind + ("-value" if value else ""))
                )
        guards = _autotools_guards(text, {v.option: v.name for v in a.variants})
        when_at = lambda pos: next((w for lo, hi, w in guards if lo <= pos < hi), None)  # noqa: E731
        for args, pos in _meson_calls(text, "AC_CHECK_LIB"):
            parts = _m4_args(args)
            if parts and parts[0]:
                a.dependencies.append(
                    Dependency(
                        parts[0],
                        "library",
                        "%s: AC_CHECK_LIB(%s)" % (rel, args.strip()),
                        when=when_at(pos),
                        system=parts[0] in SYSTEM_LIBS,
                    )
                )
        for args, pos in _meson_calls(text, "AC_SEARCH_LIBS"):
            parts = _m4_args(args)
            for lib in parts[1].split() if len(parts) > 1 else []:
                a.dependencies.append(
                    Dependency(
                        lib,
                        "library",
                        "%s: AC_SEARCH_LIBS(%s)" % (rel, args.strip()),
                        when=when_at(pos),
                        system=lib in SYSTEM_LIBS,
                    )
                )
        for args, pos in _meson_calls(text, "PKG_CHECK_MODULES"):
            parts = _m4_args(args)
            if len(parts) >= 2:
                for mod in re.split(r"\s+", parts[1]):
                    mod = re.split(r"[<>=]", mod)[0]
                    if mod:
                        a.dependencies.append(
                            Dependency(
                                mod, "pkgconfig", "%s: PKG_CHECK_MODULES(%s)" % (rel, args.strip()), when=when_at(pos)
                            )
                        )
        if re.search(r"\bPKG_(CHECK_MODULES|PROG_PKG_CONFIG)\b", text):
            a.dependencies.append(Dependency("pkg-config", "tool", "%s: PKG_CHECK_MODULES" % rel, ["build"]))
        if re.search(r"\bLT_INIT|AC_PROG_LIBTOOL\b", text):
            a.build["libtool"] = True
    a.languages = langs or _languages_from_files(a.root)
    _autotools_missing_subdirs(a)
    _makefile_checks(a, [os.path.join(a.root, n) for n in ("Makefile.in", "Makefile.am")])
    if not a.build["configure_present"]:
        a.notes.append("no configure script: the recipe regenerates it (autoconf, automake, libtool)")


def _autotools_missing_subdirs(a: Analysis):
    """A SUBDIRS entry of Makefile.am missing from the tree (a git submodule the tarball lacks:
    jq's vendor/oniguruma): automake refuses to run without its directory, so the recipe makes
    it empty, and the option named like it is off (--without-oniguruma), never built."""
    text = _read(os.path.join(a.root, "Makefile.am"))
    missing = []
    for val in re.findall(r"(?m)^\s*(?:DIST_)?SUBDIRS\s*\+?=\s*(.*)$", text):
        for d in val.split():
            full = os.path.join(a.root, d)
            if "$" not in d and "@" not in d and d != "." and (not os.path.isdir(full) or not os.listdir(full)):
                missing.append(d)
    if not missing:
        return
    a.build["missing_subdirs"] = list(dict.fromkeys(missing))
    for v in a.variants:
        if any(v.option.lower() in os.path.basename(d).lower() for d in missing):
            v.default = False
            v.kind = v.kind.replace("-value", "")  # off says so: the configure default would build it
            a.notes.append(
                "%s is missing from the tree (a git submodule?): variant %s off passes --%s-%s"
                % (", ".join(missing), v.name, "disable" if v.kind == "enable" else "without", v.option)
            )


SYSTEM_LIBS = {"m", "c", "dl", "pthread", "rt", "util", "stdc++", "gcc", "gomp", "omp"}


# -- Makefile -----------------------------------------------------------------------------


def _makefile_checks(a: Analysis, paths):
    for path in paths:
        text = _read(path)
        if not text:
            continue
        rel = os.path.relpath(path, a.root)
        lines = text.splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"^(check|test)\s*:", line)
            if not m:
                continue
            a.build.setdefault("check_target", m.group(1))
            for body in lines[i + 1 :]:
                if not body.startswith("\t"):
                    break
                cmd = body.strip().lstrip("@-").strip()
                cm = re.match(r"^\./([\w.+-]+)((?:\s+[^;&|>]+)?)", cmd)
                if cm:
                    a.checks.append(RecipeCheck(cm.group(1), cm.group(2).split(), "%s: %s" % (rel, cmd)))
        # programs the install rule copies into a bin directory
        targets = set(re.findall(r"(?m)^([A-Za-z_][\w.+-]*)\s*:(?!=)", text))
        for i, line in enumerate(lines):
            if not re.match(r"^install(-exec)?\s*:", line):
                continue
            for body in lines[i + 1 :]:
                if not body.startswith("\t"):
                    break
                if "bin" not in body:
                    continue
                for tok in re.findall(r"[\w.+-]+", body.split("bin")[0]):
                    if tok in targets and tok not in a.executables and not re.search(r"\.(o|a|so|h|pc)$", tok):
                        a.executables.append(tok)


# Targets that make's default goal may be but that build no program.
NOT_PROGRAM_TARGETS = {
    "clean",
    "distclean",
    "install",
    "check",
    "test",
    "tests",
    "help",
    "default",
    "debug",
    "release",
    "depend",
    "dep",
    "run",
}


MAKE_VAR_RE = re.compile(r"^(?:override\s+|export\s+)?([A-Za-z_][\w]*)\s*(?::{1,2}|\?|\+)?=\s*(.*?)\s*$")
COMPILERS = {
    "gcc": "cc",
    "cc": "cc",
    "clang": "cc",
    "icc": "cc",
    "icx": "cc",
    "xlc": "cc",
    "pgcc": "cc",
    "nvc": "cc",
    "g++": "cxx",
    "c++": "cxx",
    "clang++": "cxx",
    "icpc": "cxx",
    "icpx": "cxx",
    "xlc++": "cxx",
    "pgc++": "cxx",
    "nvc++": "cxx",
    "gfortran": "fc",
    "ifort": "fc",
    "ifx": "fc",
    "flang": "fc",
    "f77": "fc",
    "f90": "fc",
    "f95": "fc",
    "pgfortran": "fc",
    "nvfortran": "fc",
}
# yes/no switches of a Makefile that are about how, not what, it builds: not variants
SWITCH_VALUES = {
    "yes": ("yes", "no"),
    "no": ("yes", "no"),
    "on": ("on", "off"),
    "off": ("on", "off"),
    "true": ("true", "false"),
    "false": ("true", "false"),
}
MAKE_SWITCHES_NOT_VARIANTS = {"optimize", "debug", "profile", "verbose", "quiet", "static", "v"}


def _make_expand(text, mvars, depth=0):
    if depth > 5 or "$" not in text:
        return text
    out = re.sub(r"\$[({](\w+)[)}]", lambda m: mvars.get(m.group(1), m.group(0)), text)
    return _make_expand(out, mvars, depth + 1) if out != text else out


def _make_lines(text):
    """Logical lines: backslash continuations joined, comments dropped."""
    out, cur = [], ""
    for line in text.splitlines():
        if not line.startswith("\t"):
            line = re.sub(r"(?<!\\)#.*$", "", line)
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    if cur:
        out.append(cur)
    return out


def _make_condition(line, switches):
    """The switch literal (``"MPI"``, ``"~MPI"``) an ``ifeq``/``ifneq``/``ifdef`` tests, or None."""
    m = re.match(r"^\s*(ifeq|ifneq)\s*\(\s*\$[({](\w+)[)}]\s*,\s*(\w*)\s*\)", line) or re.match(
        r"^\s*(ifeq|ifneq)\s*\(\s*(\w*)\s*,\s*\$[({](\w+)[)}]\s*\)", line
    )
    if m:
        var, val = (
            (m.group(2), m.group(3)) if not m.group(2).islower() or m.group(3).islower() else (m.group(3), m.group(2))
        )
        if m.group(2) in switches:
            var, val = m.group(2), m.group(3)
        elif m.group(3) in switches:
            var, val = m.group(3), m.group(2)
        else:
            return None
        on = val.lower() in ("yes", "1", "true", "on")
        if m.group(1) == "ifneq":
            on = not on if val else True
        return var if on else "~" + var
    m = re.match(r"^\s*(ifdef|ifndef)\s+(\w+)", line)
    if m and m.group(2) in switches:
        return m.group(2) if m.group(1) == "ifdef" else "~" + m.group(2)
    return None


MPI_WRAPPERS = {
    "mpicc": "mpicc",
    "mpicxx": "mpicxx",
    "mpic++": "mpicxx",
    "mpiCC": "mpicxx",
    "mpig++": "mpicxx",
    "mpif90": "mpifc",
    "mpif77": "mpif77",
    "mpifort": "mpifc",
}


def _commented_settings(a, text, mvars, rel):
    """The Makefile's own commented-out alternative for MPI or OpenMP (HPCCG's
    ``#USE_MPI = -DUSING_MPI`` and ``#CXX=/usr/local/bin/mpicxx`` above ``USE_MPI =``): a
    variant, off as the Makefile has it, that passes those settings (MPI's wrappers for the
    compilers)."""
    commented = {}
    for var, val in re.findall(r"(?m)^#\s*([A-Z][A-Z0-9_]*)\s*[:?]?=\s*(\S.*?)\s*$", text):
        commented.setdefault(var, val)
    names = {v.name for v in a.variants}
    for name, key in (("mpi", r"MPI"), ("openmp", r"OMP|OPENMP")):
        settings = {}
        for var, val in commented.items():
            wrapper = MPI_WRAPPERS.get(os.path.basename(val.split()[0])) if name == "mpi" else None
            if "/" in val and not wrapper:
                continue  # a path on the author's machine (MPI_INC=-I/usr/MPICH/...): the wrapper knows
            if wrapper or (re.search(key, var) and not mvars.get(var)):
                settings[var] = ("@" + wrapper) if wrapper else val
        if name in names or not any(re.search(key, v) for v in settings):
            continue
        a.variants.append(
            RecipeVariant(
                name,
                False,
                "Build with the Makefile's %s settings (%s)"
                % ("MPI" if name == "mpi" else "OpenMP", ", ".join(sorted(settings))),
                ",".join(sorted(settings)),
                "make-commented",
            )
        )
        a.build.setdefault("commented_settings", {})[name] = settings
        if name == "mpi":
            a.dependencies.append(Dependency("MPI", "cmake", "%s: commented MPI settings" % rel, when="+mpi"))


def analyze_makefile(a: Analysis):
    mk = next(
        (
            os.path.join(a.root, n)
            for n in ("GNUmakefile", "Makefile", "makefile")
            if os.path.isfile(os.path.join(a.root, n))
        ),
        None,
    )
    if mk is None:  # only a template to copy (CoMD's Makefile.vanilla)
        mk = next(
            (
                os.path.join(a.root, n)
                for n in sorted(os.listdir(a.root))
                if n.startswith("Makefile.") and not n.endswith((".in", ".am"))
            ),
            None,
        )
        a.build["makefile_template"] = os.path.basename(mk)
    text = _read(mk)
    rel = os.path.relpath(mk, a.root)
    lines = _make_lines(text)
    mvars, switches = {}, {}
    depth = 0
    for line in lines:
        if re.match(r"^\s*if(n?eq|n?def)\b", line):
            depth += 1
        elif re.match(r"^\s*endif\b", line):
            depth -= 1
        m = MAKE_VAR_RE.match(line) if not line.startswith("\t") else None
        if m and m.group(1) not in mvars:
            mvars[m.group(1)] = m.group(2)
            if depth == 0 and m.group(2).lower() in SWITCH_VALUES and m.group(1).isupper():
                switches[m.group(1)] = m.group(2).lower() in ("yes", "on", "true")
                # the spelling the Makefile compares with: yes/no, ON/OFF, true/false
                on, off = SWITCH_VALUES[m.group(2).lower()]
                a.build.setdefault("switch_values", {})[m.group(1)] = (
                    [on.upper(), off.upper()] if m.group(2).isupper() else [on, off]
                )
    m = re.search(r"(?m)^\s*VERSION\s*[:?]?=\s*([\w.+-]+)", text)
    if m:
        a.version = m.group(1)
    pv = re.search(r"(?m)^\s*(PREFIX|prefix|INSTALL_PREFIX|DESTDIR)\s*[:?]?=", text)
    a.build["prefix_var"] = pv.group(1) if pv else None
    a.build["has_install"] = bool(re.search(r"(?m)^(?:[\w.-]+[ \t]+)*install(?:[ \t]+[\w.-]+)*[ \t]*:(?!=)", text))
    targets = [_make_expand(t, mvars) for t in re.findall(r"(?m)^([A-Za-z_$][\w.$(){}-]*)\s*:(?!=)", text)]
    targets = [t for t in targets if "$" not in t]
    a.build["targets"] = targets
    # a compiler named by path or by name in a variable other than CC/CXX/FC (which the recipe
    # sets anyway): the recipe passes Spack's compiler for it (HPCCG's CXX=/usr/local/bin/g++)
    compiler_vars = {}
    for var, val in mvars.items():
        first = val.split()[0] if val.split() else ""
        kind = COMPILERS.get(os.path.basename(first))
        if kind and (first.startswith("/") or var not in ("CC", "CXX", "FC", "F77")):
            compiler_vars[var] = kind
    a.build["compiler_vars"] = compiler_vars
    # yes/no switches -> variants; what their ifeq blocks add -> dependencies behind them
    for var, default in switches.items():
        if var.lower() in MAKE_SWITCHES_NOT_VARIANTS:
            continue
        on = a.build.get("switch_values", {}).get(var, ["yes"])[0]
        a.variants.append(RecipeVariant(variant_name(var), default, "Build with %s=%s" % (var, on), var, "make"))
    _commented_settings(a, text, mvars, rel)
    kept = {v.option for v in a.variants}
    conds = []
    libs = {}
    uses_mpi_wrapper = None
    for line in lines:
        if re.match(r"^\s*if(n?eq|n?def)\b", line):
            conds.append(_make_condition(line, kept))
            continue
        if re.match(r"^\s*else\b", line) and conds:
            c = conds[-1]
            conds[-1] = (c[1:] if c.startswith("~") else "~" + c) if c else None
            continue
        if re.match(r"^\s*endif\b", line) and conds:
            conds.pop()
            continue
        when = "".join(("~" if c.startswith("~") else "+") + variant_name(c.lstrip("~")) for c in conds if c) or None
        if re.match(r"^\s*(LDLIBS|LIBS|LDFLAGS|LDADD|\w*LIBS?\w*)\s*[:+?]?=", line) or line.startswith("\t"):
            for lib in re.findall(r"(?<![\w-])-l([\w+.-]+)", _make_expand(line, mvars)):
                libs.setdefault((lib, when), line.strip())
        if re.search(r"\bmpi(cc|cxx|c\+\+|CC|f90|fort|icc|icpc)\b", line) and uses_mpi_wrapper is None:
            uses_mpi_wrapper = when or ""
        # a pkg-config call asks for --cflags/--libs (not "can't generate pkg-config file")
        for pc in re.findall(r"pkg-config\s+(?:--\S+\s+)+([\w.+-]+)", line):
            a.dependencies.append(Dependency(pc, "pkgconfig", "%s: pkg-config %s" % (rel, pc), when=when))
    for (lib, when), _line in sorted(libs.items(), key=lambda x: (x[0][0], x[0][1] or "")):
        a.dependencies.append(Dependency(lib, "library", "%s: -l%s" % (rel, lib), when=when, system=lib in SYSTEM_LIBS))
    if uses_mpi_wrapper is not None:
        if not uses_mpi_wrapper and any(v.name == "mpi" for v in a.variants):
            # CC = mpicc for every build, and a switch that says whether MPI is used (CoMD's
            # DO_MPI): the recipe gives the wrapper with +mpi, Spack's compiler without
            uses_mpi_wrapper = "+mpi"
        a.dependencies.append(
            Dependency("MPI", "cmake", "%s: an MPI compiler wrapper" % rel, when=uses_mpi_wrapper or None)
        )
        a.build["mpi_wrapper"] = uses_mpi_wrapper or "always"
    m = re.search(r"(?m)^all\s*:([^\n]*)", text)
    if m:
        for t in _make_expand(m.group(1), mvars).split():
            t = t.strip()
            if t and "$" not in t and not re.search(r"\.(o|a|so|pc|h)$", t) and t in targets:
                a.build.setdefault("all_targets", []).append(t)
    elif targets and targets[0] not in NOT_PROGRAM_TARGETS and not re.search(r"\.(o|a|so|pc|h)$", targets[0]):
        a.build["all_targets"] = [targets[0]]  # no `all`: make builds the first target
    elif targets and targets[0] == "help":
        _goal_from_help(a, targets, rel)
    subs = _install_submakefiles(a, text, mvars) if a.build["has_install"] else []
    if subs and not a.build["prefix_var"]:
        # the install rule runs the subdirectories' (lz4: $(MAKE) -C lib install): their prefix
        for sub in subs:
            pv = re.search(r"(?m)^\s*(PREFIX|prefix|INSTALL_PREFIX)\s*[:?]?=", _read(sub))
            if pv:
                a.build["prefix_var"] = pv.group(1)
                break
    sub_targets = [t for sub in subs for t in _make_targets(_read(sub))]
    a.build["own_names"] = _library_targets(targets + sub_targets)
    _makefile_checks(a, [mk] + subs)
    if not a.build["has_install"]:
        # (a program put elsewhere, ../bin/x-$(FLAVOR), is found after the build instead)
        a.executables = [
            t
            for t in a.build.get("all_targets", [])
            if not t.startswith("lib") and t not in PHONY_LIKE and t not in _phony(text) and "/" not in t
        ]
    a.languages = _languages_from_files(a.root)


def _make_targets(text):
    mvars = {}
    for line in _make_lines(text):
        m = MAKE_VAR_RE.match(line) if not line.startswith("\t") else None
        if m and m.group(1) not in mvars:
            mvars[m.group(1)] = m.group(2)
    # a rule may make several (Mini-XML's `libmxml.a libmxml4.a: $(LIBOBJS)`)
    rules = re.findall(r"(?m)^([A-Za-z_$][\w.$(){} \t-]*?)[ \t]*:(?![=:])", text)
    targets = [_make_expand(t, mvars) for r in rules for t in r.split()]
    return [t for t in targets if "$" not in t]


def _library_targets(targets):
    """The libraries among make targets, by name: ``liblz4.a``, ``libmxml4.so.2`` and
    ``libmxml4.2.dylib`` are lz4 and mxml4; objects, resources and pkg-config files are none."""
    out = []
    for t in targets:
        m = re.match(r"^lib([A-Za-z0-9][\w+-]*?)(?:\.\d+)*\.(?:a|so|la|dylib|dll)(?:\.\d+)*$", t) or re.match(
            r"^lib([A-Za-z0-9][\w+-]*)$", t
        )
        if m and not re.search(r"-(dll|static|shared)$", m.group(1)):
            out.append(m.group(1))
    return list(dict.fromkeys(out))


def _install_submakefiles(a, text, mvars):
    """The Makefiles of the subdirectories a Makefile's install rule runs (``$(MAKE) -C lib $@``)."""
    lines = text.splitlines()
    dirs = []
    for i, line in enumerate(lines):
        if not re.match(r"^(?:[\w.-]+[ \t]+)*install(?:[ \t]+[\w.-]+)*[ \t]*:(?!=)", line):
            continue
        for body in lines[i + 1 :]:
            if not body.startswith("\t"):
                break
            dirs += re.findall(r"(?:-C\s*|cd\s+)(\S+?)(?:\s|;|&|$)", _make_expand(body, mvars))
    out = []
    for d in dict.fromkeys(dirs):
        for n in ("GNUmakefile", "Makefile", "makefile"):
            path = os.path.normpath(os.path.join(a.root, d, n))
            if "$" not in d and path.startswith(a.root + os.sep) and os.path.isfile(path):
                out.append(path)
                break
    return out


# machine targets a Makefile whose default goal prints help offers, the portable ones first
GENERIC_GOALS = ["default", "gnu", "gcc", "linux", "serial", "mpi", "openmpi", "mpich", "omp", "openmp"]


def _goal_from_help(a: Analysis, targets, rel):
    """A Makefile whose default goal only prints help (miniMD's ``make openmpi``): the recipe
    asks for a machine target that has its ``Makefile.<target>``, a portable one first; what
    that file compiles with (an MPI wrapper) decides the MPI dependency."""
    with_file = [t for t in targets if os.path.isfile(os.path.join(a.root, "Makefile." + t))]
    if not with_file:
        return
    goal = sorted(with_file, key=lambda t: GENERIC_GOALS.index(t) if t in GENERIC_GOALS else len(GENERIC_GOALS))[0]
    a.build["goal"] = goal
    a.notes.append("the default goal prints help: the recipe builds `make %s`" % goal)
    text = _read(os.path.join(a.root, "Makefile." + goal))
    if re.search(r"\bmpi(cc|cxx|c\+\+|CC|f90|fort|icc|icpc)\b", text) and not a.build.get("mpi_wrapper"):
        a.dependencies.append(Dependency("MPI", "cmake", "%s: Makefile.%s's MPI compiler wrapper" % (rel, goal)))
        a.build["mpi_wrapper"] = "always"


# targets that name a goal, not a file a user runs
PHONY_LIKE = {
    "all",
    "allmost",
    "lib",
    "libs",
    "examples",
    "manuals",
    "man",
    "docs",
    "doc",
    "build_tests",
    "tests",
    "test",
    "check",
    "programs",
    "tools",
    "bin",
    "shared",
    "static",
    "default",
}


def _phony(text):
    return set(" ".join(re.findall(r"(?m)^\.PHONY\s*:(.*)$", text)).split())


# -- Python -------------------------------------------------------------------------------


def analyze_python(a: Analysis):
    text = _read(os.path.join(a.root, "pyproject.toml"))
    m = re.search(r'(?m)^version\s*=\s*"([^"]+)"', text)
    if m:
        a.version = m.group(1)
    m = re.search(r"(?ms)^dependencies\s*=\s*\[(.*?)\]", text)
    if m:
        for req in re.findall(r'"([^"]+)"', m.group(1)):
            name = re.split(r"[<>=!~; \[]", req)[0]
            a.dependencies.append(Dependency(name, "python", "pyproject.toml: %s" % req, ["build", "run"]))
    m = re.search(r"(?ms)^\[build-system\].*?requires\s*=\s*\[(.*?)\]", text)
    a.build["build_requires"] = (
        [re.split(r"[<>=!~; \[]", r)[0] for r in re.findall(r'"([^"]+)"', m.group(1))] if m else ["setuptools"]
    )
    m = re.search(r'(?m)^license\s*=\s*(?:\{\s*text\s*=\s*)?"([^"]+)"', text)
    if m:
        a.license = m.group(1)
    a.languages = [x for x in _languages_from_files(a.root)]


ANALYZERS = {
    "cmake": analyze_cmake,
    "meson": analyze_meson,
    "autotools": analyze_autotools,
    "makefile": analyze_makefile,
    "python": analyze_python,
}


VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z]*(?:[._-][0-9A-Za-z]+)*$")
# subdirectories that hold an alternative build for hardware or a toolchain this machine may
# lack: never the default of the choice
ACCELERATOR_DIRS = re.compile(r"(cuda|hip|sycl|opencl|offload|gpu|kokkos|raja|acc|mic|phi|fpga|dpcpp|ocl)", re.I)
# the plain builds first (serial, or MPI that a switch turns off: CoMD's src-mpi), as Spack's
# recipes default them; a threading model where there is no plain one (XSBench)
PREFERRED_DIRS = [
    "serial",
    "src-serial",
    "ref",
    "src",
    "cpu",
    "seq",
    "mpi",
    "src-mpi",
    "openmp-threading",
    "openmp",
    "omp",
    "src-openmp",
]
# the programming model a build directory is named for: the variant that chooses it
DIR_MODELS = ["cuda", "hip", "sycl", "opencl", "openacc", "kokkos", "raja", "openmp"]


def dir_model(d):
    """``cuda`` -> cuda, ``openmp-offload`` -> openmp_offload, ``src-openmp`` -> openmp; None
    for a directory not named for one."""
    toks = re.split(r"[-_.]", os.path.basename(d).lower())
    toks = ["openmp" if t == "omp" else t for t in toks]
    if "offload" in toks or "target" in toks:
        return "openmp_offload" if "openmp" in toks else None
    return next((m for m in DIR_MODELS if m in toks), None)


def find_builds(root, max_depth=2):
    """[(relative directory, build system)] of the builds below ``root`` (none at its top),
    nearest first; a directory with only a ``Makefile.<flavour>`` template counts as a
    Makefile build."""
    out = []
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        depth = 0 if rel == "." else rel.count(os.sep) + 1
        dirs[:] = sorted(
            x
            for x in dirs
            if x not in SKIP_DIRS
            and not x.startswith(".")
            and not re.match(r"^(tests?|examples?|docs?|contrib|third.?party|extern(al)?)$", x, re.I)
        )
        if depth == 0:
            continue
        if depth >= max_depth:
            dirs[:] = []
        bs = detect_build_system(d)
        if bs is None and any(f.startswith("Makefile.") and not f.endswith((".in", ".am")) for f in files):
            bs = "makefile"
        if bs:
            out.append((rel, bs))
            dirs[:] = []  # a build's own subdirectories are its business
    return out


def choose_build(builds):
    """The default of several builds: a CPU one, by the usual names, else the first."""
    cpu = [b for b in builds if not ACCELERATOR_DIRS.search(os.path.basename(b[0]))] or builds
    for pref in PREFERRED_DIRS:
        for b in cpu:
            if os.path.basename(b[0]).lower() == pref:
                return b
    return cpu[0]


def resolve_version(a: Analysis, raw):
    """A version string Spack accepts, from what the build files say (``raw``): macros
    resolved from a header's ``#define``, an ``m4_include(VERSION)``'s file, or a VERSION
    file; None when nothing safe is found (never a raw macro)."""
    raw = (raw or "").strip()
    if "${" in raw:  # CMake variables left: #define NAME number in the project's headers
        defines = {}
        for p in _walk(a.root, max_files=2000):
            if p.endswith((".h", ".hpp", ".hh")):
                for k, v in re.findall(
                    r"(?m)^\s*#\s*define\s+(\w*VERSION\w*)\s+\(?\"?([\w.]+)\"?\)?", _read(p)[:20000]
                ):
                    defines.setdefault(k, v)
        raw = re.sub(r"\$\{(\w+)\}", lambda m: defines.get(m.group(1), m.group(0)), raw)
    m = re.search(r"m4_(?:include|esyscmd)\s*\(\s*\[?(?:[^\]\)]*?\s)?([\w./-]*VERSION[\w./-]*)", raw, re.I)
    if m or (raw and not VERSION_RE.match(raw)):
        for n in ([m.group(1)] if m else []) + ["VERSION", "version.txt", ".tarball-version", ".version"]:
            text = _read(os.path.join(a.root, n)).strip().split()
            if text and VERSION_RE.match(text[0].lstrip("v")):
                return text[0].lstrip("v")
    raw = raw.lstrip("v")
    return raw if VERSION_RE.match(raw) else None


def analyze(root, name, build_system=None, version=None, build_directory=None) -> Analysis:
    """Analyze the source tree at ``root`` for package ``name``.

    A tree with no build at its top but builds in subdirectories (one Makefile per
    programming model) is analyzed in the default one; ``build["subdirs"]`` lists the choice
    the recipe makes a variant of."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise R3Error("source tree %s is not a directory" % root)
    bs = build_system or detect_build_system(root)
    subdir = build_directory
    builds = []
    if bs is None and subdir is None:
        builds = find_builds(root)
        if builds:
            subdir, bs = choose_build(builds)
    elif subdir:
        bs = build_system or detect_build_system(os.path.join(root, subdir)) or "makefile"
    if bs is None:
        raise R3Error(
            "no build system found in %s or its subdirectories (looked for CMakeLists.txt, meson.build, "
            "configure(.ac), Makefile, pyproject.toml/setup.py)" % root
        )
    if bs not in ANALYZERS:
        raise R3Error("unsupported build system %r (supported: %s)" % (bs, ", ".join(BUILD_SYSTEMS)))
    a = Analysis(name=name, root=os.path.join(root, subdir) if subdir else root, build_system=bs, version="")
    ANALYZERS[bs](a)
    a.root = root
    if subdir:
        same = [b for b in builds if b[1] == bs] or [(subdir, bs)]
        a.build["build_directory"] = subdir
        a.build["subdirs"] = [b[0] for b in same]
        others = {b[0]: dir_model(b[0]) for b in same if b[0] != subdir}
        models = list(others.values())
        if (
            others
            and all(models)
            and len(set(models)) == len(models)
            and not set(models) & {v.name for v in a.variants}
        ):
            # one directory per programming model: a variant each, as Spack's recipes choose
            # XSBench's cuda/ (+cuda) or CoMD's src-openmp/ (+openmp); the plain one without
            a.build["model_dirs"] = [[m, d] for d, m in others.items()]
            a.notes.append(
                "builds in %s: variants %s choose one (default %s)"
                % (", ".join(b[0] for b in same), ", ".join("+" + m for m in models), subdir)
            )
        elif len(same) > 1:
            a.notes.append(
                "builds in %s: the variant 'implementation' chooses one (default %s)"
                % (", ".join(b[0] for b in same), subdir)
            )
    raw = a.version
    a.version = version or resolve_version(a, a.version)
    if not a.version:
        m = re.search(r"-(\d+(?:\.\d+)+)$", os.path.basename(root))
        a.version = m.group(1) if m else "1.0.0"
        a.notes.append(
            "no version found in the build files%s: using %s" % (" (%r is not one)" % raw if raw else "", a.version)
        )
    a.license = detect_license(root, a.license)
    if not a.description or a.description.endswith("by spack-r3."):
        a.description = detect_description(root, name)
    if not a.languages and bs != "python":
        a.languages = _languages_from_files(a.root if not subdir else os.path.join(root, subdir)) or ["c"]
    for v in a.variants:
        # documentation needs tools an offline install cannot fetch and users rarely want
        if v.default and re.match(r"^(docs?|documentation|man|manpages?|manual|sphinx|doxygen|html)$", v.name):
            v.default = False
    for v in a.variants:
        if v.name in RESERVED_VARIANTS:
            old, v.name = v.name, v.name + "_opt"
            for d in a.dependencies:
                if d.when:
                    d.when = re.sub(r"([+~])%s\b" % old, r"\g<1>" + v.name, d.when)
    _own_libraries(a)
    _mark_own(a)
    _feature_variants(a)
    _test_facts(a, os.path.join(root, subdir) if subdir else root)
    # de-duplicate dependencies (same name, kind and condition)
    seen, deps = set(), []
    for d in a.dependencies:
        key = (d.name, d.kind, d.when)
        if key not in seen:
            seen.add(key)
            deps.append(d)
    a.dependencies = deps
    return a


def _own_libraries(a):
    """The libraries the project builds (Meson's library(), Automake's lib_LTLIBRARIES)."""
    own = a.build.setdefault("own_names", [])
    for p in _walk(a.root, max_files=3000):
        base = os.path.basename(p)
        if base == "meson.build":
            own += re.findall(r"\b(?:shared_|static_|both_)?library\s*\(\s*'([\w.+-]+)'", _read(p))
        elif base == "Makefile.am":
            for libs in re.findall(r"(?m)^\s*\w*lib_(?:LT)?LIBRARIES\s*\+?=\s*(.*)$", _read(p)):
                own += [re.sub(r"^lib|\.(la|a)$", "", x) for x in libs.split() if "$" not in x]
        elif base == "Makefile.in" and not os.path.isfile(os.path.join(os.path.dirname(p), "Makefile.am")):
            # written by hand, not by automake (Mini-XML): the library targets it names
            own += _library_targets(_make_targets(_read(p)))
    a.build["own_names"] = list(dict.fromkeys(x for x in own if "$" not in x and "@" not in x))


def _test_facts(a, build_root):
    """What a stand-alone test can use: the flag the program's source answers, and for a
    library its name and the header to include."""
    sources = [p for p in _walk(build_root, max_files=1500) if os.path.splitext(p)[1] in LANG_EXT]
    text = "".join(_read(p)[:200000] for p in sources[:200])
    for flag in ("--version", "--help", "-help", "-h"):
        m = re.search(r"[\"']%s[\"']" % re.escape(flag), text)
        if m:
            a.build["cli_flag"] = flag
            # an MPI program that answers its help flag with MPI_Abort(..., -1) exits 255 (miniAMR)
            if re.search(r"MPI_Abort\s*\(\s*\w+\s*,\s*-1\s*\)", text[m.end() : m.end() + 300]):
                a.build["cli_status"] = 255
            break
    own = [x for x in a.build.get("own_names", []) if re.match(r"^[\w+-]+$", x)]
    if not own:
        return
    lib = sorted(own, key=lambda x: (x.lower() not in a.name.lower(), "static" in x.lower(), len(x)))[0]
    _fortran_module(a, lib)
    headers = [
        p
        for p in _walk(a.root, max_files=3000)
        if p.endswith(".h")
        and not re.search(r"(^|/)(tests?|examples?|fuzz\w*|contrib|build|private)/", os.path.relpath(p, a.root))
        and not re.search(r"(private|internal)", os.path.basename(p))
        and not re.match(r"^(config|.*_config|.*-config)\.h$", os.path.basename(p))
    ]
    stem = lambda p: os.path.splitext(os.path.basename(p))[0].lower()  # noqa: E731
    want = re.sub(r"^lib", "", lib.lower())
    # the header named like the library first, then those in an include/ or api/ directory:
    # the test includes the first one the install put under the prefix
    wants = {want, "lib" + want}
    best = [p for p in headers if stem(p) in wants] + sorted(
        (p for p in headers if stem(p) not in wants and (want.startswith(stem(p)) or stem(p).startswith(want))),
        key=lambda p: (not re.search(r"(^|/)(include|api)/", os.path.relpath(p, a.root)), p),
    )
    if not best:  # a header of the public API by another name (libmpdclient's mpd/client.h)
        best = sorted(
            (p for p in headers if re.search(r"(^|/)include/", os.path.relpath(p, a.root))),
            key=lambda p: (os.path.relpath(p, a.root).count("/"), p),
        )
    if best:
        a.build["test_headers"] = list(dict.fromkeys(os.path.basename(p) for p in best))[:6]
        a.build["test_header"] = a.build["test_headers"][0]
        a.build["test_library"] = re.sub(r"^lib", "", lib)
        # a file renamed for one kind only (utf8proc: OUTPUT_NAME utf8proc_static when static)
        # is found by its target's name for the other
        renamed = [t for t in a.build.get("own_targets", []) if t.lower() in lib.lower() and t != lib]
        # the same library under a name a build option picks (Mini-XML: libmxml, or libmxml4
        # by default): the test takes whichever the install has
        variants = [x for x in own if x != lib and x.lower().startswith(want)]
        files = list(dict.fromkeys([lib] + renamed[:1] + variants))
        if len(files) > 1:
            a.build["test_library_files"] = files


def _fortran_module(a, lib):
    """A Fortran library (no C header): the module a program ``use``s, for the link test
    (test-drive's testdrive.mod); the one named like the library first."""
    mods = []
    for p in _walk(a.root, max_files=3000):
        if os.path.splitext(p)[1].lower() not in (".f90", ".f", ".f95", ".f03", ".f08"):
            continue
        if re.search(r"(^|/)(tests?|examples?|apps?)/", os.path.relpath(p, a.root)):
            continue
        mods += [m.lower() for m in re.findall(r"(?mi)^\s*module\s+(?!procedure\b)(\w+)\s*$", _read(p))]
    if mods:
        want = re.sub(r"\W", "", re.sub(r"^lib", "", lib.lower()))
        a.build["test_fortran_module"] = sorted(set(mods), key=lambda m: (m != want, want not in m, len(m)))[0]
        a.build["test_library"] = re.sub(r"^lib", "", lib)


def _mark_own(a):
    """Dependencies on what the project builds itself (its own library, ``-lxxhash`` in
    xxHash's Makefile) are no dependencies."""
    own = {x.lower() for x in a.build.get("own_names", []) + a.build.get("own_targets", [])}
    for d in a.dependencies:
        n = re.sub(r"\.(h|hh|hpp|h\+\+)$", "", d.name.lower())
        if n in own or re.sub(r"^lib", "", n) in own:
            d.system = True


def _feature_variants(a):
    """An optional dependency named like a variant goes behind it (``-lpapi`` and PAPI=yes)."""
    names = {v.name for v in a.variants}
    for d in a.dependencies:
        if d.when is None and not d.required and d.name.lower() in names:
            d.when = "+" + d.name.lower()
