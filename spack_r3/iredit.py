"""LLVM IR editing: the one module that knows how IR is written and changes it.

Most edits are made on text, because most edited IR is read back by the record clang's
LLVM (19), which cannot read what llvmlite's LLVM (22) writes, bitcode or text: record's
probes and r3-apply's unit are compiled by clang-19, and replay's per-variant edits also
feed an ``opt-19 -polly`` stage (``replay/stages.py``). The edits only touch top-level
lines (definitions, globals, attribute groups) and instruction shapes whose grammar is
the same in both LLVMs. A module that only llvmlite reads is changed through llvmlite's
setters (names, linkage, visibility) instead.
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


# A global's name as IR writes it: ``@plain`` or ``@"quoted, with \\XX escapes"``.
GLOBAL_NAME = r'@(?:"(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+)'
GLOBAL_REF = re.compile(GLOBAL_NAME)
_DEF_NAME = re.compile("(%s)\\(" % GLOBAL_NAME)  # the name a parameter list follows

_native_ready = False


def init_native():
    """llvmlite's native target and assembly printer, once per process."""
    global _native_ready
    if not _native_ready:
        import llvmlite.binding as llvm  # (here: r3-apply edits units outside the plan without it)

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _native_ready = True


def ref_name(ref):
    """The name an ``@name`` or ``@"..."`` reference stands for (escapes decoded)."""
    name = ref[1:]
    if name.startswith('"'):
        name = re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), name[1:-1])
    return name


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


def defines_function(line, name):
    """True when ``line`` is the ``define`` of function ``name``."""
    return line.startswith("define") and re.match(r"^define\s.*?%s\(" % name_pattern(name), line) is not None


def find_define(lines, name):
    """Index of the line defining function ``name``."""
    pat = re.compile(r"^define\s.*?%s\(" % name_pattern(name))
    for i, line in enumerate(lines):
        if line.startswith("define") and pat.match(line):
            return i
    raise KeyError(name)


def strip_dbg(text):
    return re.sub(r"\s*!dbg\s+!\d+", "", text)


def split_module(text):
    """Top-level entities of textual IR: list of (kind, name, text), kind one of
    ``function`` (a whole definition), ``global``, ``declare`` or ``other``."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("define "):
            j = i
            while lines[j] != "}":
                j += 1
            # (return attributes such as dereferenceable(8) may stand before the name)
            out.append(("function", ref_name(_DEF_NAME.search(line).group(1)), "\n".join(lines[i : j + 1])))
            i = j + 1
            continue
        if line.startswith("@"):
            out.append(("global", ref_name(GLOBAL_REF.match(line).group(0)), line))
        elif line.startswith("declare "):
            out.append(("declare", ref_name(_DEF_NAME.search(line).group(1)), line))
        else:
            out.append(("other", None, line))
        i += 1
    return out


def external_global(line):
    """``@g = <linkage> global T init, align N`` -> ``@g = external global T, align N``."""
    m = re.match(r"^(%s) = (.*)$" % GLOBAL_NAME, line)
    name, rest = m.group(1), m.group(2)
    words = rest.split(" ")
    k = 0
    while words[k] not in ("global", "constant"):
        k += 1
    kept = [w for w in words[:k] if w not in LINKAGE_WORDS and w not in ("unnamed_addr", "local_unnamed_addr")]
    tail = " ".join(words[k + 1 :])
    if tail[0] in "[{<":  # arrays, structs, packed structs, vectors
        end = matching(tail, 0)
        ty, rest2 = tail[:end], tail[end:]
    else:  # a scalar type, followed by the initializer, or (a declaration) by ", align N"
        m2 = re.match(r"([^\s,]+)(.*)$", tail)
        ty, rest2 = m2.group(1), m2.group(2)
    align = re.search(r", align (\d+)", rest2)
    return "%s = %s global %s%s" % (
        name,
        " ".join(["external"] + kept),
        ty,
        (", align " + align.group(1)) if align else "",
    )


def is_constant_global(line):
    """Whether a global's definition line makes it a ``constant``."""
    return re.match(r"^%s = [^=]*\bconstant\b" % GLOBAL_NAME, line) is not None


# -- whole-module edits: names, linkage, declarations ---------------------------------------

_GLOBAL_VAR = re.compile(r"^(%s) = ((?:[a-z_]+ )*?)(global|constant) " % GLOBAL_NAME, re.M)
_LOCAL_GLOBAL = re.compile(r" = ((?:[a-z_]+ )*?)(?:internal|private) ")
_LOCAL_FUNCTION = re.compile(r"^define ((?:[a-z_]+ )*?)(?:internal|private) ")


def global_variables(text):
    """(name, the words before ``global``/``constant``, writable) of each global variable."""
    return [(ref_name(m.group(1)), m.group(2).split(), m.group(3) == "global") for m in _GLOBAL_VAR.finditer(text)]


def function_prefix(text, name):
    """The words between ``define`` and the name of function ``name`` (linkage among them);
    None where ``text`` does not define it."""
    lines = text.split("\n")
    try:
        return FunctionDef(lines[find_define(lines, name)], name).prefix.split()
    except KeyError:
        return None


def rename_globals(text, renames):
    """Every reference to the globals and functions of ``renames`` ({old: new}) renamed."""

    def new(m):
        name = ref_name(m.group(0))
        return global_ref(renames[name]) if name in renames else m.group(0)

    return GLOBAL_REF.sub(new, text)


def make_hidden(text, names):
    """The internal or private definitions of ``names`` (globals and functions) made external
    with hidden visibility: the other objects of one link may name them, no library can."""
    names = set(names)
    lines = text.split("\n")
    for i, line in enumerate(lines):
        ref = GLOBAL_REF.match(line)
        if ref and ref_name(ref.group(0)) in names:
            lines[i] = _LOCAL_GLOBAL.sub(r" = \1hidden ", line, count=1)
        elif line.startswith("define ") and any(defines_function(line, n) for n in names):
            lines[i] = _LOCAL_FUNCTION.sub(r"define \1hidden ", line, count=1)
    return "\n".join(lines)


def declare_only(text, names):
    """``text`` with the ``define`` of each of the functions ``names`` replaced by a declaration."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        line = lines[i]
        name = next((n for n in names if defines_function(line, n)), None)
        if name is None:
            out.append(line)
            i += 1
            continue
        d = FunctionDef(line, name)
        prefix = " ".join(w for w in d.prefix.split() if w not in LINKAGE_WORDS or w in ("hidden", "dso_local"))
        suffix = re.sub(r"\b(personality|prefix|prologue|section|comdat|align|gc)\b.*$", "", d.suffix).strip()
        suffix = " ".join(w for w in suffix.split() if w.startswith("#") or w in ("unnamed_addr", "local_unnamed_addr"))
        out.append("declare %s %s(%s) %s" % (prefix, global_ref(name), ", ".join(_param_types(d)), suffix))
        while lines[i] != "}":
            i += 1
        i += 1
    return "\n".join(out)


def _param_types(d):
    """Parameter types with attributes, the names dropped (a declaration needs no names)."""
    out = []
    for p in d.params:
        words = p.split()
        out.append(" ".join(words[:-1]) if len(words) > 1 and words[-1].startswith("%") else p)
    return out


def ensure_declared(text, declarations):
    """``text`` with each of ``declarations`` (``declare`` lines) it does not declare yet."""
    for decl in declarations:
        name = ref_name(_DEF_NAME.search(decl).group(1))
        if not re.search(r"^declare [^\n]*%s\(" % name_pattern(name), text, re.M):
            text += "\n" + decl + "\n"
    return text


# -- instruction edits -----------------------------------------------------------------------

# A fork in optimized IR: ``tail call`` or not, its location argument with attributes
# (``ptr nonnull @1``).
_FORK = re.compile(
    r"^(\s*)(?:(?:tail|notail|musttail) )?call void \(ptr, i32, ptr, \.\.\.\) "
    r"@__kmpc_fork_call\((ptr(?: \w+)* @[-\w.$\"]+),",
    re.M,
)


def push_num_threads(text, threads):
    """(text, forks): each OpenMP fork preceded by ``__kmpc_push_num_threads(threads)``,
    what ``num_threads(N)`` compiles to. (A text edit on llvmlite's own text: its binding
    has no way to insert a call.)"""
    count = [0]

    def push(m):
        count[0] += 1
        gtid = "%%r3.gtid.%d" % count[0]
        return (
            "%s%s = call i32 @__kmpc_global_thread_num(%s)\n%scall void @__kmpc_push_num_threads(%s, i32 %s, "
            "i32 %d)\n%s" % (m.group(1), gtid, m.group(2), m.group(1), m.group(2), gtid, threads, m.group(0))
        )

    text = _FORK.sub(push, text)
    if count[0]:
        text = ensure_declared(
            text,
            ["declare i32 @__kmpc_global_thread_num(ptr)", "declare void @__kmpc_push_num_threads(ptr, i32, i32)"],
        )
    return text, count[0]
