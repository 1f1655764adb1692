"""Small, careful helpers for editing textual LLVM IR.

Record edits clang-19's own text (so clang-19 can compile it back), replay edits
llvmlite's; both only touch top-level lines (definitions, globals, attribute
groups) whose grammar is stable across LLVM versions.
"""

import re

_IDENT = re.compile(r"^[-a-zA-Z$._][-a-zA-Z$._0-9]*$")
_OPEN, _CLOSE = "([{<", ")]}>"

LINKAGE_WORDS = {
    "private",
    "internal",
    "available_externally",
    "linkonce",
    "weak",
    "common",
    "appending",
    "extern_weak",
    "linkonce_odr",
    "weak_odr",
    "external",
    "default",
    "hidden",
    "protected",
    "dllimport",
    "dllexport",
    "dso_local",
    "dso_preemptable",
}


def global_ref(name):
    """``@name`` as LLVM text, quoted when the name needs it."""
    if _IDENT.match(name):
        return "@" + name
    return '@"%s"' % "".join(c if (0x20 <= ord(c) < 0x7F and c not in '"\\') else "\\%02X" % ord(c) for c in name)


def c_string(value):
    """An LLVM ``c"..."`` constant (with the terminating NUL) and its array length."""
    data = value.encode() + b"\0"
    body = "".join(chr(b) if (0x20 <= b < 0x7F and b not in (34, 92)) else "\\%02X" % b for b in data)
    return 'c"%s"' % body, len(data)


def _scan(text, start=0):
    """(index, char, bracket depth after it, inside a string?) for each character."""
    depth, quote = 0, False
    for i in range(start, len(text)):
        c = text[i]
        if c == '"':
            quote = not quote
        elif not quote:
            depth += (c in _OPEN) - (c in _CLOSE)
        yield i, c, depth, quote


def matching(text, start):
    """Index just past the bracket that closes the one at ``text[start]``."""
    for i, c, depth, quote in _scan(text, start):
        if depth == 0 and not quote and c in _CLOSE:
            return i + 1
    raise ValueError("unbalanced brackets in IR: %r" % text[start : start + 80])


def split_top(text, sep=","):
    """Split at ``sep`` where no bracket or quote is open."""
    parts, last = [], 0
    for i, c, depth, quote in _scan(text):
        if c == sep and depth == 0 and not quote:
            parts.append(text[last:i].strip())
            last = i + 1
    tail = text[last:].strip()
    if tail or parts:
        parts.append(tail)
    return parts


def name_pattern(name):
    """Regex matching ``@name`` (quoted or not) followed by ``(``."""
    quoted = re.escape(global_ref(name))
    plain = re.escape("@" + name)
    return "(?:%s|%s|%s)" % (plain, quoted, re.escape('@"%s"' % name))


class FunctionDef:
    """The ``define`` line of one function, split into its parts.

    ``prefix`` is what stands between ``define`` and the name (linkage, return
    attributes, return type), ``params`` the parameter texts, ``suffix`` what
    follows the parameter list up to the opening brace.
    """

    def __init__(self, line, name):
        m = re.match(r"^define\s+(.*?)(%s)\(" % name_pattern(name), line)
        if not m:
            raise ValueError("not the definition of %s" % name)
        self.line = line
        self.prefix = m.group(1).strip()
        open_paren = m.end() - 1
        close = matching(line, open_paren)
        self.params = split_top(line[open_paren + 1 : close - 1])
        self.suffix = line[close:].strip()
        if self.suffix.endswith("{"):
            self.suffix = self.suffix[:-1].strip()

    @property
    def linkage_free_prefix(self):
        return " ".join(t for t in self.prefix.split() if t not in LINKAGE_WORDS)

    def param_name(self, i):
        return self.params[i].split()[-1]

    def param_without_name(self, i):
        return self.params[i].rsplit(None, 1)[0]

    def render(self, name, prefix=None, suffix=None, params=None):
        parts = ["define", prefix if prefix is not None else self.prefix, global_ref(name)]
        head = " ".join(p for p in parts if p)
        tail = suffix if suffix is not None else self.suffix
        return "%s(%s)%s {" % (
            head,
            ", ".join(params if params is not None else self.params),
            (" " + tail) if tail else "",
        )


def find_define(lines, name):
    """Index of the line defining function ``name``."""
    pat = re.compile(r"^define\s.*?%s\(" % name_pattern(name))
    for i, line in enumerate(lines):
        if line.startswith("define") and pat.match(line):
            return i
    raise KeyError(name)


def strip_dbg(text):
    return re.sub(r"\s*!dbg\s+!\d+", "", text)
