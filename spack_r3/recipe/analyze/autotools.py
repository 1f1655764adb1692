"""Autotools: configure.ac's AC_ARG_ENABLE / AC_ARG_WITH options, its libraries and
packages, and the subdirectories it expects."""

import os
import re

from .facts import (
    Analysis,
    Dependency,
    RecipeVariant,
    SYSTEM_LIBS,
    languages_from_files,
    read_file,
    strip_comments,
    variant_name,
)
from .makefile import makefile_checks
from .meson import meson_calls


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
        for args, pos in meson_calls(text, macro):
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
    for args, pos in meson_calls(text, "AS_IF"):
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
        text = strip_comments(read_file(ac), "dnl ")
        for args, _ in meson_calls(text, "AC_INIT"):
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
            for args, _ in meson_calls(text, macro):
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
        for args, pos in meson_calls(text, "AC_CHECK_LIB"):
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
        for args, pos in meson_calls(text, "AC_SEARCH_LIBS"):
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
        for args, pos in meson_calls(text, "PKG_CHECK_MODULES"):
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
    a.languages = langs or languages_from_files(a.root)
    _autotools_missing_subdirs(a)
    makefile_checks(a, [os.path.join(a.root, n) for n in ("Makefile.in", "Makefile.am")])
    if not a.build["configure_present"]:
        a.notes.append("no configure script: the recipe regenerates it (autoconf, automake, libtool)")


def _autotools_missing_subdirs(a: Analysis):
    """A SUBDIRS entry of Makefile.am missing from the tree (a git submodule the tarball lacks:
    jq's vendor/oniguruma): automake refuses to run without its directory, so the recipe makes
    it empty, and the option named like it is off (--without-oniguruma), never built."""
    text = read_file(os.path.join(a.root, "Makefile.am"))
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
