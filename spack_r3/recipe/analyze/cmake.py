"""CMake: options, find_package / pkg_check_modules dependencies, tests, from the
CMakeLists.txt files (read, never configured)."""

import os
import re

from .facts import (
    Analysis,
    Dependency,
    RESERVED_VARIANTS,
    RecipeCheck,
    RecipeVariant,
    SYSTEM_LIBS,
    TEST_OPTION_RE,
    read_file,
    variant_name,
    walk_tree,
)


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
    files = [p for p in walk_tree(a.root) if os.path.basename(p) == "CMakeLists.txt" or p.endswith(".cmake")]
    files.sort(key=lambda p: (p.count(os.sep), p))
    texts = {path: read_file(path) for path in files}
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


# directories of the project's tests and of projects it bundles
TEST_DIRS = r"(^|/)(tests?|testing|unittests?|third.?party|extern(al)?|vendor|deps|googletest|gtest)/"

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
