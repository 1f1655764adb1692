"""Rule-based repair: read Spack's diagnostics, find what is wrong, edit the recipe text.

Findings come from the output of ``spack spec`` / ``spack install`` and from the build log
(CMake, pkg-config, Meson, configure, compiler and linker messages). Fixes edit the recipe
in place, keeping whatever else it says (it may come from a model):

- a missing dependency (``Could NOT find ZLIB``, ``No package 'r3tvec' found``,
  ``Dependency "r3tvec" not found``, ``fatal error: zlib.h``, ``cannot find -lz``...)
  -> ``depends_on(<spack name>)``, mapped with the package index;
- a missing ``pkg-config`` tool -> ``depends_on("pkgconfig", type="build")``;
- a dependency on a package no repository has -> the dependency is dropped;
- a checksum mismatch -> the checksum of the source we packed ourselves;
- CMake/Meson rejecting an unknown option, or ``make`` without an ``install`` target ->
  the build-system arguments are corrected;
- two flags glued into one (``-O3-fopenmp``: a recipe appends ``self.compiler.openmp_flag``
  to its flags without a space, harmless only where the flag starts with one) -> the
  space, wherever the recipe appends a compiler's flag.
"""

import ast
import json
import os
import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

from . import names, templates

FIXES = "templates/fixes.py.tmpl"  # the recipe text the fixes insert, under recipes/


@dataclass
class Finding:
    kind: str  # missing-dependency | missing-tool | unknown-package | checksum | unknown-option | no-install-target
    subject: str  # the project's name for the thing (ZLIB, r3tvec, zlib.h, -lz) or the option
    lookup: str  # cmake | pkgconfig | library | header | tool | spack | meson | cmake-option
    evidence: str  # the diagnostic line


PATTERNS = [
    (r"Could NOT find (\w+)\b", "missing-dependency", "cmake"),
    (r"Could not find a package configuration file provided by \"([^\"]+)\"", "missing-dependency", "cmake"),
    (r"By not providing \"Find([^\"]+)\.cmake\"", "missing-dependency", "cmake"),
    (r"No package '([^']+)' found", "missing-dependency", "pkgconfig"),
    (r"Package '([^']+)', required by '[^']*', not found", "missing-dependency", "pkgconfig"),
    (r"The following required packages were not found:\s*\n\s*-\s*([\w.+-]+)", "missing-dependency", "pkgconfig"),
    (r"Dependency \"([^\"]+)\" not found", "missing-dependency", "pkgconfig"),
    (r"Run-time dependency ([\w.+-]+) found: NO", "missing-dependency", "pkgconfig"),
    (r"C(?:\+\+)? (?:shared or static )?library '([\w.+-]+)' not found", "missing-dependency", "library"),
    (r"fatal error: ([\w/.+-]+\.h(?:pp)?): No such file or directory", "missing-dependency", "header"),
    (r"cannot find -l([\w+.-]+)", "missing-dependency", "library"),
    (r"checking for \w+ in -l([\w+.-]+)\.\.\. no", "missing-dependency", "library"),
    (
        r"(?:Could NOT find PkgConfig|pkg-config: (?:command )?not found|Pkg-config binary for machine \S+ not found"
        r"|The pkg-config script could not be found|PKG_PROG_PKG_CONFIG: command not found)",
        "missing-tool",
        "tool",
    ),
    (r"Package '(?:spack\.pkg\.\w+\.|spack_repo\.\w+\.packages\.)?([\w.-]+)' not found", "unknown-package", "spack"),
    (r"sha256 checksum failed for (\S+)", "checksum", "spack"),
    (r"ERROR: Unknown options?: \"?([\w.,:-]+)", "unknown-option", "meson"),
    (r"No rule to make target '?install'?", "no-install-target", "make"),
    (r"the prefix (\S+) has nothing in bin/, lib/ or include/", "empty-install", "spack"),
    # two flags glued: clang's "invalid integral value '3-fopenmp' in '-O3-fopenmp'", or its
    # "unknown argument: '-g-fopenmp'"
    (r"invalid integral value '[^']*' in '(-O\w*-[\w=+,.-]+)'", "glued-flags", "compiler"),
    (r"unknown argument: '(-\w+-f[\w=+,.-]+)'", "glued-flags", "compiler"),
    # a header that wants a macro on the compile line (LULESH: "You should specify USE_MPI=0 or
    # USE_MPI=1 on the compile line") -> a variant that sets it
    (r"#\s*error\b[^\n]*?\b(?:specify|define|set)\s+-?D?([A-Z][A-Z0-9_]{2,})\b", "required-macro", "make"),
    # a compiler the Makefile names by path or by a name this machine lacks -> Spack's compiler.
    # "Permission denied": Spack's build PATH holds lib/spack/env, where `gcc` is a directory
    # (the gcc wrappers'), and make 4.3 runs a bare command by its own PATH search and stops
    # there (SimpleMOC's `CC = gcc` built %clang).
    (
        r"(?:make(?:\[\d+\])?: |/bin/sh: (?:\d+: )?)((?:/[\w.+-]+)*/?(?:mpi)?[\w.-]*(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+|"
        r"icc|icpc|icx|icpx|gfortran|ifort|f90|f95|mpicxx|mpig\+\+|mpic\+\+)): (?:No such file or directory|not found|"
        r"Command not found|Permission denied)",
        "missing-compiler",
        "make",
    ),
    # configure without its auxiliary scripts (a git tree, or one autoreconf ran on without
    # --install) -> configure regenerated with them
    (
        r"(cannot find required auxiliary files?|cannot find install-sh, install\.sh, or shtool|"
        r"cannot run /bin/sh \S*config\.sub)",
        "autotools-aux",
        "autotools",
    ),
    # a tool autoreconf runs that no dependency gives (popt's AM_GNU_GETTEXT: autopoint)
    (r"Can't exec \"(autopoint|gettextize|intltoolize|gtkdocize)\"", "missing-dependency", "tool"),
    # a language the build compiles that the recipe does not depend on (Spack gives no
    # compiler for it)
    (r"No CMAKE_(C|CXX)_COMPILER could be found", "missing-language", "cmake"),
    (r"CMAKE_(C|CXX)_COMPILER not set, after EnableLanguage", "missing-language", "cmake"),
    (r"configure: error: (C|C\+\+) compiler cannot create executables", "missing-language", "autotools"),
    (r"configure: error: no acceptable (C) compiler found in \$PATH", "missing-language", "autotools"),
    (r"Unknown compiler\(s\): \[\['(cc|c\+\+)'", "missing-language", "meson"),
    # a goal the recipe asked for that the Makefile does not have
    (r"No rule to make target '([^']+)'\.\s+Stop", "unknown-target", "make"),
    # a subdirectory the tarball lacks (a git submodule) -> the option that adds it off
    (r"add_subdirectory given source\s+\"([^\"]+)\"\s+which is not an\s+existing", "missing-subdirectory", "cmake"),
    # a Fortran compiler the build wants and the machine lacks -> the option that wants it off
    (
        r"(No CMAKE_Fortran_COMPILER could be found|Could not find compiler set in environment variable FC|"
        r"Fortran compiler (?:not found|cannot create executables)|f(?:77|95|ortran): (?:Command )?not found|"
        r"does not have a Fortran (?:77|90) compiler configured)",
        "missing-fortran",
        "cmake",
    ),
    # offline, a dependency whose source cannot be fetched (optional ones go behind a variant)
    (
        r"(?:All fetchers failed for|Failed to fetch|Error: No (?:valid )?URL)[^\n]*?spack-stage-([a-z0-9][\w.-]*?)-\d[\w.]*-[a-z0-9]{32}",
        "unfetchable",
        "spack",
    ),
]


def diagnose(text, patterns=None) -> List[Finding]:
    """Findings in a block of diagnostics, in order, without duplicates."""
    out, seen = [], set()
    for pat, kind, lookup in PATTERNS if patterns is None else patterns:
        for m in re.finditer(pat, text):
            subject = m.group(1) if m.groups() else "pkg-config"
            if kind == "missing-tool":
                subject = "pkg-config"
            line_start = text.rfind("\n", 0, m.start()) + 1
            line_end = text.find("\n", m.end())
            evidence = text[line_start : line_end if line_end > 0 else len(text)].strip()[:300]
            key = (kind, subject)
            if key in seen:
                continue
            seen.add(key)
            out.append(Finding(kind, subject, lookup, evidence))
    return out


# -- recipe text edits --------------------------------------------------------------------


def _package_class(tree):
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not any(
            (getattr(b, "id", None) or getattr(b, "attr", "")).endswith("Builder") for b in node.bases
        ):
            return node
    return None


def _call_name(stmt):
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        f = stmt.value.func
        return getattr(f, "id", None) or getattr(f, "attr", None)
    return None


def declared_dependencies(text):
    """[(name, when or None)] of the class-level depends_on directives."""
    tree = ast.parse(text)
    cls = _package_class(tree)
    out = []
    if cls is None:
        return out

    def visit(stmts, when):
        for s in stmts:
            if _call_name(s) == "depends_on" and s.value.args and isinstance(s.value.args[0], ast.Constant):
                name = re.split(r"[@+~%^ ]", str(s.value.args[0].value))[0]
                w = next(
                    (k.value.value for k in s.value.keywords if k.arg == "when" and isinstance(k.value, ast.Constant)),
                    None,
                )
                out.append((name, w or when))
            elif isinstance(s, ast.With):
                visit(s.body, "with")

    visit(cls.body, None)
    return out


def add_dependency(text, spack_name, types=("build", "link")) -> Optional[str]:
    """The recipe with ``depends_on(spack_name)`` added (None if already unconditional)."""
    if any(n == spack_name and w is None for n, w in declared_dependencies(text)):
        return None
    tree = ast.parse(text)
    cls = _package_class(tree)
    if cls is None:
        return None
    anchor = None
    for s in cls.body:
        if _call_name(s) == "depends_on":
            anchor = s
    if anchor is None:
        for s in cls.body:
            if _call_name(s) in ("version", "variant", "license"):
                anchor = s
    lines = text.splitlines(True)
    from .generate import dependency_line

    new = dependency_line(spack_name, types)
    if anchor is None:
        first = cls.body[0]
        indent = " " * first.col_offset
        at = first.end_lineno
    else:
        indent = " " * anchor.col_offset
        at = anchor.end_lineno
    lines.insert(at, indent + templates.render(FIXES, "added_dependency", line=new) + "\n")
    return "".join(lines)


def remove_dependency(text, spack_name) -> Optional[str]:
    tree = ast.parse(text)
    cls = _package_class(tree)
    if cls is None:
        return None
    drop = []

    def visit(stmts):
        for s in stmts:
            if (
                _call_name(s) == "depends_on"
                and s.value.args
                and isinstance(s.value.args[0], ast.Constant)
                and re.split(r"[@+~%^ ]", str(s.value.args[0].value))[0] == spack_name
            ):
                drop.append((s.lineno, s.end_lineno))
            elif isinstance(s, ast.With):
                visit(s.body)

    visit(cls.body)
    if not drop:
        return None
    lines = text.splitlines(True)
    for start, end in sorted(drop, reverse=True):
        del lines[start - 1 : end]
    out = "".join(lines)
    try:
        ast.parse(out)
    except SyntaxError:  # a `with when()` block lost its only statement
        return None
    return out


def set_checksum(text, sha256) -> Optional[str]:
    new = re.sub(r"sha256\s*=\s*[\"'][0-9a-fA-F]*[\"']", 'sha256="%s"' % sha256, text)
    return new if new != text else None


def remove_option(text, option) -> Optional[str]:
    """Drop build-system arguments that mention an option the build system rejected."""
    lines = text.splitlines(True)
    keep = [ln for ln in lines if not re.search(r"[\"'](?:-D)?%s\b" % re.escape(option), ln)]
    if len(keep) == len(lines):
        return None
    out = "".join(keep)
    try:
        ast.parse(out)
    except SyntaxError:
        return None
    return out


def set_variant_default(text, name, default) -> Optional[str]:
    pat = r"(variant\(\s*[\"']%s[\"']\s*,\s*default=)(True|False)" % re.escape(name)
    new = re.sub(pat, lambda m: m.group(1) + str(bool(default)), text)
    return new if new != text else None


def _variants(text):
    return re.findall(r"variant\(\s*[\"']([\w-]+)[\"']\s*,\s*default=(True|False)", text)


def make_optional(text, spack_name) -> Optional[str]:
    """``depends_on(spack_name)`` moved behind a new variant of its name, off by default."""
    name = re.sub(r"\W+", "_", spack_name)
    if name in dict(_variants(text)):
        return None
    pat = r"(depends_on\(\s*[\"']%s[\"'][^)\n]*?)\)" % re.escape(spack_name)
    new, n = re.subn(pat, lambda m: m.group(1) + ', when="+%s")' % name, text, count=1)
    if not n:
        return None
    tree = ast.parse(new)
    cls = _package_class(tree)
    anchor = None
    for st in cls.body:
        if _call_name(st) in ("version", "variant"):
            anchor = st
    lines = new.splitlines(True)
    lines.insert(
        (anchor or cls.body[0]).end_lineno,
        templates.render(
            FIXES,
            "macro_variant",
            name='"%s"' % name,
            description='"Build with %s (optional; cannot be fetched here)"' % spack_name,
        )
        + "\n",
    )
    out = "".join(lines)
    try:
        ast.parse(out)
    except SyntaxError:
        return None
    return out


def add_macro_variant(text, macro) -> Optional[str]:
    """A variant that puts ``-D<macro>=1|0`` on the compile line (off by default: 0)."""
    from .analyze import variant_name

    name = variant_name(macro)
    if re.search(r"def flag_handler\(", text) or ("-D%s=" % macro) in text:
        return None
    lines = text.splitlines(True)
    tree = ast.parse(text)
    cls = _package_class(tree)
    if cls is None:
        return None
    if name not in dict(_variants(text)):
        anchor = None
        for st in cls.body:
            if _call_name(st) in ("version", "variant"):
                anchor = st
        at = (anchor or cls.body[0]).end_lineno
        lines.insert(
            at,
            templates.render(
                FIXES, "macro_variant", name='"%s"' % name, description='"Build with -D%s=1 (else 0)"' % macro
            )
            + "\n",
        )
    else:
        text2 = set_variant_default(text, name, False)
        lines = (text2 or text).splitlines(True)
    out = (
        "".join(lines).rstrip("\n")
        + "\n\n"
        + templates.render(FIXES, "flag_handler", macro=macro, when='"+%s"' % name)
        + "\n"
    )
    try:
        ast.parse(out)
    except SyntaxError:
        return None
    return out


def add_make_argument(text, arg) -> Optional[str]:
    """``arg`` (a Python expression) first in ``build_targets`` (and ``install_targets``):
    in the list they return, or before what they return where that is built in steps
    (SimpleMOC's ``targets = []; ...; return targets``); a ``build_targets`` where there is
    none."""
    if arg in text:
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    lines = text.splitlines(keepends=True)
    edits = []  # (line, col, end_line, end_col, replacement), spliced from the last up
    cls = _package_class(tree)
    for fn in cls.body if cls else []:
        if not isinstance(fn, ast.FunctionDef) or fn.name not in ("build_targets", "install_targets"):
            continue
        for ret in (n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None):
            v = ret.value
            if isinstance(v, ast.List):  # [a, b] -> [arg, a, b]
                edits.append((v.lineno, v.col_offset + 1, v.lineno, v.col_offset + 1, arg + (", " if v.elts else "")))
            else:  # targets -> [arg] + list(targets)
                seg = ast.get_source_segment(text, v)
                edits.append((v.lineno, v.col_offset, v.end_lineno, v.end_col_offset, "[%s] + list(%s)" % (arg, seg)))
    if edits:
        for line, col, end_line, end_col, rep in sorted(edits, reverse=True):
            # (ast's columns count UTF-8 bytes)
            head, tail = lines[line - 1].encode()[:col].decode(), lines[end_line - 1].encode()[end_col:].decode()
            lines[line - 1 : end_line] = [head + rep + tail]
        new = "".join(lines)
    else:
        new = text.rstrip("\n") + "\n\n    @property\n    def build_targets(self):\n        return [%s]\n" % arg
    try:
        ast.parse(new)
    except SyntaxError:
        return None
    return new


def remove_target(text, target) -> Optional[str]:
    new = re.sub(r"[\"']%s[\"'],\s*|,\s*[\"']%s[\"'](?=\s*\])" % (re.escape(target), re.escape(target)), "", text)
    return new if new != text else None


def _makefile_var_for(root, command):
    """The Makefile variable (of the tree at ``root``) whose value names ``command``
    (``CXX=/usr/local/bin/g++``)."""
    from .analyze import COMPILERS, read_file, walk_tree

    found = []
    for p in walk_tree(root, max_files=2000):
        if re.match(r"^(GNUmakefile|[Mm]akefile(\.\w+)?)$", os.path.basename(p)):
            found += re.findall(r"(?m)^\s*([A-Za-z_]\w*)\s*[:?+]?=\s*(\S+)", read_file(p))
    kind = COMPILERS.get(os.path.basename(command).replace("mpi", ""), "cc")
    if "++" in command or "cxx" in command:
        kind = "cxx"
    # the very path first, then the same program named another way
    for same in (lambda v: v == command, lambda v: os.path.basename(v) == os.path.basename(command)):
        for var, val in found:
            if same(val):
                return var, kind
    return None, None


def _guarding_option(analysis, subdir):
    """The variant whose option guards ``add_subdirectory(subdir)`` in the CMake files."""
    from .analyze import read_file, walk_tree

    options = {v.option: v.name for v in analysis.variants}
    base = os.path.basename(subdir.rstrip("/"))
    for p in walk_tree(analysis.root, max_files=2000):
        if os.path.basename(p) != "CMakeLists.txt":
            continue
        text = read_file(p)
        m = re.search(r"add_subdirectory\s*\(\s*[\"']?[^)\s]*%s\b" % re.escape(base), text)
        if not m:
            continue
        for opt in reversed(re.findall(r"\bif\s*\(\s*(?:\$\{)?(\w+)\}?\s*\)", text[: m.start()])):
            if opt in options:
                return options[opt]
    return None


def unfetchable_roots(spec_file, subject):
    """Names (package and virtuals) of the root's direct dependencies that lead to the package
    ``subject`` in a concretized spec.json."""
    try:
        with open(spec_file) as f:
            nodes = json.load(f)["spec"]["nodes"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    by_hash = {n.get("hash"): n for n in nodes}

    def reaches(node, seen):
        if node is None or node.get("hash") in seen:
            return False
        seen.add(node.get("hash"))
        if node.get("name") == subject:
            return True
        return any(reaches(by_hash.get(e.get("hash")), seen) for e in node.get("dependencies", []))

    out = []
    for e in nodes[0].get("dependencies", []):
        if reaches(by_hash.get(e.get("hash")), set()):
            out += [e.get("name")] + list((e.get("parameters") or {}).get("virtuals") or [])
    return out


AUTOTOOLS = ("autoconf", "automake", "libtool", "m4")


def regenerate_configure(text) -> Tuple[Optional[str], Optional[str]]:
    """configure regenerated (``force_autoreconf``, the autotools as build dependencies);
    where it already was, an ``autoreconf`` that also copies automake's auxiliary scripts."""
    new = text
    for tool in AUTOTOOLS:
        new = add_dependency(new, tool, ("build",)) or new
    cls = _package_class(ast.parse(new))
    if cls is None:
        return None, None
    has = {getattr(t, "id", None) for st in cls.body if isinstance(st, ast.Assign) for t in st.targets}
    methods = {st.name for st in cls.body if isinstance(st, ast.FunctionDef)}
    if "force_autoreconf" not in has:
        section, what = "force_autoreconf", "configure is regenerated (force_autoreconf, the autotools)"
    elif "autoreconf" not in methods:
        section, what = "autoreconf_aux", "autoreconf also copies automake's auxiliary scripts"
    else:
        return None, None
    anchor = next((st for st in reversed(cls.body) if _call_name(st) in ("depends_on", "version", "variant")), None)
    at = (anchor or cls.body[0]).end_lineno
    lines = new.splitlines(True)
    lines.insert(at, "\n" + templates.render(FIXES, section) + "\n")
    out = "".join(lines)
    try:
        ast.parse(out)
    except SyntaxError:
        return None, None
    return out, what


# ``flags += self.compiler.openmp_flag`` (or ``+``): the flag appended with no space before it
_GLUED = re.compile(r"(?<![\"'] )(\+=?[ \t]*)(self\.compiler\.[a-z0-9_]+_flag)\b")


def separate_glued_flags(text) -> Optional[str]:
    """A space before each compiler flag the recipe appends to a flags string; None where
    it appends none without one."""
    new = _GLUED.sub(lambda m: '%s" " + %s' % (m.group(1), m.group(2)), text)
    return new if new != text else None


def apply(
    text, findings, index, analysis=None, source=None, spec_file=None, tree=None
) -> Tuple[Optional[str], List[str]]:
    """Apply every fix the findings call for; (new text or None, descriptions). ``tree``:
    the source directory that was built, where there is no ``analysis`` of it."""
    root = analysis.root if analysis is not None else tree
    done = []
    current = text
    for f in findings:
        new, what = None, None
        if f.kind == "missing-dependency":
            spack_name, system = names.resolve_name(f.subject, f.lookup, index)
            if spack_name and (analysis is None or spack_name != analysis.name):
                new = add_dependency(current, spack_name, ("build",) if f.lookup == "tool" else ("build", "link"))
                what = "added depends_on(%r) for %s (%s)" % (spack_name, f.subject, f.evidence)
        elif f.kind == "missing-tool":
            new = add_dependency(current, "pkgconfig", ("build",))
            what = "added depends_on('pkgconfig', type='build') (%s)" % f.evidence
        elif f.kind == "unknown-package":
            new = remove_dependency(current, f.subject)
            what = "dropped depends_on(%r): no configured repository has it" % f.subject
        elif f.kind == "checksum" and source is not None and source.sha256:
            new = set_checksum(current, source.sha256)
            what = "restored the sha256 of the source tarball"
        elif f.kind == "unknown-option":
            for opt in re.split(r"[,\s]+", f.subject):
                opt = opt.split(":")[-1]
                cand = remove_option(new or current, opt) if opt else None
                if cand:
                    new = cand
            what = "removed arguments for unknown option(s) %s" % f.subject
        elif f.kind in ("no-install-target", "empty-install") and analysis is not None:
            exes = analysis.executables or [c.exe for c in analysis.checks]
            if analysis.build_system in ("cmake", "meson") and exes:
                new = _install_found(current, exes)  # built out of the source tree
            else:
                new = _install_method(
                    current, exes, "self.build_directory" if analysis.build.get("build_directory") else '"."'
                )
            what = "replaced `make install` by an install() of %s" % (", ".join(exes) or "the build tree")
        elif f.kind == "required-macro":
            new = add_macro_variant(current, f.subject)
            what = "added a variant for -D%s=1|0, which a header requires (%s)" % (f.subject, f.evidence)
        elif f.kind == "missing-compiler" and root:
            var, kind = _makefile_var_for(root, f.subject)
            if var:
                new = add_make_argument(
                    current, '"%s={0}".format(%s)' % (var, {"cxx": "spack_cxx", "fc": "spack_fc"}.get(kind, "spack_cc"))
                )
                what = "passed %s= from Spack's compiler for %s (%s)" % (var, f.subject, f.evidence)
        elif f.kind == "autotools-aux":
            new, what = regenerate_configure(current)
            what = what and "%s (%s)" % (what, f.evidence)
        elif f.kind == "missing-language":
            lang = {"C": "c", "CXX": "cxx", "C++": "cxx", "cc": "c", "c++": "cxx"}[f.subject]
            new = add_dependency(current, lang, ("build",))
            what = "added depends_on(%r, type='build'): the build compiles %s (%s)" % (lang, f.subject, f.evidence)
        elif f.kind == "glued-flags":
            new = separate_glued_flags(current)
            what = "put a space before each compiler flag the recipe appends (%s)" % f.evidence
        elif f.kind == "unknown-target":
            new = remove_target(current, f.subject)
            what = "dropped make target %r, which the Makefile does not have" % f.subject
        elif f.kind in ("missing-subdirectory", "missing-fortran") and analysis is not None:
            if f.kind == "missing-subdirectory":
                names_off = [_guarding_option(analysis, f.subject)]
            else:
                names_off = [
                    v.name
                    for v in analysis.variants
                    if re.search(r"fortran|zforp|\bf(77|90)\b", v.name + " " + v.option + " " + v.description, re.I)
                ]
            for name in filter(None, names_off):
                cand = set_variant_default(new or current, name, False)
                if cand:
                    new = cand
            what = "turned off variant(s) %s: %s" % (", ".join(filter(None, names_off)), f.evidence)
            goals = [t for t in analysis.build.get("all_targets", []) if not re.search(r"fortran|zforp|f90", t, re.I)]
            if f.kind == "missing-fortran" and not new and analysis.build_system == "makefile" and goals:
                # make's default goal builds a Fortran program nobody asked for: name the others
                new = add_make_argument(current, ", ".join('"%s"' % t for t in goals))
                what = "asked make for %s only, not its default goal (%s)" % (", ".join(goals), f.evidence)
        elif f.kind == "unfetchable" and spec_file:
            roots = set(unfetchable_roots(spec_file, f.subject))
            off = []
            for dep, when in declared_dependencies(current):
                if dep in roots and when and re.match(r"^\+[\w-]+$", when):
                    cand = set_variant_default(new or current, when[1:], False)
                    if cand:
                        new = cand
                        off.append(when[1:])
            # an unconditional dependency the project can do without: behind a variant, off
            optional = {d.spack for d in (analysis.dependencies if analysis else []) if d.spack and not d.required}
            for dep, when in declared_dependencies(new or current):
                if dep in roots and when is None and dep in optional:
                    cand = make_optional(new or current, dep)
                    if cand:
                        new = cand
                        off.append(re.sub(r"\W+", "_", dep))
            what = "turned off variant(s) %s: %s cannot be fetched offline" % (", ".join(off), f.subject)
        if new and new != current:
            current = new
            done.append(what)
    return (current if done else None), done


def _install_found(text, exes) -> Optional[str]:
    """``install()`` of the programs found in the build tree, replacing the recipe's own."""
    tree = ast.parse(text)
    cls = _package_class(tree)
    if cls is None:
        return None
    lines = text.splitlines(True)
    for st in sorted(cls.body, key=lambda n: -n.lineno):
        if isinstance(st, ast.FunctionDef) and st.name in ("install_targets", "install"):
            start = min([d.lineno for d in st.decorator_list] + [st.lineno])
            del lines[start - 1 : st.end_lineno]
    body = templates.render("templates/package.py.tmpl", "install_found", exes=", ".join(repr(e) for e in exes))
    out = "".join(lines).rstrip("\n") + "\n\n" + body + "\n"
    try:
        ast.parse(out)
    except SyntaxError:
        return None
    return out


def _install_method(text, exes, where='"."') -> Optional[str]:
    tree = ast.parse(text)
    cls = _package_class(tree)
    if cls is None:
        return None
    lines = text.splitlines(True)
    for s in sorted(cls.body, key=lambda n: -n.lineno):
        if isinstance(s, ast.FunctionDef) and s.name in ("install_targets", "install"):
            start = min([d.lineno for d in s.decorator_list] + [s.lineno])
            del lines[start - 1 : s.end_lineno]
    body = [templates.render(FIXES, "install", where=where)]
    body += [templates.render(FIXES, "install_program", exe=repr(e)) for e in exes] or [
        templates.render(FIXES, "install_tree")
    ]
    out = "".join(lines).rstrip("\n") + "\n\n" + "".join(b + "\n" for b in body)
    try:
        ast.parse(out)
    except SyntaxError:
        return None
    return out
