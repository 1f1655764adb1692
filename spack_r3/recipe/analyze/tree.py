"""The analysis of a tree: its builds (which build system, in which directory), the
chosen one read by its build system's reader, then what holds across them: version,
own libraries, tests, features."""

import os
import re

from ...errors import R3Error
from .autotools import analyze_autotools
from .cmake import analyze_cmake
from .facts import (
    Analysis,
    BUILD_SYSTEMS,
    LANG_EXT,
    RESERVED_VARIANTS,
    SKIP_DIRS,
    detect_build_system,
    detect_description,
    detect_license,
    languages_from_files,
    read_file,
    walk_tree,
)
from .makefile import analyze_makefile, library_targets, make_targets
from .meson import analyze_meson
from .python import analyze_python


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
        for p in walk_tree(a.root, max_files=2000):
            if p.endswith((".h", ".hpp", ".hh")):
                for k, v in re.findall(
                    r"(?m)^\s*#\s*define\s+(\w*VERSION\w*)\s+\(?\"?([\w.]+)\"?\)?", read_file(p)[:20000]
                ):
                    defines.setdefault(k, v)
        raw = re.sub(r"\$\{(\w+)\}", lambda m: defines.get(m.group(1), m.group(0)), raw)
    m = re.search(r"m4_(?:include|esyscmd)\s*\(\s*\[?(?:[^\]\)]*?\s)?([\w./-]*VERSION[\w./-]*)", raw, re.I)
    if m or (raw and not VERSION_RE.match(raw)):
        for n in ([m.group(1)] if m else []) + ["VERSION", "version.txt", ".tarball-version", ".version"]:
            text = read_file(os.path.join(a.root, n)).strip().split()
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
        a.languages = languages_from_files(a.root if not subdir else os.path.join(root, subdir)) or ["c"]
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
    for p in walk_tree(a.root, max_files=3000):
        base = os.path.basename(p)
        if base == "meson.build":
            own += re.findall(r"\b(?:shared_|static_|both_)?library\s*\(\s*'([\w.+-]+)'", read_file(p))
        elif base == "Makefile.am":
            for libs in re.findall(r"(?m)^\s*\w*lib_(?:LT)?LIBRARIES\s*\+?=\s*(.*)$", read_file(p)):
                own += [re.sub(r"^lib|\.(la|a)$", "", x) for x in libs.split() if "$" not in x]
        elif base == "Makefile.in" and not os.path.isfile(os.path.join(os.path.dirname(p), "Makefile.am")):
            # written by hand, not by automake (Mini-XML): the library targets it names
            own += library_targets(make_targets(read_file(p)))
    a.build["own_names"] = list(dict.fromkeys(x for x in own if "$" not in x and "@" not in x))


def _test_facts(a, build_root):
    """What a stand-alone test can use: the flag the program's source answers, and for a
    library its name and the header to include."""
    sources = [p for p in walk_tree(build_root, max_files=1500) if os.path.splitext(p)[1] in LANG_EXT]
    text = "".join(read_file(p)[:200000] for p in sources[:200])
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
        for p in walk_tree(a.root, max_files=3000)
        if p.endswith(HEADER_EXTS)
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
        a.build["test_language"] = header_language(best[0], a.languages)
        # a file renamed for one kind only (utf8proc: OUTPUT_NAME utf8proc_static when static)
        # is found by its target's name for the other
        renamed = [t for t in a.build.get("own_targets", []) if t.lower() in lib.lower() and t != lib]
        # the same library under a name a build option picks (Mini-XML: libmxml, or libmxml4
        # by default): the test takes whichever the install has
        variants = [x for x in own if x != lib and x.lower().startswith(want)]
        files = list(dict.fromkeys([lib] + renamed[:1] + variants))
        if len(files) > 1:
            a.build["test_library_files"] = files


HEADER_EXTS = (".h", ".hpp", ".hh", ".hxx", ".h++")
CXX_HEADER = re.compile(
    r"(?m)^\s*(?:namespace\s+\w+|class\s+\w+[^;]*$|template\s*<|using\s+namespace\b"
    r"|#\s*include\s*<(?:string|vector|map|memory|cstddef|cstdint|cstdlib|cstring|cstdio|iostream|"
    r"utility|algorithm|functional|array|atomic|type_traits|limits|tuple)>)"
)


def header_language(path, languages):
    """The language a program including ``path`` is written in for the link test: C++ for a
    C++ header (by its name or what it says: snappy.h includes <string>), and for a project
    with no C at all; else C."""
    if path.endswith(HEADER_EXTS[1:]) or ("cxx" in languages and "c" not in languages):
        return "cxx"
    text = re.sub(r"(?s)/\*.*?\*/|//[^\n]*", "", read_file(path)[:200000])
    return "cxx" if CXX_HEADER.search(text) else "c"


def _fortran_module(a, lib):
    """A Fortran library (no C header): the module a program ``use``s, for the link test
    (test-drive's testdrive.mod); the one named like the library first."""
    mods = []
    for p in walk_tree(a.root, max_files=3000):
        if os.path.splitext(p)[1].lower() not in (".f90", ".f", ".f95", ".f03", ".f08"):
            continue
        if re.search(r"(^|/)(tests?|examples?|apps?)/", os.path.relpath(p, a.root)):
            continue
        mods += [m.lower() for m in re.findall(r"(?mi)^\s*module\s+(?!procedure\b)(\w+)\s*$", read_file(p))]
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
