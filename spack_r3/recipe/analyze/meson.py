"""Meson: options, dependency() calls, tests, from meson.build and meson_options.txt."""

import os
import re

from .facts import (
    Analysis,
    Dependency,
    RecipeCheck,
    RecipeVariant,
    SYSTEM_LIBS,
    TEST_OPTION_RE,
    read_file,
    strip_comments,
    variant_name,
    walk_tree,
)


def _meson_kwarg(text, key):
    m = re.search(r"\b%s\s*:\s*('([^']*)'|\[([^\]]*)\]|(true|false))" % key, text)
    if not m:
        return None
    if m.group(2) is not None:
        return m.group(2)
    if m.group(3) is not None:
        return re.findall(r"'([^']*)'", m.group(3))
    return m.group(4) == "true"


def meson_calls(text, func):
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
    files = [p for p in walk_tree(a.root) if os.path.basename(p) == "meson.build"]
    files.sort(key=lambda p: (p.count(os.sep), p))
    exe_vars = {}
    exes, tests, installed_exes = [], [], []
    for path in files:
        rel = os.path.relpath(path, a.root)
        text = strip_comments(read_file(path))
        for args, _ in meson_calls(text, "project"):
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
        for args, _ in meson_calls(text, "add_languages"):
            for lang in re.findall(r"'(\w+)'", re.split(r"\w+\s*:", args)[0]):
                lang = {"c": "c", "cpp": "cxx", "fortran": "fortran"}.get(lang)
                if lang and lang not in a.languages:
                    a.languages.append(lang)
        for args, start in meson_calls(text, "dependency"):
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
        for args, start in meson_calls(text, "find_library"):
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
        for args, start in meson_calls(text, "executable"):
            names = re.findall(r"'([^']*)'", args)
            if names:
                if _meson_kwarg(args, "install") is True:  # only those Meson installs
                    installed_exes.append(names[0])
                exes.append(names[0])
                pre = text[:start]
                m = re.search(r"(\w+)\s*=\s*$", pre)
                if m:
                    exe_vars[m.group(1)] = names[0]
        for args, _ in meson_calls(text, "test"):
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
        text = strip_comments(read_file(opt_file))
        for args, _ in meson_calls(text, "option"):
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
