"""Loops, array accesses and side effects of a kernel, read off clang's JSON AST (``cast``).

What the ``rules`` mutator needs to decide that a rewrite is legal, kept apart from the
rules themselves:

    fn = Function(source)                      # the kernel's definition, indexed
    for loop in fn.loops():                    # every canonical ``for (i = lo; i < hi; i++)``
        fx = fn.effects(loop.body)             # what its body reads and writes
        fx.refusal                             # why it is beyond this analysis (None: it is not)
    key(expr)                                  # a canonical printout: equal keys, equal expressions

The analysis is deliberately small and conservative: anything it does not understand
(a call that is not a math function or the unit's own pure wrapper of one, a store
through a struct member or a derived pointer, a jump out of the loop) is a refusal,
never a guess. Text edits are made on the unit's bytes, since clang's offsets count bytes.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from . import cast

LOOPS = ("ForStmt", "WhileStmt", "DoStmt", "CXXForRangeStmt")
# Pure functions of their arguments: calling them cannot write memory the loop sees.
MATH = {
    "sqrt",
    "cbrt",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "pow",
    "fabs",
    "abs",
    "labs",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "atan2",
    "sinh",
    "cosh",
    "tanh",
    "floor",
    "ceil",
    "round",
    "trunc",
    "fmin",
    "fmax",
    "fma",
    "fmod",
    "hypot",
    "copysign",
    "erf",
    "erfc",
}
MATH = MATH | {f + "f" for f in MATH} | {f + "l" for f in MATH}
# Statements and expressions the analysis cannot see through: they refuse a region outright.
OPAQUE = (
    "GotoStmt",
    "IndirectGotoStmt",
    "LabelStmt",
    "ReturnStmt",
    "GCCAsmStmt",
    "MSAsmStmt",
    "CXXThrowExpr",
    "CXXTryStmt",
    "StmtExpr",
    "AtomicExpr",
    "BlockExpr",
    "LambdaExpr",
    "CXXNewExpr",
    "CXXDeleteExpr",
    "VAArgExpr",
    "CapturedStmt",
)
INTEGER_TYPES = {
    "char",
    "signed char",
    "unsigned char",
    "short",
    "unsigned short",
    "int",
    "unsigned int",
    "long",
    "unsigned long",
    "long long",
    "unsigned long long",
    "__int128",
    "unsigned __int128",
    "_Bool",
    "bool",
}
FLOAT_TYPES = {"float", "double", "long double", "_Float16", "__fp16"}


class Refused(Exception):
    """A rewrite or analysis gives up: the reason, for debugging and tests."""


# ---------------------------------------------------------------- text


class Text:
    """The unit's bytes: clang's offsets index bytes, not characters."""

    def __init__(self, text):
        self.raw = text.encode("utf-8", "surrogateescape")

    def __getitem__(self, span):
        return self.raw[span].decode("utf-8", "surrogateescape")

    def edit(self, edits):
        """The text with ``edits`` ((begin, end, replacement) on bytes, non-overlapping) applied."""
        out, last = self.raw, len(self.raw) + 1
        for begin, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
            if end > last:
                raise Refused("overlapping edits")
            out = out[:begin] + new.encode("utf-8", "surrogateescape") + out[end:]
            last = begin
        return out.decode("utf-8", "surrogateescape")

    def line_start(self, offset):
        return self.raw.rfind(b"\n", 0, offset) + 1

    def indent(self, offset):
        """The whitespace that starts the line holding ``offset``."""
        start = self.line_start(offset)
        line = self.raw[start:offset]
        return line[: len(line) - len(line.lstrip(b" \t"))].decode()

    def starts_line(self, offset):
        return not self.raw[self.line_start(offset) : offset].strip()

    def next_char(self, offset):
        """The first character at or after ``offset`` that is not white space ('' at the end)."""
        rest = self.raw[offset:].lstrip()
        return rest[:1].decode("utf-8", "surrogateescape")


def _in_function_macro(text, loc):
    """Whether a range's end is the name of a function-like macro: its extent would stop at
    the name, short of the arguments (``SCALAR_VAL(0.2)``)."""
    if "spellingLoc" not in loc:
        return False
    end = loc["expansionLoc"]
    return text.next_char(end["offset"] + end.get("tokLen", 0)) == "("


def _past_arguments(text, offset):
    """Just past the argument list that opens after ``offset`` (a function-like macro's
    name): its parentheses balanced, string and character literals skipped."""
    raw, depth, quote, i = text.raw, 0, None, text.raw.index(b"(", offset)
    while i < len(raw):
        c = raw[i : i + 1]
        if quote:
            if c == b"\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in (b'"', b"'"):
            quote = c
        elif c == b"(":
            depth += 1
        elif c == b")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise Refused("a macro's arguments do not close")


def span(text, node):
    """[begin, end) bytes of ``node`` in the unit, refused when they are not where the node's
    text is (another file). A node that ends in a function-like macro's arguments ends
    after the macro call, whose text is the node's."""
    rng = node.get("range") or {}
    begin, end = rng.get("begin") or {}, rng.get("end") or {}
    if not begin.get("_main") or not end.get("_main"):
        raise Refused("%s is not written in the unit itself" % node.get("kind"))
    b, e = cast.extent(node)
    if _in_function_macro(text, end):  # (PolyBench: ``... / SCALAR_VAL(9.0);``) the node's text ends with the call
        e = _past_arguments(text, end["expansionLoc"]["offset"] + end["expansionLoc"].get("tokLen", 0))
    if e < b:
        raise Refused("%s has no usable extent" % node.get("kind"))
    return b, e


def source_of(text, node):
    b, e = span(text, node)
    return text[b:e]


def stmt_end(text, stmt):
    """Where a statement ends, its ``;`` included (clang's ranges stop before it)."""
    kind = stmt.get("kind")
    if kind in ("CompoundStmt", "DeclStmt", "NullStmt"):
        return span(text, stmt)[1]
    if kind in ("ForStmt", "WhileStmt", "CXXForRangeStmt", "AttributedStmt", "LabelStmt"):
        return stmt_end(text, stmt["inner"][-1])
    if kind == "IfStmt":
        return stmt_end(text, [c for c in stmt["inner"] if c][-1])
    end = span(text, stmt)[1]  # an expression statement, return, break, do-while: up to the ';'
    if text.next_char(end) != ";":
        raise Refused("no ';' after a %s" % kind)
    return text.raw.index(b";", end) + 1


# ---------------------------------------------------------------- expressions


def kids(node):
    return [c for c in node.get("inner", []) or [] if isinstance(c, dict)]


def strip(node, casts=True):
    """The node under parentheses and implicit casts (and integer C casts: a widening
    cast of an index does not change which element it names)."""
    while node:
        kind = node.get("kind")
        if kind == "ParenExpr" or (casts and kind in ("ImplicitCastExpr", "ConstantExpr", "FullExpr")):
            node = kids(node)[0]
        elif casts and kind == "CStyleCastExpr" and is_integer(node):
            node = kids(node)[0]
        else:
            return node
    return node


def type_of(node):
    t = node.get("type") or {}
    return t.get("desugaredQualType") or t.get("qualType") or ""


QUALIFIERS = ("const", "volatile", "restrict", "__restrict", "__restrict__")


def unqualified(type_text):
    """A type's text without qualifiers, '*' a word of its own: "double *"."""
    return " ".join(w for w in type_text.replace("*", " * ").split() if w not in QUALIFIERS)


def is_integer(node):
    return unqualified(type_of(node)) in INTEGER_TYPES


def is_float(node):
    return unqualified(type_of(node)) in FLOAT_TYPES


def is_arithmetic(node):
    return is_integer(node) or is_float(node)


def ref_decl(node):
    """The VarDecl/ParmVarDecl a DeclRefExpr names (its JSON stub), else None."""
    node = strip(node)
    if node and node.get("kind") == "DeclRefExpr":
        decl = node.get("referencedDecl") or {}
        if decl.get("kind") in ("VarDecl", "ParmVarDecl"):
            return decl
    return None


def key(node, ids=True):
    """A canonical printout of an expression: the same key, the same expression (variables by
    their declaration, so shadowing cannot fool it; parentheses and implicit casts dropped).
    ``ids=False``: names only, for people to read."""
    node = strip(node, casts=False)
    if not node:
        return "?"
    kind = node.get("kind")
    inner = kids(node)
    if kind in ("ImplicitCastExpr", "ConstantExpr", "FullExpr"):
        return key(inner[0], ids)
    if kind == "DeclRefExpr":
        decl = node.get("referencedDecl") or {}
        return "%s@%s" % (decl.get("name"), decl.get("id")) if ids else decl.get("name")
    if kind in ("IntegerLiteral", "FloatingLiteral", "CharacterLiteral"):
        return str(node.get("value"))
    if kind in ("BinaryOperator", "CompoundAssignOperator"):
        return "(%s %s %s)" % (key(inner[0], ids), node.get("opcode"), key(inner[1], ids))
    if kind == "UnaryOperator":
        op = node.get("opcode")
        return "(%s%s)" % (key(inner[0], ids), op) if node.get("isPostfix") else "(%s%s)" % (op, key(inner[0], ids))
    if kind == "ArraySubscriptExpr":
        return "%s[%s]" % (key(inner[0], ids), key(inner[1], ids))
    if kind == "MemberExpr":
        return "%s%s%s" % (key(inner[0], ids), "->" if node.get("isArrow") else ".", node.get("name"))
    if kind == "CStyleCastExpr":
        return "((%s)%s)" % (type_of(node), key(inner[0], ids))
    if kind == "UnaryExprOrTypeTraitExpr":
        return "%s(%s)" % (
            node.get("name"),
            (node.get("argType") or {}).get("qualType") or ",".join(key(c, ids) for c in inner),
        )
    return "%s(%s)" % (kind, ",".join(key(c, ids) for c in inner))


def refs(node):
    """Ids of the variables an expression mentions."""
    out = set()
    if not node:
        return out
    for n, _ in cast.walk(node):
        decl = n.get("referencedDecl") if n.get("kind") == "DeclRefExpr" else None
        if decl and decl.get("kind") in ("VarDecl", "ParmVarDecl"):
            out.add(decl.get("id"))
    return out


def has_kind(node, kinds):
    return any(n.get("kind") in kinds for n, _ in cast.walk(node)) if node else False


def additive_terms(node):
    """The terms of a sum: ``i * n + j - 1`` -> [i * n, j, 1] (signs do not matter here)."""
    node = strip(node)
    if node and node.get("kind") == "BinaryOperator" and node.get("opcode") in ("+", "-"):
        a, b = kids(node)
        return additive_terms(a) + additive_terms(b)
    return [node]


def injective_in(indices, var, invariant):
    """Whether an access names a different element for each value of ``var``: some
    subscript is ``var`` (or ``var * x``, ``-var``) plus terms without ``var``, with ``x``
    invariant. For a flat index (``c[i * n + j]``) this assumes the other terms stay within
    one row, as they do in every in-bounds row-major access; a true array dimension
    (``C[i][j]``) needs no such assumption."""
    for index in indices:
        if index is None:
            continue
        using = [t for t in additive_terms(index) if var in refs(t)]
        if len(using) != 1:
            continue
        term = strip(using[0])
        if term.get("kind") == "UnaryOperator" and term.get("opcode") == "-":
            term = strip(kids(term)[0])
        if (ref_decl(term) or {}).get("id") == var:
            return True
        if term.get("kind") == "BinaryOperator" and term.get("opcode") == "*":
            a, b = kids(term)
            for v, x in ((a, b), (b, a)):
                if (ref_decl(v) or {}).get("id") == var and invariant(x):
                    return True
    return False


# ---------------------------------------------------------------- accesses and effects


@dataclass
class Access:
    """One memory access through an array subscript or a dereference."""

    node: dict  # the whole access (the outermost ArraySubscriptExpr, or the '*')
    base: str  # "decl:<id>" for a named array or pointer, else the base expression's key
    decl: Optional[dict]  # the base's declaration stub (name, id), when named
    indices: Tuple[Optional[dict], ...]  # subscripts, outermost dimension first (None: *p)
    write: bool = False
    address: bool = False  # &a[i]: not an access, an address that may escape
    base_node: Optional[dict] = None  # the base expression (a pointer, an array)

    @property
    def index_key(self):
        return ("&",) if self.address else tuple("0" if i is None else key(i) for i in self.indices)


def _named_base(node):
    """(decl stub, key) of a subscript's base: a named pointer or array, else its key."""
    node = strip(node, casts=False)
    if node.get("kind") == "ImplicitCastExpr" and node.get("castKind") in (
        "LValueToRValue",
        "ArrayToPointerDecay",
        "NoOp",
    ):
        inner = strip(kids(node)[0], casts=False)
        decl = ref_decl(inner) if inner.get("kind") == "DeclRefExpr" else None
        if decl:
            return decl, "decl:%s" % decl["id"]
    return None, "expr:" + key(node)


def access_of(node, consumed):
    """The Access an ArraySubscriptExpr chain or a '*' makes (the chain's inner subscripts are
    added to ``consumed``: they are part of this access, not accesses of their own)."""
    if node.get("kind") == "UnaryOperator":  # *p, *(p + e)
        ptr = strip(kids(node)[0], casts=False)
        if ptr.get("kind") == "ImplicitCastExpr" and ptr.get("castKind") == "LValueToRValue":
            decl, base = _named_base(ptr)
            return Access(node, base, decl, (None,), base_node=ptr)
        sum_ = strip(ptr)
        if sum_.get("kind") == "BinaryOperator" and sum_.get("opcode") == "+":
            a, b = kids(sum_)
            if "*" not in type_of(a):
                a, b = b, a
            decl, base = _named_base(a)
            return Access(node, base, decl, (b,), base_node=a)
        return Access(node, "expr:" + key(ptr), None, (None,), base_node=ptr)
    indices, cur = [], node
    while True:
        base, index = kids(cur)
        if "*" not in type_of(base) and "*" in type_of(index):  # i[a] is a[i]
            base, index = index, base
        indices.insert(0, index)
        under = strip(base, casts=False)
        if under.get("kind") == "ImplicitCastExpr" and under.get("castKind") == "ArrayToPointerDecay":
            sub = strip(kids(under)[0], casts=False)
            if sub.get("kind") == "ArraySubscriptExpr":  # a true multi-dimensional array: a[i][j]
                consumed.add(id(sub))
                cur = sub
                continue
        decl, key_ = _named_base(base)
        return Access(node, key_, decl, tuple(indices), base_node=base)


@dataclass
class Effects:
    """What a region (a loop's body) does, as far as a legality test needs to know."""

    accesses: List[Access] = field(default_factory=list)
    scalar_writes: Dict[str, List[Tuple[dict, tuple]]] = field(default_factory=dict)  # decl id -> (op, parents)
    locals: Set[str] = field(default_factory=set)  # non-static variables declared in the region
    refusal: Optional[str] = None

    def written_bases(self):
        return sorted({a.base for a in self.accesses if a.write})

    def on(self, base):
        return [a for a in self.accesses if a.base == base]


WRITES = ("=",)  # BinaryOperator opcodes that store; CompoundAssignOperator always does
STEPS = ("++", "--")


def write_target(node):
    """The lvalue a node stores to, else None."""
    kind = node.get("kind")
    if (kind == "BinaryOperator" and node.get("opcode") in WRITES) or kind == "CompoundAssignOperator":
        return strip(kids(node)[0], casts=False)
    if kind == "UnaryOperator" and node.get("opcode") in STEPS:
        return strip(kids(node)[0], casts=False)
    return None


def _jump_target(parents):
    """The nearest enclosing loop or switch of a break/continue (None: outside the region)."""
    for p in reversed(parents):
        if p.get("kind") in LOOPS + ("SwitchStmt",):
            return p
    return None


def callee_of(node):
    """The FunctionDecl stub a direct call names (``{}`` for a call through a pointer)."""
    callee = strip(kids(node)[0]) if kids(node) else {}
    decl = callee.get("referencedDecl") or {}
    return decl if callee.get("kind") == "DeclRefExpr" and decl.get("kind") == "FunctionDecl" else {}


def is_math_call(node):
    """A direct call of a math function (``sqrt``, ``__builtin_fabs``), or of one of the
    unit's own wrappers of one (marked by ``Function``): it writes nothing."""
    name = callee_of(node).get("name", "")
    return (
        bool(node.get("_math")) or name in MATH or (name.startswith("__builtin_") and name[len("__builtin_") :] in MATH)
    )


MAX_WRAPPER_LOOKUPS = 8  # callee names looked up per kernel: each is a parse of the unit


def math_wrappers(source, names):
    """(name, type) of the functions among ``names`` that the unit defines as a pure wrapper
    of math functions, ``inline real8 SQRT(real8 arg) { return sqrt(arg) ; }`` (LULESH):
    one ``return`` of an expression of its by-value arithmetic parameters and math calls.
    Matched by name and type, not id: ids are addresses in one clang process."""
    out = set()
    for name in sorted(names)[:MAX_WRAPPER_LOOKUPS]:
        try:
            decls = cast.dump(source, function=name)
        except cast.ASTError:
            continue
        for d in decls:
            if d.get("kind") == "FunctionDecl" and d.get("name") == name and _pure_math(d):
                out.add((name, (d.get("type") or {}).get("qualType")))
    return out


def _pure_math(fn):
    params = [c for c in kids(fn) if c.get("kind") == "ParmVarDecl"]
    bodies = [c for c in kids(fn) if c.get("kind") == "CompoundStmt"]
    if (
        not bodies
        or len(kids(bodies[0])) != 1
        or kids(bodies[0])[0].get("kind") != "ReturnStmt"
        or not all(is_arithmetic(p) for p in params)
    ):
        return False
    ret = kids(kids(bodies[0])[0])
    if len(ret) != 1 or not is_arithmetic(ret[0]):
        return False
    ids = {p.get("id") for p in params}
    for node, _ in cast.walk(ret[0]):
        kind = node.get("kind", "")
        if kind.endswith("CallExpr") and not (kind == "CallExpr" and is_math_call(node)):
            return False
        if kind == "DeclRefExpr" and not callee_of({"inner": [node]}) and (ref_decl(node) or {}).get("id") not in ids:
            return False  # a global, or anything else it might read
        if write_target(node) is not None or (kind == "UnaryOperator" and node.get("opcode") in ("++", "--", "&", "*")):
            return False
    return True


def effects(region, continue_ok=True):
    """The Effects of a statement ``region`` (a loop body). ``continue_ok``: a ``continue``
    aimed at the loop whose body this is keeps its meaning under the rewrite."""
    fx = Effects()
    consumed = set()
    for node, parents in cast.walk(region):
        kind = node.get("kind")
        if not kind:
            continue
        if kind in OPAQUE or kind.startswith("OMP"):
            fx.refusal = fx.refusal or "the loop holds a %s" % kind
        elif kind.endswith("CallExpr") and not (kind == "CallExpr" and is_math_call(node)):
            fx.refusal = fx.refusal or "the loop calls a function that is not a math function"
        elif kind in ("BreakStmt", "ContinueStmt"):
            target = _jump_target(parents)
            if target is None and not (kind == "ContinueStmt" and continue_ok):
                fx.refusal = fx.refusal or "a %s leaves the loop" % kind
        elif kind == "VarDecl":
            if node.get("storageClass") == "static":
                fx.refusal = fx.refusal or "a static variable in the loop"
            else:
                fx.locals.add(node.get("id"))
        elif kind == "UnaryOperator" and node.get("opcode") == "&":
            target = strip(kids(node)[0], casts=False)
            if target.get("kind") == "ArraySubscriptExpr":
                acc = access_of(target, consumed)
                acc.address = True
                consumed.add(id(target))
                fx.accesses.append(acc)
            else:
                fx.refusal = fx.refusal or "the loop takes a variable's address"
        if kind in ("ArraySubscriptExpr",) or (kind == "UnaryOperator" and node.get("opcode") == "*"):
            if id(node) not in consumed:
                consumed.add(id(node))
                fx.accesses.append(access_of(node, consumed))
        target = write_target(node)
        if target is None:
            continue
        tkind = target.get("kind")
        if tkind == "DeclRefExpr" and ref_decl(target):
            fx.scalar_writes.setdefault(ref_decl(target)["id"], []).append((node, parents))
        elif tkind == "ArraySubscriptExpr" or (tkind == "UnaryOperator" and target.get("opcode") == "*"):
            pass  # marked below, once every access of the region is known
        else:
            fx.refusal = fx.refusal or "the loop stores through a %s" % tkind
    targets = set()
    for node, _ in cast.walk(region):
        target = write_target(node) if node.get("kind") else None
        if target is not None:
            targets.add(id(target))
    for acc in fx.accesses:
        acc.write = id(acc.node) in targets
    return fx


# ---------------------------------------------------------------- the function and its loops


@dataclass
class Loop:
    """A canonical ``for (i = lo; i < hi; i++)`` (or ``<=``, ``++i``, ``i += 1``)."""

    node: dict  # the ForStmt
    parents: tuple  # its ancestors in the function, outermost first
    var: dict  # the induction variable's declaration stub (name, id, type)
    declared: bool  # declared in the loop's own init (``for (int i = ...``)
    lo: dict
    hi: dict
    op: str  # "<" or "<="
    inc: dict
    body: dict

    @property
    def name(self):
        return self.var["name"]

    @property
    def id(self):
        return self.var["id"]

    def enclosing(self):
        """Loops (of any kind) around this one, nearest last."""
        return [p for p in self.parents if p.get("kind") in LOOPS]

    def is_innermost(self):
        return not any(n.get("kind") in LOOPS for n, _ in cast.walk(self.body))


class Function:
    """The kernel's definition in the unit, indexed for the rules."""

    def __init__(self, source, node=None):
        self.source = source
        self.text = Text(source.text)
        self.node = node or cast.function_definition(source)
        self.body = cast.body(self.node)
        self.params = [c for c in kids(self.node) if c.get("kind") == "ParmVarDecl"]
        self.decls = {}  # id -> VarDecl/ParmVarDecl node, every one in the definition
        self.uses = {}  # decl id -> [(DeclRefExpr, parents)]
        self._loops = {}  # id(ForStmt) -> its Loop (or None), computed once
        calls = []  # direct calls of functions that are not math functions by name
        for n, parents in cast.walk(self.node):
            if n.get("kind") in ("VarDecl", "ParmVarDecl"):
                self.decls.setdefault(n.get("id"), n)
            elif n.get("kind") == "DeclRefExpr":
                d = n.get("referencedDecl") or {}
                self.uses.setdefault(d.get("id"), []).append((n, parents))
            elif (
                n.get("kind") == "CallExpr"
                and callee_of(n)
                and not is_math_call(n)
                and any(p.get("kind") in LOOPS for p in parents)
            ):
                calls.append(n)  # (only a loop's calls matter to the rules)
        # The unit's own wrappers of math functions count as math (their calls are marked).
        wrappers = math_wrappers(source, {callee_of(c)["name"] for c in calls}) if calls else set()
        for c in calls:
            if (callee_of(c)["name"], (callee_of(c).get("type") or {}).get("qualType")) in wrappers:
                c["_math"] = True

    @property
    def name(self):
        return self.node.get("name")

    def fors(self):
        """(ForStmt, parents) of every for loop in the body, in document order."""
        return [(n, p) for n, p in cast.walk(self.node) if n.get("kind") == "ForStmt"]

    def loops(self):
        out = []
        for node, parents in self.fors():
            loop = self.canonical(node, parents)
            if loop:
                out.append(loop)
        return out

    def canonical(self, node, parents):
        """The Loop a ForStmt is, or None when it is not canonical."""
        if id(node) not in self._loops:
            self._loops[id(node)] = self._canonical(node, parents)
        return self._loops[id(node)]

    def _canonical(self, node, parents):
        inner = node.get("inner") or []
        if len(inner) != 5 or "spellingLoc" in ((node.get("range") or {}).get("begin") or {}):
            return None  # not a for loop, or one a macro writes: its parts have no text of their own
        init, cond_var, cond, inc, body = inner
        if cond_var or not init or not cond or not inc or not body:
            return None
        var, declared, lo = self._init(init)
        if var is None:
            return None
        cond = strip(cond)
        if cond.get("kind") != "BinaryOperator" or cond.get("opcode") not in ("<", "<="):
            return None
        left, hi = kids(cond)
        if (ref_decl(left) or {}).get("id") != var["id"] or not self._unit_step(inc, var["id"]):
            return None
        decl = self.decls.get(var["id"])
        if decl is None or not is_integer(decl):
            return None
        loop = Loop(node, parents, var, declared, lo, hi, cond["opcode"], inc, body)
        fx = effects(body)
        if var["id"] in fx.scalar_writes or any(
            (ref_decl(kids(n)[0]) or {}).get("id") == var["id"]
            for n, _ in cast.walk(body)
            if n.get("kind") == "UnaryOperator" and n.get("opcode") == "&"
        ):
            return None  # the body moves the induction variable itself
        if not self.invariant(lo, fx) or not self.invariant(hi, fx) or var["id"] in refs(hi) | refs(lo):
            return None
        return loop

    def _init(self, init):
        """(variable stub, declared in the init, lower bound) of a loop's init, else Nones."""
        if init.get("kind") == "DeclStmt":
            decls = kids(init)
            if len(decls) == 1 and decls[0].get("kind") == "VarDecl" and kids(decls[0]):
                d = decls[0]
                return {"id": d["id"], "name": d["name"], "kind": "VarDecl", "type": d.get("type")}, True, kids(d)[0]
            return None, False, None
        if init.get("kind") == "BinaryOperator" and init.get("opcode") == "=":
            target, value = kids(init)
            decl = ref_decl(target)
            if decl and decl["id"] not in refs(value):
                return decl, False, value
        return None, False, None

    @staticmethod
    def _unit_step(inc, var):
        inc = strip(inc)
        kind = inc.get("kind")
        if kind == "UnaryOperator" and inc.get("opcode") == "++":
            return (ref_decl(kids(inc)[0]) or {}).get("id") == var
        if kind == "CompoundAssignOperator" and inc.get("opcode") == "+=":
            target, step = kids(inc)
            step = strip(step)
            return (
                (ref_decl(target) or {}).get("id") == var
                and step.get("kind") == "IntegerLiteral"
                and step.get("value") == "1"
            )
        return False

    def invariant(self, expr, fx):
        """Whether ``expr`` has the same value all through a region with effects ``fx``: it reads
        no variable the region writes or declares, no memory the region writes, calls nothing."""
        if expr is None:
            return True
        if has_kind(expr, ("CallExpr", "CompoundAssignOperator", "StmtExpr")) or any(
            write_target(n) is not None for n, _ in cast.walk(expr) if n.get("kind")
        ):
            return False
        if refs(expr) & (set(fx.scalar_writes) | fx.locals):
            return False
        if has_kind(expr, ("ArraySubscriptExpr", "MemberExpr")) or any(
            n.get("kind") == "UnaryOperator" and n.get("opcode") == "*" for n, _ in cast.walk(expr)
        ):
            return not any(a.write for a in fx.accesses)
        return True

    def pure_counter(self, var):
        """Whether a variable declared outside the loops that count with it is only ever a
        loop counter: every use sits in a canonical loop over it that sets it first, so no value
        of it flows out of any loop (making it private, or reordering the loops, changes
        nothing the rest of the function sees)."""
        decl = self.decls.get(var)
        if decl is None or decl.get("kind") != "VarDecl" or decl.get("storageClass") == "static" or kids(decl):
            return False  # a parameter, a global, a static, or one with an initial value that may be read
        for _, parents in self.uses.get(var, []):
            owner = None
            for i in range(len(parents) - 1, -1, -1):
                p = parents[i]
                if p.get("kind") == "ForStmt":
                    loop = self.canonical(p, parents[:i])
                    if loop and loop.id == var and not loop.declared:
                        owner = loop
                        break
            if owner is None:
                return False
        return True

    def is_local_pointer(self, decl_id):
        decl = self.decls.get(decl_id)
        return decl is not None and decl.get("kind") == "VarDecl" and "*" in type_of(decl) and "[" not in type_of(decl)
