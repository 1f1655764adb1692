"""Rules for the shapes whose loops carry a recurrence (issue 63): closures and
triangular solves, where the compiler sees a dependence it cannot prove away.

    pivot_hoist(fn)            # min-plus closure: d[i][k] out of the j loop, split at j == k
    reduction_interchange(fn)  # x[i][r] = b - sum_j l[i][j] x[j][r]: j outside r, sums in an array

- ``pivot-hoist``: an innermost loop over ``j`` that writes one array only at ``...[j]``
  (``d[i * n + j]``, ``cap[i][j]``) and reads that array at an index that does not move
  with ``j`` (the pivot ``d[i * n + k]``) cannot be vectorized: the store may hit the
  pivot. Only the iteration whose index names the pivot can (``j == k``), so the loop is
  split there: before it and after it the pivot is a local (read again after that one
  iteration), and the two parts vectorize. A Floyd-Warshall step, a widest-path step, a
  Gaussian elimination's row update. Every iteration runs its body as before, on the same
  values: the results are exact. Refused where the loop writes anything else (another
  array, a scalar it carries), jumps, calls, or reads the pivot only under a condition.
- ``reduction-interchange``: a loop over ``r`` whose body is an accumulation into a
  scalar (``s = init; for (j ...) s op= e; store(s)``), its inner loop's bounds not
  moving with ``r``, becomes three loops: the scalars into an array, the ``j`` loop
  outside the ``r`` loop (so the inner loop walks ``x[j][r]`` contiguously, not a
  column), the stores. Each sum still gets its terms in the original order: the results
  are exact. Legal where no element the stores write is read by an earlier statement of
  another ``r``: the stores' array is read there only at the element the same ``r``
  writes, or at one the loop bounds keep apart from every written one (a triangular
  solve's ``x[j][r]`` with ``j < i`` against the store's ``x[i][r]``; an LU step's
  ``a[k * n + j]`` with ``k < i`` against ``a[i * n + j]``). The array is allocated per
  run of the loop (``__builtin_malloc``; the original loop runs where that fails).
"""

from .base import Proposal
from .loops import (
    Refused,
    cast,
    effects,
    has_kind,
    injective_in,
    is_arithmetic,
    key,
    kids,
    ref_decl,
    refs,
    source_of,
    span,
    stmt_end,
    strip,
    type_of,
    unqualified,
)
from .nests import paren, unit_stride, var_type
from .rules import hinted, invariant_in, no_hidden_alias, omp_bound

CONDITIONAL = ("IfStmt", "ConditionalOperator", "BinaryConditionalOperator", "SwitchStmt")  # first child: always run
JUMPS = ("BreakStmt", "ContinueStmt", "ReturnStmt", "GotoStmt", "IndirectGotoStmt")


def _text(fn, begin, end, replace=()):
    """The unit's text in [begin, end), with ``replace`` ((node, text), ...) spliced in."""
    text = fn.text
    cuts = sorted((span(text, n) + (t,) for n, t in replace), key=lambda c: c[0])
    out, at = [], begin
    for b, e, t in cuts:
        if b < at or e > end:
            raise Refused("an edit outside the statement")
        out += [text[at:b], t]
        at = e
    return "".join(out + [text[at:end]])


def _body_text(fn, loop, replace=()):
    """A loop's body as text, with ``replace`` spliced in."""
    return _text(fn, span(fn.text, loop.body)[0], stmt_end(fn.text, loop.node), replace)


def _unconditional(region, node):
    """Whether ``node`` is evaluated every time ``region`` runs: no branch or inner loop
    of the region decides whether it runs (the condition of an ``if`` itself does)."""
    for n, parents in cast.walk(region):
        if n is not node:
            continue
        chain = parents + (node,)
        for p, below in zip(chain, chain[1:]):
            kind = p.get("kind")
            if kind in CONDITIONAL and below is not kids(p)[0]:
                return False
            if kind in ("ForStmt", "WhileStmt", "DoStmt"):
                return False
            if kind == "BinaryOperator" and p.get("opcode") in ("&&", "||") and below is kids(p)[1]:
                return False
        return True
    return False


def _numbered(fn, *bases):
    """Fresh names sharing one number: ``r3_lo_2``, ``r3_hi_2``..."""
    for n in range(1, 1000):
        names = ["%s%d" % (b, n) for b in bases]
        if not any(name in fn.source.text for name in names):
            return names
    raise Refused("no fresh names")


# ---------------------------------------------------------------- pivot-hoist


def pivot_hoist(fn):
    out = []
    for loop in fn.loops():
        if not loop.is_innermost() or hinted(loop.parents) or omp_bound(loop.parents):
            continue
        try:
            out.append(_pivot_hoist(fn, loop))
        except Refused:
            continue
    return out


def _offset(index, loop):
    """X where ``index`` is ``X + v`` or ``v + X`` (``v`` the loop's variable, X without it);
    None for ``v`` alone; Refused for any other form."""
    var, index = loop.id, strip(index)
    if (ref_decl(index) or {}).get("id") == var:
        return None
    if index.get("kind") == "BinaryOperator" and index.get("opcode") == "+":
        a, b = kids(index)
        for v, x in ((a, b), (b, a)):
            if (ref_decl(strip(v)) or {}).get("id") == var and var not in refs(x):
                return x
    raise Refused("the store's last subscript is not %s plus an invariant" % loop.name)


def _pivot_hoist(fn, loop):
    fx = effects(loop.body, continue_ok=False)
    if fx.refusal:
        raise Refused(fx.refusal)
    if has_kind(loop.body, JUMPS):
        raise Refused("the loop jumps")
    if any(var not in fx.locals for var in fx.scalar_writes):
        raise Refused("the loop carries a scalar")
    writes = [a for a in fx.accesses if a.write]
    if not writes or len({a.base for a in writes}) != 1 or any(a.address for a in fx.accesses):
        raise Refused("not one array written")
    w = writes[0]
    if w.decl is None or fn.is_local_pointer(w.decl["id"]) or w.decl["id"] in fx.locals:
        raise Refused("not a named array")
    if len({a.index_key for a in writes}) != 1 or None in w.indices:
        raise Refused("written at more than one index")
    no_hidden_alias(fn, fx)
    invariant = invariant_in(fx, loop)
    if any(not invariant(i) for i in w.indices[:-1]):
        raise Refused("the written row moves with the loop")
    offset = _offset(w.indices[-1], loop)
    if offset is not None and not invariant(offset):
        raise Refused("the store's last subscript is not %s plus an invariant" % loop.name)
    pivots = [
        a for a in fx.on(w.base) if not a.write and len(a.indices) == len(w.indices) and all(map(invariant, a.indices))
    ]
    if not pivots:
        raise Refused("no element of %s read at a fixed index" % w.decl["name"])
    if len({a.index_key for a in pivots}) != 1:
        raise Refused("more than one fixed element read")
    # One read on every iteration shows the address is one the loop reads anyway.
    if not any(_unconditional(loop.body, a.node) for a in pivots) or not is_arithmetic(pivots[0].node):
        raise Refused("the pivot is read only under a condition")
    if not loop.declared and not fn.pure_counter(loop.id):
        raise Refused("%s is used after the loop" % loop.name)

    text, p = fn.text, pivots[0]
    ty, var = var_type(fn, loop), loop.name
    lo_, hi_, at, mid, one, pv = _numbered(fn, "r3_lo_", "r3_hi_", "r3_at_", "r3_mid_", "r3_one_", "r3_pv_")
    element = source_of(text, p.node)
    last = source_of(text, p.indices[-1])
    # The iteration whose store names the pivot: the pivot's last subscript less the store's offset.
    at_expr = "(%s)" % last if offset is None else "(%s) - (%s)" % (last, source_of(text, offset))
    hi = paren(text, loop.hi) + (" + 1" if loop.op == "<=" else "")
    hoisted = _body_text(fn, loop, [(a.node, pv) for a in pivots])
    body = _body_text(fn, loop)
    pad = text.indent(span(text, loop.node)[0])
    lines = [
        "{",
        "  %s %s = %s, %s = %s;" % (ty, lo_, source_of(text, loop.lo), hi_, hi),
        "  if (%s < %s) {" % (lo_, hi_),
        "    %s %s = %s;  /* the one iteration that may store to %s */" % (ty, at, at_expr, " ".join(element.split())),
        "    %s %s = %s < %s ? %s : %s < %s ? %s : %s;" % (ty, mid, at, lo_, lo_, at, hi_, at, hi_),
        "    int %s = %s == %s && %s < %s;" % (one, mid, at, at, hi_),
        "    %s %s = %s;" % (unqualified(type_of(p.node)), pv, element),
        "    for (%s %s = %s; %s < %s; %s++)" % (ty, var, lo_, var, mid, var),
        "      " + hoisted,
        "    if (%s) {" % one,
        "      %s %s = %s;" % (ty, var, at),
        "      " + body,
        "    }",
        "    %s = %s;" % (pv, element),
        "    for (%s %s = %s + %s; %s < %s; %s++)" % (ty, var, mid, one, var, hi_, var),
        "      " + hoisted,
        "  }",
        "}",
    ]
    begin, end = span(text, loop.node)[0], stmt_end(text, loop.node)
    new = text.edit([(begin, end, ("\n" + pad).join(lines))])
    what = "hoist %s out of the %s loop in %s, split where the loop stores to it" % (
        " ".join(element.split()),
        var,
        fn.name,
    )
    return Proposal(new, "pivot-hoist", what, promise=1)


# ---------------------------------------------------------------- reduction-interchange


def reduction_interchange(fn):
    out = []
    for loop in fn.loops():
        if hinted(loop.parents) or omp_bound(loop.parents) or _fallback(loop):
            continue
        try:
            out.append(_reduction_interchange(fn, loop))
        except Refused:
            continue
    return out


def _fallback(loop):
    """Whether ``loop`` is the original loop an earlier rewrite kept for when its array could
    not be allocated (``if (r3_sum_1) ... else <loop>``): rewriting it again gains nothing."""
    return any(p.get("kind") == "IfStmt" and key(kids(p)[0], ids=False).startswith("r3_sum_") for p in loop.parents)


def _accumulation(fn, loop):
    """(decl, init, inner loop, the inner statement, the store statement) of a loop whose
    body is ``T s = init; for (...) s op= e; store(s);``, or ``s = init; ...`` with ``s``
    declared before the loop (PolyBench's ``w``)."""
    body = loop.body
    stmts = kids(body) if body.get("kind") == "CompoundStmt" else []
    if len(stmts) != 3 or stmts[1].get("kind") != "ForStmt":
        raise Refused("not an accumulation")
    first = stmts[0]
    if first.get("kind") == "DeclStmt":
        decls = kids(first)
        if len(decls) != 1 or decls[0].get("kind") != "VarDecl" or not kids(decls[0]):
            raise Refused("not one scalar with an initial value")
        decl, init = decls[0], kids(decls[0])[0]
    elif first.get("kind") == "BinaryOperator" and first.get("opcode") == "=":
        target, init = kids(first)
        decl = fn.decls.get((ref_decl(strip(target)) or {}).get("id"))
        if decl is None or strip(target).get("kind") != "DeclRefExpr" or decl["id"] in refs(init):
            raise Refused("not an accumulation")
    else:
        raise Refused("not an accumulation")
    if not is_arithmetic(decl) or decl.get("storageClass") == "static" or _address_taken(fn, decl["id"]):
        raise Refused("not an arithmetic scalar")
    inner = fn.canonical(stmts[1], loop.parents + (loop.node, body))
    if inner is None:
        raise Refused("the inner loop is not canonical")
    step = inner.body
    if step.get("kind") == "CompoundStmt":
        if len(kids(step)) != 1:
            raise Refused("the inner loop does more than accumulate")
        step = kids(step)[0]
    s = decl["id"]
    if step.get("kind") == "CompoundAssignOperator" and step.get("opcode") in ("+=", "-=", "*="):
        target, e = kids(step)
    elif step.get("kind") == "BinaryOperator" and step.get("opcode") == "=":
        target, rhs = kids(step)
        rhs = strip(rhs)
        if rhs.get("kind") != "BinaryOperator" or rhs.get("opcode") not in ("+", "-", "*"):
            raise Refused("not an accumulation")
        first, e = kids(rhs)
        if (ref_decl(strip(first)) or {}).get("id") != s:
            raise Refused("not an accumulation")
    else:
        raise Refused("not an accumulation")
    if (ref_decl(strip(target)) or {}).get("id") != s or s in refs(e):
        raise Refused("not an accumulation into %s" % decl["name"])
    store = stmts[2]
    if store.get("kind") not in ("BinaryOperator", "CompoundAssignOperator") or (
        store.get("kind") == "BinaryOperator" and store.get("opcode") != "="
    ):
        raise Refused("the last statement is not a store")
    if strip(kids(store)[0], casts=False).get("kind") != "ArraySubscriptExpr":
        raise Refused("the last statement is not a store to an array")
    return decl, init, inner, step, store


def _address_taken(fn, var):
    return any(
        p and p[-1].get("kind") == "UnaryOperator" and p[-1].get("opcode") == "&" for _, p in fn.uses.get(var, [])
    )


def _differs_at(a, b):
    """The one place two expressions differ, as (node of a, node of b); None when they are
    the same; Refused where they differ in more than one place."""
    a, b = strip(a), strip(b)
    if key(a) == key(b):
        return None
    ka, kb = kids(a), kids(b)
    if a.get("kind") != b.get("kind") or a.get("opcode") != b.get("opcode") or len(ka) != len(kb) or not ka:
        return (a, b)
    found = [d for d in (_differs_at(x, y) for x, y in zip(ka, kb)) if d is not None]
    if len(found) != 1:
        raise Refused("they differ in more than one place")
    return found[0]


def _ends_before(loop, bound):
    """Whether ``loop``'s values all lie below ``bound`` (``j < i`` against ``i``)."""
    return loop.op == "<" and key(loop.hi) == key(bound)


def _starts_after(loop, bound):
    """Whether ``loop``'s values all lie above ``bound`` (``j = i + 1``)."""
    lo = strip(loop.lo)
    if lo.get("kind") == "BinaryOperator" and lo.get("opcode") == "+":
        a, b = kids(lo)
        for v, c in ((a, b), (b, a)):
            c = strip(c)
            if key(v) == key(bound) and c.get("kind") == "IntegerLiteral" and int(c.get("value", "0")) >= 1:
                return True
    return False


def _apart(fn, outer, inner, written, read):
    """Whether ``read`` (an index tuple of the stored array, read in the inner loop or the
    initial value) never names an element the stores write: it differs from ``written`` in
    one place only, where it has the inner loop's variable and the store has an expression
    whose value the inner loop's bounds exclude (``x[j][r]``, j < i, against ``x[i][r]``;
    ``a[k * n + j]``, k < i, against ``a[i * n + j]``; ``a[j * n + k]``, k < i <= j)."""
    if len(written) != len(read):
        return False
    diffs = [d for d in (_differs_at(w, r) for w, r in zip(written, read)) if d is not None]
    if len(diffs) != 1:
        return False
    w, r = diffs[0]
    if (ref_decl(r) or {}).get("id") != inner.id:
        return False
    if (ref_decl(w) or {}).get("id") == outer.id:  # the store's own loop: its range against the inner one's
        return (inner.op == "<" and (key(inner.hi) == key(outer.lo) or _starts_after(outer, inner.hi))) or (
            outer.op == "<" and _starts_after(inner, outer.hi)
        )
    return outer.id not in refs(w) and (_ends_before(inner, w) or _starts_after(inner, w))


def _reduction_interchange(fn, loop):
    decl, init, inner, step, store = _accumulation(fn, loop)
    if loop.id in refs(inner.lo) | refs(inner.hi) or decl["id"] in refs(inner.lo) | refs(inner.hi):
        raise Refused("the inner loop's bounds move with %s" % loop.name)
    fx = effects(loop.body)
    if fx.refusal:
        raise Refused(fx.refusal)
    if has_kind(loop.body, JUMPS):
        raise Refused("the loop jumps")
    # (an accumulator declared before the loop ends with the last sum, as it did)
    if any(v not in fx.locals and v not in (inner.id, decl["id"]) for v in fx.scalar_writes):
        raise Refused("the loop writes a scalar it carries")
    if not inner.declared and not fn.pure_counter(inner.id):
        raise Refused("%s is used after the loop" % inner.name)
    if not loop.declared and not fn.pure_counter(loop.id):
        raise Refused("%s is used after the loop" % loop.name)
    no_hidden_alias(fn, fx)
    writes = [a for a in fx.accesses if a.write]
    if len(writes) != 1 or writes[0].decl is None or fn.is_local_pointer(writes[0].decl["id"]):
        raise Refused("not one store to a named array")
    w = writes[0]
    invariant = invariant_in(fx, loop)
    if not injective_in(w.indices, loop.id, invariant):
        raise Refused("the stores of different %s may write one element" % loop.name)
    earlier = effects(init).accesses + effects(inner.body).accesses
    for a in earlier:
        if a.base != w.base or a.index_key == w.index_key:
            continue
        if not _apart(fn, loop, inner, w.indices, a.indices):
            raise Refused("%s is read where another %s's store may have written" % (w.decl["name"], loop.name))

    text = fn.text
    ty, var, sty = var_type(fn, loop), loop.name, unqualified(type_of(decl))
    lo_, hi_, acc = _numbered(fn, "r3_lo_", "r3_hi_", "r3_sum_")
    hi = paren(text, loop.hi) + (" + 1" if loop.op == "<=" else "")
    element = "%s[%s - %s]" % (acc, var, lo_)
    uses = [(n, element) for n, _ in cast.walk(step) if (ref_decl(n) or {}).get("id") == decl["id"]]
    step_text = _text(fn, span(text, step)[0], stmt_end(text, step), uses)
    inner_head = text[span(text, inner.node)[0] : span(text, inner.body)[0]].rstrip()
    pad = text.indent(span(text, loop.node)[0])
    rloop = "for (%s %s = %s; %s < %s; %s++)" % (ty, var, lo_, var, hi_, var)
    original = text[span(text, loop.node)[0] : stmt_end(text, loop.node)]
    lines = [
        "{",
        "  %s %s = %s, %s = %s;" % (ty, lo_, source_of(text, loop.lo), hi_, hi),
        "  %s *%s = %s < %s ? (%s *)__builtin_malloc(sizeof(%s) * (%s - %s)) : 0;"
        % (sty, acc, lo_, hi_, sty, sty, hi_, lo_),
        "  if (%s) {" % acc,
        "    " + rloop,
        "      %s = %s;" % (element, source_of(text, init)),
        "    " + inner_head,
        "      " + rloop,
        "        " + step_text,
        "    " + rloop + " {",
        "      %s%s = %s;" % ("%s " % sty if decl["id"] in fx.locals else "", decl["name"], element),
        "      %s;" % source_of(text, store),
        "    }",
        "    __builtin_free(%s);" % acc,
        "  } else",
        "    " + original,
        "}",
    ]
    begin, end = span(text, loop.node)[0], stmt_end(text, loop.node)
    new = text.edit([(begin, end, ("\n" + pad).join(lines))])
    fx_inner = effects(inner.body)
    # The sums' array is one more access that walks memory with r, one element at a time.
    gain = unit_stride(fx_inner, loop.id) + 1 - unit_stride(fx_inner, inner.id)
    what = "interchange the %s sums' %s loop outside the %s loop in %s (%s in an array)" % (
        decl["name"],
        inner.name,
        var,
        fn.name,
        decl["name"],
    )
    return Proposal(new, "reduction-interchange", what, promise=gain)
