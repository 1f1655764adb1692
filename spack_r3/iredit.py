"""LLVM IR editing: the one module that knows how IR is written and changes it.

Most edits are made on text, because most edited IR is read back by the record clang's
LLVM (19), which cannot read what llvmlite's LLVM (22) writes, bitcode or text: record's
probes and r3-apply's unit are compiled by clang-19, and replay's per-variant edits also
feed an ``opt-19 -polly`` stage (``compile/stages.py``). The edits only touch top-level
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


# -- names ---------------------------------------------------------------------------------

# A global's name as IR writes it: ``@plain`` or ``@"quoted, with \\XX escapes"``.
GLOBAL_NAME = r'@(?:"(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+)'
GLOBAL_REF = re.compile(GLOBAL_NAME)
_DEF_NAME = re.compile("(%s)\\(" % GLOBAL_NAME)  # the name a parameter list follows


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


# -- brackets and lists --------------------------------------------------------------------


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


# -- function definitions ------------------------------------------------------------------


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


def with_fn_attribute(suffix, attribute):
    """``suffix`` (what follows a define's parameter list) with the function attribute
    ``attribute`` (a keyword such as ``noinline``): after the attribute group, else after
    ``unnamed_addr`` and the address space, where LLVM's grammar puts it."""
    if re.search(r"(^|\s)%s(\s|$)" % re.escape(attribute), suffix):
        return suffix
    m = re.search(r"#\d+", suffix)
    if m:
        return suffix[: m.end()] + " " + attribute + suffix[m.end() :]
    words = suffix.split()
    i = 0
    while i < len(words) and (words[i] in ("unnamed_addr", "local_unnamed_addr") or words[i].startswith("addrspace(")):
        i += 1
    return " ".join(words[:i] + [attribute] + words[i:])


def find_define(lines, name):
    """Index of the line defining function ``name``."""
    pat = re.compile(r"^define\s.*?%s\(" % name_pattern(name))
    for i, line in enumerate(lines):
        if line.startswith("define") and pat.match(line):
            return i
    raise KeyError(name)


def local_ref(local):
    """A pattern matching the local value ``local`` (``%n``, ``%3``) as a whole name."""
    return re.compile(r"(?<![-\w$.%%])%s(?![-\w$.])" % re.escape(local))


def body_without_debug(lines):
    """A copy of a function body for a second function: the debug records and locations
    belong to the original's subprogram."""
    return [re.sub(r",?\s*!dbg\s+!\d+", "", x) for x in lines if "#dbg_" not in x and "@llvm.dbg." not in x]


def for_analysis(text):
    """``text`` for llvmlite's passes to analyse (never to run): without ``optnone`` (an -O0
    build's functions, which passes skip) and without target attributes (the record clang's
    name features llvmlite's LLVM may not know; it warns on stderr, once per function)."""
    text = re.sub(r"\boptnone\b", "", text)
    return re.sub(r'"target-(?:cpu|features)"="[^"]*"', "", text)


def strip_dbg(text):
    return re.sub(r"\s*!dbg\s+!\d+", "", text)


# -- reading a module ----------------------------------------------------------------------


def function_span(text, name):
    """(start, end) of function ``name``'s definition in ``text``: from ``define`` to just
    before its closing brace's line; None where ``text`` does not define it."""
    m = re.search(r"^define [^\n]*?%s\(" % name_pattern(name), text, re.M)
    if not m:
        return None
    end = text.find("\n}\n", m.start())
    return m.start(), end if end >= 0 else len(text)


def string_attributes(text, name):
    """The ``"key"="value"`` attributes of function ``name``'s definition (its attribute
    groups): {key: value}; {} where ``text`` does not define it."""
    lines = text.split("\n")
    try:
        tail = lines[find_define(lines, name)].rsplit(")", 1)[-1]
    except (KeyError, ValueError):
        return {}
    out = {}
    for group in re.findall(r"#(\d+)", tail):
        m = re.search(r"^attributes #%s = \{(.*)\}\s*$" % group, text, re.M)
        out.update(re.findall(r'"([^"]*)"="([^"]*)"', m.group(1)) if m else ())
    return out


def target_triple(text):
    """The module's target triple ("" where it names none)."""
    m = re.search(r'^target triple = "([^"]*)"', text, re.M)
    return m.group(1) if m else ""


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


def reachable(text, root):
    """The names ``root``'s definition in ``text`` refers to, and theirs in turn: what it
    may call (functions, declared or defined, and the globals on the way)."""
    bodies = {name: body for kind, name, body in split_module(text) if kind == "function"}
    seen, todo = set(), [root]
    while todo:
        name = todo.pop()
        for ref in GLOBAL_REF.findall(bodies.get(name, "").split("\n", 1)[-1]):
            callee = ref_name(ref)
            if callee not in seen:
                seen.add(callee)
                todo.append(callee)
    return seen


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


# -- whole-module edits: names, linkage, declarations --------------------------------------

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


def globals_to_addresses(text, at):
    """``text`` with each reference to a global of ``at`` ({name: address}) replaced by its
    address (``inttoptr``: no symbol to define at link time), its external declaration dropped."""

    def address(m):
        name = ref_name(m.group(0))
        return "inttoptr (i64 %d to ptr)" % at[name] if name in at else m.group(0)

    out = []
    for line in text.split("\n"):
        m = GLOBAL_REF.match(line)
        if m and ref_name(m.group(0)) in at and " external " in line:
            continue
        out.append(GLOBAL_REF.sub(address, line))
    return "\n".join(out)


def set_linkage(text, name, linkage):
    """``text`` (a function's definition first) with ``linkage`` (``internal``, ...; ""
    for external) in place of its own."""
    lines = text.split("\n")
    i = find_define(lines, name)
    d = FunctionDef(lines[i], name)
    lines[i] = d.render(name, prefix=("%s %s" % (linkage, d.linkage_free_prefix)).strip())
    return "\n".join(lines)


def redirect_calls(text, callee, other):
    """(text, calls): each ``call void @callee(`` made a call of ``other``."""
    old, new = "call void %s(" % global_ref(callee), "call void %s(" % global_ref(other)
    return text.replace(old, new), text.count(old)


def add_to_attribute_groups(text, names, attribute):
    """``attribute`` (``"key"="value"`` or a keyword) added to the attribute groups of the
    definitions of the functions ``names``."""
    groups = set()
    for line in text.split("\n"):
        if line.startswith("define ") and any(defines_function(line, n) for n in names):
            groups.update(re.findall(r"#(\d+)", line.rsplit(")", 1)[-1]))
    for g in groups:
        text = re.sub(r"^(attributes #%s = \{)" % g, lambda m: m.group(1) + " " + attribute, text, flags=re.M)
    return text


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


# -- instruction edits ---------------------------------------------------------------------

# A fork in optimized IR: ``tail call`` or not, its location argument with attributes
# (``ptr nonnull @1``).
_FORK = re.compile(
    r"^(\s*)(?:(?:tail|notail|musttail) )?call void \(ptr, i32, ptr, \.\.\.\) "
    r"@__kmpc_fork_call\((ptr(?: \w+)* @[-\w.$\"]+),",
    re.M,
)


def push_before_forks(text, fork, push, values):
    """(text, forks): before each call that ``fork`` matches (groups: its indentation, its
    location argument), the thread's id and ``call void @push(loc, i32 gtid, values)``: what
    clang compiles a ``num_threads`` or ``num_teams`` clause to."""
    count = [0]

    def before(m):
        count[0] += 1
        gtid = "%%r3.gtid.%d" % count[0]
        return "%s%s = call i32 @__kmpc_global_thread_num(%s)\n%scall void @%s(%s, i32 %s, %s)\n%s" % (
            m.group(1),
            gtid,
            m.group(2),
            m.group(1),
            push,
            m.group(2),
            gtid,
            values,
            m.group(0),
        )

    return fork.sub(before, text), count[0]


def push_num_threads(text, threads):
    """(text, forks): each OpenMP fork preceded by ``__kmpc_push_num_threads(threads)``,
    what ``num_threads(N)`` compiles to. (A text edit on llvmlite's own text: its binding
    has no way to insert a call.)"""
    text, forks = push_before_forks(text, _FORK, "__kmpc_push_num_threads", "i32 %d" % threads)
    if forks:
        text = ensure_declared(
            text,
            ["declare i32 @__kmpc_global_thread_num(ptr)", "declare void @__kmpc_push_num_threads(ptr, i32, i32)"],
        )
    return text, forks


def set_target(text, cpu, features):
    """Every function's ``target-cpu``, ``tune-cpu`` and ``target-features`` attributes set:
    they override the target machine's, so a variant for another target must change them."""
    text = re.sub(r'"target-cpu"="[^"]*"', '"target-cpu"="%s"' % cpu, text)
    text = re.sub(r'"target-features"="[^"]*"', '"target-features"="%s"' % features, text)
    return re.sub(r'"tune-cpu"="[^"]*"', '"tune-cpu"="%s"' % cpu, text)


_FP_OPS = re.compile(
    r"(= )(fadd|fsub|fmul|fdiv|frem|fneg)( (?:(?:fast|reassoc|nnan|ninf|nsz|arcp|contract|afn) )*)"
    r"((?:float|double|half|<\d+ x (?:float|double|half)>) )"
)
_FP_CALL = re.compile(
    r"(= (?:tail |notail |musttail )?call )((?:(?:fast|reassoc|nnan|ninf|nsz|arcp|contract|afn) )*)"
    r"((?:float|double|half|<\d+ x (?:float|double|half)>) @llvm\.)"
)
_FCMP = re.compile(r"(= fcmp )((?:(?:fast|reassoc|nnan|ninf|nsz|arcp|contract|afn) )*)")
_FMULADD = re.compile(
    r"^(\s*)(%[-\w.]+) = (?:tail )?call ((?:fast|reassoc|nnan|ninf|nsz|arcp|contract|afn) )*"
    r"(float|double|<\d+ x (?:float|double)>) @llvm\.fmuladd\.[\w.]+\("
    r"\4 (?:noundef )?([^,()]+), \4 (?:noundef )?([^,()]+), \4 (?:noundef )?([^,()]+)\)(.*)$",
    re.M,
)


def _merge_flags(existing, flags):
    have = set(existing.split())
    if "fast" in have:
        return existing
    return " " + " ".join(sorted(have | set(flags))) + " " if (have | set(flags)) else " "


_FAST_BUT_CONTRACT = "reassoc nnan ninf nsz arcp afn"


def _without_contract(flags):
    words = flags.split()
    words = [w for f in words for w in (_FAST_BUT_CONTRACT.split() if f == "fast" else [f]) if w != "contract"]
    return " " + " ".join(words) + " " if words else " "


def drop_contract(text):
    """The ``contract`` flag taken off every floating-point operation (flang marks its
    operations so, as clang does under -ffp-contract=fast); ``llvm.fmuladd`` calls stay."""
    return _FP_OPS.sub(lambda m: m.group(1) + m.group(2) + _without_contract(m.group(3)) + m.group(4), text)


def split_fmuladd(text):
    """Nothing left to fuse: each ``llvm.fmuladd`` call split into an ``fmul`` and an ``fadd``
    (clang's contractions), and the ``contract`` flag taken off every floating-point
    operation (``drop_contract``)."""
    text = drop_contract(text)

    def split(m):
        product = "%r3.fmul." + m.group(2)[1:]  # numbered ids take no suffix: a new name
        return "%s%s = fmul %s %s, %s\n%s%s = fadd %s %s, %s%s" % (
            m.group(1),
            product,
            m.group(4),
            m.group(5),
            m.group(6),
            m.group(1),
            m.group(2),
            m.group(4),
            product,
            m.group(7),
            m.group(8),
        )

    return _FMULADD.sub(split, text)


def add_fp_flags(text, flags):
    """The fast-math ``flags`` on every floating-point operation and intrinsic call, and
    those that apply to a comparison (nnan, ninf, nsz) on every ``fcmp``."""
    text = _FP_OPS.sub(lambda m: m.group(1) + m.group(2) + _merge_flags(m.group(3), flags) + m.group(4), text)
    text = _FP_CALL.sub(lambda m: m.group(1) + _merge_flags(m.group(2), flags).lstrip() + m.group(3), text)
    cmp_flags = [f for f in flags if f in ("nnan", "ninf", "nsz")]
    if cmp_flags:
        text = _FCMP.sub(lambda m: m.group(1) + _merge_flags(m.group(2), cmp_flags).lstrip(), text)
    return text


# A pointer parameter's type, its address space included (attributes follow the whole type:
# ``ptr addrspace(1) noalias %x``, never ``ptr noalias addrspace(1)``).
_PTR_TYPE = re.compile(r"^(ptr(?: addrspace\(\d+\))?) ")


def mark_noalias(text, kernel):
    """``kernel``'s pointer parameters marked ``noalias`` (in any address space)."""
    lines = text.split("\n")
    i = find_define(lines, kernel)
    d = FunctionDef(lines[i], kernel)
    params = [_PTR_TYPE.sub(r"\1 noalias ", p, count=1) if "noalias" not in p else p for p in d.params]
    lines[i] = d.render(kernel, params=params)
    return "\n".join(lines)


def edit_call_args(text, call, edit):
    """``text`` with the argument list of each call ``call`` (a compiled regex ending at the
    call's opening parenthesis) replaced by ``edit(args)``, args the argument texts."""
    out, last = [], 0
    for m in call.finditer(text):
        open_paren = m.end() - 1
        close = matching(text, open_paren)
        args = edit(split_top(text[open_paren + 1 : close - 1]))
        out += [text[last : open_paren + 1], ", ".join(args), ")"]
        last = close
    out.append(text[last:])
    return "".join(out)


# -- llvmlite ------------------------------------------------------------------------------

_native_ready = False


def set_thread_limit(text, n):
    """OpenMP kernels bounded to ``n`` threads a team, as clang-19 compiles a region with
    ``thread_limit(n)``: the kernel attributes and the kernel environment's MaxThreads."""
    text = re.sub(r'"omp_target_thread_limit"="\d+"', '"omp_target_thread_limit"="%d"' % n, text)
    text = re.sub(r'"nvvm\.maxntid"="\d+"', '"nvvm.maxntid"="%d"' % n, text)
    text = re.sub(
        r'"amdgpu-flat-work-group-size"="(\d+),\d+"',
        lambda m: '"amdgpu-flat-work-group-size"="%s,%d"' % (m.group(1), n),
        text,
    )
    return re.sub(
        r"(%struct\.ConfigurationEnvironmentTy \{ i8 \d+, i8 \d+, i8 \d+, i32 \d+, i32 )\d+",
        lambda m: m.group(1) + str(n),
        text,
    )


def amdgpu_kernels(text):
    """clang-19 marks OpenMP kernels for AMDGPU in ``!nvvm.annotations`` too, and LLVM 22's
    auto-upgrade then makes them ``ptx_kernel`` functions, which AMDGPU cannot lower: they
    become ``amdgpu_kernel`` again."""
    return re.sub(r"\bptx_kernel\b", "amdgpu_kernel", text)


# A call of inline asm that is only a comment, with one operand tied to its result (ROCm's
# ockl: "; ockl readfirstlane hoisting hack $0", "=v,0"): an identity, which stops LLVM
# moving the value, and emits no instruction.
_COMMENT_ASM = re.compile(
    r"^(\s*%[\w.$-]+) = (?:tail |notail |musttail )?call (\w+) asm (?:sideeffect )?\"\s*;[^\"]*\", "
    r"\"=[a-z],0\"\(\2 (?:noundef )?(%[\w.$-]+)\)[^\n]*$",
    re.M,
)


def drop_comment_asm(text):
    """``text`` with each comment-only inline asm identity (``_COMMENT_ASM``) a ``freeze``
    of its operand: llvmlite's LLVM has no assembler for a GPU target, so it cannot emit an
    object of inline asm, and these emit nothing."""
    return _COMMENT_ASM.sub(r"\1 = freeze \2 \3", text)


def init_native():
    """llvmlite's native target and assembly printer, once per process."""
    global _native_ready
    if not _native_ready:
        import llvmlite.binding as llvm  # (here: r3-apply edits units outside the plan without it)

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _native_ready = True
