"""The ``stage`` rule (``rules.py`` lists them all): a read-only array an innermost loop
reads with a stride is copied on entry in the order the loop reads it, and those reads
go to the copy."""

from dataclasses import dataclass

from . import cast
from .base import Proposal, language
from .loops import (
    FLOAT_TYPES,
    INTEGER_TYPES,
    LOOPS,
    QUALIFIERS,
    Refused,
    effects,
    has_kind,
    is_integer,
    key,
    kids,
    ref_decl,
    source_of,
    span,
    strip,
    type_of,
    unqualified,
    write_target,
)
from .rules import fresh, pointer_param, restrict_word


def stage(fn):
    """A read-only array that an innermost loop walks with a stride (``pos[3 * j + 1]``,
    ``data[k * n + i]`` over k) is copied once, on entry, into the transposed order, and
    read from the copy with the loop's index contiguous (``r3_pos[1L * n + j]``): one copy
    of the whole array, then unit-stride loads the vectorizer can use. Polly and the
    pipeline never change a layout. The copy lives in a helper defined before the kernel,
    so the kernel gains only a declaration (C89 units too) and a ``free`` on its way out."""
    src = fn.source
    if language(src) == "C++" and fn.node.get("kind") != "FunctionDecl":
        return []  # a method, perhaps defined in its class: no place for a helper before it
    if has_kind(fn.body, ("OMPDefaultClause", "BreakStmt", "ContinueStmt", "GotoStmt", "IndirectGotoStmt")):
        return []  # default(none) would need the copy listed; a jump may skip the reads the copy relies on
    returns = [n for n, _ in cast.walk(fn.body) if n.get("kind") == "ReturnStmt"]
    stmts = kids(fn.body)
    if returns and (len(returns) > 1 or not stmts or stmts[-1] is not returns[0]):
        return []  # the copy is freed at one exit
    where = {id(n): p for n, p in cast.walk(fn.body)}
    accesses = effects(fn.body).accesses
    out = []
    for param in fn.params:
        if not (pointer_param(param) or _row_array(param)):
            continue
        try:
            out.append(
                _stage(
                    fn,
                    param,
                    [a for a in accesses if a.decl and a.decl["id"] == param["id"]],
                    where,
                    returns[0] if returns else None,
                )
            )
        except Refused:
            continue
    return out


def _stage(fn, param, accesses, where, ret):
    text, src = fn.text, fn.source
    element, width = _row_array(param) or (_pointee(param), None)
    if element not in FLOAT_TYPES | INTEGER_TYPES:
        raise Refused("not an array of numbers")
    # In an OpenMP region, the captured decl lists the region's variables again (their
    # initializers, same node ids, no loops around them: the first sighting is the one in
    # place), and the capture list names the pointer once more.
    first = {}
    for a in accesses:
        first.setdefault(a.node["id"], a)
    accesses = list(first.values())
    uses = {
        u["id"]
        for u, parents in fn.uses.get(param["id"], [])
        if not (parents and parents[-1].get("kind") == "CapturedStmt")
    }
    if not accesses or len(accesses) != len(uses):
        raise Refused("%s is used other than by subscripts" % param["name"])
    if any(a.write or a.address or None in a.indices for a in accesses):
        raise Refused("%s is written, or its address taken" % param["name"])
    if ret is not None and any(any(p is ret for p in where[id(a.node)]) for a in accesses):
        raise Refused("the return value reads %s" % param["name"])
    forms = [_strided(fn, a, where[id(a.node)], width) for a in accesses]
    if len({key(f.rows_hi) for f in forms}) != 1 or len({f.cols for f in forms}) != 1:
        raise Refused("accesses of %s disagree on its shape" % param["name"])
    # The copy reads every element of rows [0, rows): the kernel must read the first and the
    # last of them whenever the rows exist (``guards``: what else must hold for that).
    firsts = sorted((f for f in forms if f.covers_first), key=lambda f: len(f.guards))
    lasts = sorted((f for f in forms if f.covers_last), key=lambda f: len(f.guards))
    if not firsts or not lasts:
        raise Refused("the copy would read elements the kernel may not")
    strided = [f for f in forms if f.x_innermost]  # the reads the copy is for; the others stay
    if not strided:
        raise Refused("no innermost loop walks %s with a stride" % param["name"])
    begin = span(text, fn.node)[0]
    if text[:begin].rstrip().endswith(">"):
        raise Refused("a template")
    # The helper's name carries the kernel's: another kernel of the unit, staged apart,
    # adds a helper of its own, and emit puts both in one unit.
    helper = fresh(src, "r3_stage_%s_" % "".join(c if c.isalnum() else "_" for c in fn.name))
    copy = fresh(src, "r3_%s" % param["name"])
    word = restrict_word(src)
    rows = source_of(text, forms[0].rows_hi)
    guards = sorted(firsts[0].guards | lasts[0].guards)
    rows_arg = "%s ? %s : 0" % (" && ".join(guards), rows) if guards else rows
    body_open, body_close = span(text, fn.body)
    pad = text.indent(span(text, kids(fn.body)[0])[0]) if kids(fn.body) else text.indent(begin) + "    "
    base = param["name"] if width is None else "%s[0]" % param["name"]
    edits = [
        (begin, begin, STAGE_HELPER.format(helper=helper, t=element, restrict=word)),
        (
            body_open + 1,
            body_open + 1,
            "\n%s%s *%s %s = %s(%s, %s, %s);" % (pad, element, word, copy, helper, base, rows_arg, forms[0].cols_text),
        ),
    ]
    free = "__builtin_free(%s);" % copy
    if ret is not None:
        edits.append((span(text, ret)[0], span(text, ret)[0], free + "\n" + pad))
    else:
        close = body_close - 1
        edits.append(
            (text.line_start(close), text.line_start(close), pad + free + "\n")
            if text.starts_line(close)
            else (close, close, "\n%s%s\n" % (pad, free))
        )
    for f in strided:
        y = f.y_text
        row = "%sL" % y if y.isdigit() else "(long)%s" % y
        index = f.x_text if y == "0" else "%s * %s + %s" % (row, rows, f.x_text)
        edits.append(span(text, f.access.node) + ("%s[%s]" % (copy, index),))
    return Proposal(
        text.edit(edits), "stage", "stage %s with %s contiguous in %s" % (param["name"], strided[0].x_text, fn.name)
    )


STAGE_HELPER = """/* r3 stage: a copy of a rows x cols array, transposed (cols x rows) */
static {t} *{helper}(const {t} *{restrict} a, long rows, long cols)
{{
    unsigned long count = rows > 0 && cols > 0 ? (unsigned long)rows * cols : 1;
    {t} *{restrict} t = ({t} *)__builtin_malloc(sizeof({t}) * count);
    long r, c;
    if (!t)
        __builtin_trap();
    for (r = 0; r < rows; r++)
        for (c = 0; c < cols; c++)
            t[c * rows + r] = a[r * cols + c];
    return t;
}}

"""


@dataclass
class Strided:
    """A read of element (x, y) of a rows x cols row-major array: ``p[cols * x + y]``, or
    ``p[x][y]`` where p points to rows of a constant length."""

    access: object
    x_text: str
    y_text: str  # "0" when there is no y
    rows_hi: dict  # the x loop's upper bound: the array's rows
    cols: str  # key of the row length
    cols_text: str
    covers_first: bool  # reads row 0's first element whenever the array has a row (under ``guards``)
    covers_last: bool  # reads the last row's last element whenever the array has a row (under ``guards``)
    guards: frozenset  # conditions (source text) for the enclosing loops to run
    x_innermost: bool  # x counts the innermost loop around the access: a stride there


def _strided(fn, access, parents, width=None):
    """The Strided an access is (``width``: the row length of a 2-D parameter), Refused when
    it is not one within its array's bounds."""
    if any(
        p.get("kind")
        in ("IfStmt", "ConditionalOperator", "BinaryConditionalOperator", "SwitchStmt", "WhileStmt", "DoStmt")
        or p.get("opcode") in ("&&", "||", ",")
        for p in parents
    ):
        raise Refused("a conditional read")
    loops = {}  # var id -> its loop, nearest first
    nearest = None
    for i in range(len(parents) - 1, -1, -1):
        if parents[i].get("kind") in LOOPS:
            loop = fn.canonical(parents[i], parents[:i]) if parents[i].get("kind") == "ForStmt" else None
            if loop is None:
                raise Refused("a loop that is not canonical")
            nearest = nearest or loop
            loops.setdefault(loop.id, loop)
    x, y, cols, cols_key, cols_text = _row_and_column(fn, access, loops, width)
    x_loop = loops.get((ref_decl(x) or {}).get("id"))
    if x_loop is None:
        raise Refused("not a stride over a loop")
    rows_key = _fixed(fn, x_loop.hi)
    if x_loop.op != "<" or rows_key is None or not _from_zero(fn, x_loop, loops, nonneg=True):
        raise Refused("the rows are not [0, a fixed bound)")
    y_loop = None
    if y is None or (y.get("kind") == "IntegerLiteral" and y.get("value") == "0"):
        y_first, y_last, y_text = True, cols == 1, "0"
    elif y.get("kind") == "IntegerLiteral":
        if cols is None or not 0 <= int(y["value"]) < cols:
            raise Refused("a column beyond the row")
        y_first, y_last, y_text = False, int(y["value"]) == cols - 1, y["value"]
    else:
        y_loop = loops.get((ref_decl(y) or {}).get("id"))
        if y_loop is None or not _from_zero(fn, y_loop, loops, nonneg=True):
            raise Refused("the column is not a loop from 0 or more")
        if width is None and (y_loop.op != "<" or key(y_loop.hi) != cols_key):
            raise Refused("the column is not a loop over [0, the stride)")
        y_first, y_last, y_text = _from_zero(fn, y_loop, loops), True, source_of(fn.text, y)
    if width is not None:
        y_first = y_last = True  # the type says a row is whole: the copy reads rows, not columns
    guards, covering = set(), _from_zero(fn, x_loop, loops)
    for loop in loops.values():
        if loop is x_loop or (loop is y_loop and width is None):
            continue  # they run when the array has an element (from 0, as checked)
        if loop.op == "<" and key(loop.hi) in (rows_key, cols_key) and _from_zero(fn, loop, loops):
            continue
        lo = strip(loop.lo)
        if lo.get("kind") == "IntegerLiteral" and _fixed(fn, loop.hi) is not None:
            guards.add("%s %s %s" % (lo["value"], loop.op, source_of(fn.text, loop.hi)))
        else:
            covering = False
    return Strided(
        access,
        source_of(fn.text, x),
        y_text,
        x_loop.hi,
        cols_key,
        cols_text,
        covering and y_first,
        covering and y_last,
        frozenset(guards),
        nearest is x_loop and x_loop.is_innermost(),
    )


def _row_and_column(fn, access, loops, width):
    """(x, y, cols as an int or None, its key, its text) of ``p[cols * x + y]`` or ``p[x][y]``."""
    if width is not None:
        if len(access.indices) != 2:
            raise Refused("not a read of one element")
        x, y = (strip(i) for i in access.indices)
        return x, y, width, str(width), str(width)
    if len(access.indices) != 1:
        raise Refused("not a flat index")
    index = strip(access.indices[0])
    if index.get("kind") == "BinaryOperator" and index.get("opcode") == "+":
        a, b = (strip(k) for k in kids(index))
        mul, y = (a, b) if a.get("kind") == "BinaryOperator" and a.get("opcode") == "*" else (b, a)
    else:
        mul, y = index, None
    if mul.get("kind") != "BinaryOperator" or mul.get("opcode") != "*":
        raise Refused("not a strided index")
    a, b = (strip(k) for k in kids(mul))
    x, cols = (a, b) if (ref_decl(a) or {}).get("id") in loops else (b, a)
    cols_key = _fixed(fn, cols)
    literal = int(cols["value"]) if cols.get("kind") == "IntegerLiteral" else None
    if cols_key is None or (literal is not None and literal < 2):
        raise Refused("not a stride over a loop")
    return x, y, literal, cols_key, source_of(fn.text, cols)


def _fixed(fn, node):
    """The key of a bound that keeps its value through the call (an integer literal, or an
    integer parameter the body never assigns), else None."""
    node = strip(node)
    if node.get("kind") == "IntegerLiteral":
        return key(node)
    decl = ref_decl(node)
    if decl is None or decl.get("kind") != "ParmVarDecl" or not is_integer(fn.decls.get(decl["id"], {})):
        return None
    for use, parents in fn.uses.get(decl["id"], []):
        if (
            parents
            and write_target(parents[-1]) is use
            or parents
            and parents[-1].get("opcode") == "&"
            and parents[-1].get("kind") == "UnaryOperator"
        ):
            return None
    return key(node)


def _from_zero(fn, loop, loops, nonneg=False):
    """Whether ``loop`` starts at 0 (``nonneg``: at 0 or more), directly or from the counter
    of an enclosing loop that does."""
    lo = strip(loop.lo)
    if lo.get("kind") == "IntegerLiteral":
        return int(lo["value"]) >= 0 if nonneg else lo["value"] == "0"
    outer = loops.get((ref_decl(lo) or {}).get("id"))
    return outer is not None and outer is not loop and _from_zero(fn, outer, loops, nonneg)


def _row_array(param):
    """(element type, row length) of a parameter declared as rows of a constant length
    (``double A[N][M]``, which is ``double (*)[M]``), else None."""
    t = type_of(param)
    if not t.endswith("]") or "[" not in t:
        return None
    head, width = t[: t.rindex("[")].strip(), t[t.rindex("[") + 1 : -1]
    if not width.isdigit() or int(width) < 2 or not head.endswith(")") or "(*" not in head:
        return None
    element, pointer = head[: head.index("(*")].strip(), head[head.index("(*") + 2 : -1].split()
    if any(w not in QUALIFIERS for w in pointer):
        return None
    return " ".join(w for w in element.split() if w not in ("const", "volatile")), int(width)


def _pointee(param):
    words = unqualified(type_of(param)).split()
    if not words or words[-1] != "*" or "*" in words[:-1]:
        return ""
    return " ".join(words[:-1])
