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
  the build-system arguments are corrected.
"""

import ast
import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

from . import names, templates

FIXES = "templates/fixes.py.tmpl"  # the recipe text the fixes insert, under recipes/


@dataclass
class Finding:
    kind: str        # missing-dependency | missing-tool | unknown-package | checksum | unknown-option | no-install-target
    subject: str     # the project's name for the thing (ZLIB, r3tvec, zlib.h, -lz) or the option
    lookup: str      # cmake | pkgconfig | library | header | tool | spack | meson | cmake-option
    evidence: str    # the diagnostic line


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
    (r"(?:Could NOT find PkgConfig|pkg-config: (?:command )?not found|Pkg-config binary for machine \S+ not found"
     r"|The pkg-config script could not be found|PKG_PROG_PKG_CONFIG: command not found)", "missing-tool", "tool"),
    (r"Package '(?:spack\.pkg\.\w+\.|spack_repo\.\w+\.packages\.)?([\w.-]+)' not found", "unknown-package", "spack"),
    (r"sha256 checksum failed for (\S+)", "checksum", "spack"),
    (r"ERROR: Unknown options?: \"?([\w.,:-]+)", "unknown-option", "meson"),
    (r"No rule to make target '?install'?", "no-install-target", "make"),
]


def diagnose(text) -> List[Finding]:
    """Findings in a block of diagnostics, in order, without duplicates."""
    out, seen = [], set()
    for pat, kind, lookup in PATTERNS:
        for m in re.finditer(pat, text):
            subject = m.group(1) if m.groups() else "pkg-config"
            if kind == "missing-tool":
                subject = "pkg-config"
            line_start = text.rfind("\n", 0, m.start()) + 1
            line_end = text.find("\n", m.end())
            evidence = text[line_start:line_end if line_end > 0 else len(text)].strip()[:300]
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
                (getattr(b, "id", None) or getattr(b, "attr", "")).endswith("Builder") for b in node.bases):
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
                w = next((k.value.value for k in s.value.keywords
                          if k.arg == "when" and isinstance(k.value, ast.Constant)), None)
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
            if _call_name(s) == "depends_on" and s.value.args and isinstance(s.value.args[0], ast.Constant) \
                    and re.split(r"[@+~%^ ]", str(s.value.args[0].value))[0] == spack_name:
                drop.append((s.lineno, s.end_lineno))
            elif isinstance(s, ast.With):
                visit(s.body)
    visit(cls.body)
    if not drop:
        return None
    lines = text.splitlines(True)
    for start, end in sorted(drop, reverse=True):
        del lines[start - 1:end]
    out = "".join(lines)
    try:
        ast.parse(out)
    except SyntaxError:  # a `with when()` block lost its only statement
        return None
    return out


def set_checksum(text, sha256) -> Optional[str]:
    new = re.sub(r"sha256\s*=\s*[\"'][0-9a-fA-F]*[\"']", "sha256=\"%s\"" % sha256, text)
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


def apply(text, findings, index, analysis=None, source=None) -> Tuple[Optional[str], List[str]]:
    """Apply every fix the findings call for; (new text or None, descriptions)."""
    done = []
    current = text
    for f in findings:
        new, what = None, None
        if f.kind == "missing-dependency":
            spack_name, system = names.resolve_name(f.subject, f.lookup, index)
            if spack_name and (analysis is None or spack_name != analysis.name):
                new = add_dependency(current, spack_name)
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
        elif f.kind == "no-install-target" and analysis is not None:
            exes = analysis.executables or [c.exe for c in analysis.checks]
            new = _install_method(current, exes)
            what = "replaced `make install` by an install() of %s" % (", ".join(exes) or "the build tree")
        if new and new != current:
            current = new
            done.append(what)
    return (current if done else None), done


def _install_method(text, exes) -> Optional[str]:
    tree = ast.parse(text)
    cls = _package_class(tree)
    if cls is None:
        return None
    lines = text.splitlines(True)
    for s in sorted(cls.body, key=lambda n: -n.lineno):
        if isinstance(s, ast.FunctionDef) and s.name in ("install_targets", "install"):
            start = min([d.lineno for d in s.decorator_list] + [s.lineno])
            del lines[start - 1:s.end_lineno]
    body = [templates.render(FIXES, "install")]
    body += [templates.render(FIXES, "install_program", exe=repr(e)) for e in exes] or [
        templates.render(FIXES, "install_tree")]
    out = "".join(lines).rstrip("\n") + "\n\n" + "".join(b + "\n" for b in body)
    try:
        ast.parse(out)
    except SyntaxError:
        return None
    return out
