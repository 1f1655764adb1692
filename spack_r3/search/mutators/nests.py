"""The rules on a nest of two loops (``rules.py`` lists them all): ``interchange`` (a
perfect nest, or one the outer loop's distribution makes perfect), ``tile``,
``unroll-and-jam``, and ``scalar-replace`` of an element a loop accumulates into."""

from dataclasses import replace

from . import dependence
from .base import Proposal
from .loops import (
    Function,
    LOOPS,
    Refused,
    additive_terms,
    effects,
    has_kind,
    is_arithmetic,
    key,
    kids,
    ref_decl,
    refs,
    source_of,
    span,
    stmt_end,
    strip,
)
from .rules import (
    JAM,
    TILE,
    bounds_fixed,
    fresh,
    hinted,
    independent,
    invariant_in,
    knob_header,
    no_hidden_alias,
    omp_bound,
    private_writes,
    stores_disjoint,
)


def _nests(fn):
    """(outer, inner, prefix, suffix) for each outer loop whose body is one inner loop, alone
    (a perfect nest: no prefix or suffix statements) or among plain statements."""
    for outer in fn.loops():
        if omp_bound(outer.parents):
            continue
        body = outer.body
        stmts = kids(body) if body.get("kind") == "CompoundStmt" else [body]
        fors = [i for i, s in enumerate(stmts) if s.get("kind") == "ForStmt"]
        if len(fors) != 1:
            continue
        k = fors[0]
        inner = fn.canonical(stmts[k], outer.parents + (outer.node,) + ((body,) if body is not stmts[k] else ()))
        if inner is None:
            continue
        yield outer, inner, stmts[:k], stmts[k + 1 :]


def pair_legal(fn, outer, inner):
    """Whether two nested loops may run in the other order: bounds independent of each
    other, and every element written in the inner body is touched only by iterations
    that share one of the two induction variables (dependences then keep their order)."""
    if outer.id in refs(inner.lo) | refs(inner.hi) or inner.id in refs(outer.lo) | refs(outer.hi):
        raise Refused("a bound depends on the other loop")
    if not bounds_fixed(fn, inner, effects(outer.body)):
        raise Refused("the inner loop's bounds change in the outer loop")
    fx = effects(inner.body)
    if fx.refusal:
        raise Refused(fx.refusal)
    try:
        stores_disjoint(fn, fx, [outer.id, inner.id], invariant_in(fx, outer, inner))
    except Refused:  # a recurrence (an array read where it is written, at an offset) may still allow it
        no_hidden_alias(fn, fx)
        for base in fx.written_bases():
            decl = fx.on(base)[0].decl
            if decl is not None and (fn.is_local_pointer(decl["id"]) or decl["id"] in fx.locals):
                raise
        dependence.reorderable(fx, outer, inner)
    private_writes(fn, fx)
    for loop in (outer, inner):
        if not loop.declared and not fn.pure_counter(loop.id):
            raise Refused("%s is used after the loops" % loop.name)


def _header(fn, loop):
    """[begin, end) of ``for (...)``, without the white space before the body."""
    begin = span(fn.text, loop.node)[0]
    body = span(fn.text, loop.body)[0]
    return begin, begin + len(fn.text.raw[begin:body].rstrip())


def interchange(fn):
    out = []
    for outer, inner, prefix, suffix in _nests(fn):
        try:
            pair_legal(fn, outer, inner)
            if prefix or suffix:
                text, note = _distribute(fn, outer, inner, prefix, suffix)
            else:
                (ob, oe), (ib, ie) = _header(fn, outer), _header(fn, inner)
                text, note = fn.text.edit([(ob, oe, fn.text[ib:ie]), (ib, ie, fn.text[ob:oe])]), ""
        except Refused:
            continue
        gain = 0
        if inner.is_innermost():
            fx = effects(inner.body)
            gain = unit_stride(fx, outer.id) - unit_stride(fx, inner.id)
        out.append(
            (
                -gain,
                Proposal(
                    text,
                    "interchange",
                    "interchange %s,%s in %s%s" % (outer.name, inner.name, fn.name, note),
                    promise=gain,
                ),
            )
        )
    # The one that makes the innermost loop walk memory contiguously first (matmul: j,k,
    # which gives i,k,j; i,j only moves the dot product to another row, and is slower).
    return [p for _, p in sorted(out, key=lambda gp: gp[0])]


def unit_stride(fx, var):
    """How many of a region's accesses step through memory one element at a time with
    ``var``: their last subscript has ``var`` itself as a term (``c[i * n + j]``, ``C[i][j]``)."""
    return sum(
        1
        for a in fx.accesses
        if a.indices
        and a.indices[-1] is not None
        and any((ref_decl(strip(t)) or {}).get("id") == var for t in additive_terms(a.indices[-1]))
    )


def _distribute(fn, outer, inner, prefix, suffix):
    """Split the outer loop into one loop per part (its statements before the inner loop,
    the nest, its statements after) and interchange the nest. Legal when the outer loop's
    iterations are independent: then the parts may run in any order across iterations."""
    private, sums = independent(fn, outer)
    if sums:
        raise Refused("a reduction")
    for stmt in prefix + suffix:
        if stmt.get("kind") == "DeclStmt" or has_kind(stmt, LOOPS + ("BreakStmt", "ContinueStmt", "DeclStmt")):
            raise Refused("the outer loop's other statements declare, loop or jump")
    text = fn.text
    head = text[slice(*_header(fn, outer))]
    ib, ie = _header(fn, inner)
    inner_head = text[ib:ie]
    body_begin, inner_end = span(text, inner.body)[0], stmt_end(text, inner.node)
    open_, close = span(text, outer.body)
    before = text[open_ + 1 : ib].strip()
    after = text[inner_end : close - 1].strip()
    pad = text.indent(span(text, outer.node)[0])
    parts = []
    if before:
        parts.append("%s {\n%s  %s\n%s}" % (head, pad, before, pad))
    parts.append("%s\n%s  %s\n%s    %s" % (inner_head, pad, head, pad, text[body_begin:inner_end]))
    if after:
        parts.append("%s {\n%s  %s\n%s}" % (head, pad, after, pad))
    new = ("\n" + pad).join(parts)
    if not outer.parents or outer.parents[-1].get("kind") != "CompoundStmt":
        new = "{\n%s%s\n%s}" % (pad, new, pad)  # one statement where one was (``for (i...) for (j...)``)
    begin, end = span(text, outer.node)[0], stmt_end(text, outer.node)
    what = " after distributing %s" % ", ".join(key_text(fn, s) for s in prefix + suffix)
    return text.edit([(begin, end, new)]), what


def key_text(fn, stmt):
    """A short readable form of a statement, for a description."""
    try:
        return " ".join(source_of(fn.text, stmt).split())
    except Refused:  # cut short by a macro: print it from the AST instead
        text = key(stmt, ids=False)
        return text[1:-1] if text.startswith("(") and text.endswith(")") else text


def tile(fn):
    out = []
    for outer, inner, prefix, suffix in _nests(fn):
        if prefix or suffix:
            continue
        try:
            pair_legal(fn, outer, inner)
            text, knob = _tile(fn, outer, inner)
        except Refused:
            continue
        out.append(
            Proposal(text, "tile", "tile %s,%s in %s (%s)" % (outer.name, inner.name, fn.name, knob), {knob: TILE})
        )
    return out


def _tile(fn, outer, inner):
    text, src = fn.text, fn.source
    size = fresh(src, "R3_TILE_")
    tiles = {l.id: fresh(src, "%s_tile" % l.name) for l in (outer, inner)}
    if len(set(tiles.values())) != 2:
        raise Refused("no fresh names")

    def tile_loop(l):
        t = tiles[l.id]
        return "for (%s %s = %s; %s %s %s; %s += %s)" % (
            var_type(fn, l),
            t,
            source_of(text, l.lo),
            t,
            l.op,
            source_of(text, l.hi),
            t,
            size,
        )

    def point_loop(l):
        t, hi = tiles[l.id], "(%s)" % source_of(text, l.hi)
        last = "%s + %s" % (t, size) if l.op == "<" else "%s + %s - 1" % (t, size)
        init = ("%s %s = %s" % (var_type(fn, l), l.name, t)) if l.declared else "%s = %s" % (l.name, t)
        return "for (%s; %s %s (%s < %s ? %s : %s); %s)" % (
            init,
            l.name,
            l.op,
            last,
            hi,
            last,
            hi,
            source_of(text, l.inc),
        )

    pad = text.indent(span(text, outer.node)[0])
    body = text[span(text, inner.body)[0] : stmt_end(text, inner.node)]
    lines = [tile_loop(outer), tile_loop(inner), point_loop(outer), point_loop(inner), body]
    nest = ("\n" + pad).join("  " * i + line for i, line in enumerate(lines))
    begin, end = span(text, outer.node)[0], stmt_end(text, outer.node)
    return text.edit([(0, 0, knob_header(size, TILE[0])), (begin, end, nest)]), size


def unroll_and_jam(fn):
    out = []
    for outer, inner, prefix, suffix in _nests(fn):
        if prefix or suffix or not inner.is_innermost() or hinted(inner.parents):
            continue
        try:
            pair_legal(fn, outer, inner)
            out.append(_unroll_and_jam(fn, outer, inner))
        except Refused:
            continue
    return out


def _unroll_and_jam(fn, outer, inner):
    fx = effects(inner.body)
    # Copies that share an access keep it in a register; copies of a recurrence along the
    # inner loop (an array read where it is written, at an offset) overlap their chains.
    carried = any(len({a.index_key for a in fx.on(b)}) > 1 for b in fx.written_bases())
    if not carried and all(any(outer.id in refs(i) for i in a.indices if i is not None) for a in fx.accesses):
        raise Refused("the copies would share no access and carry nothing")
    text, src = fn.text, fn.source
    size, start = fresh(src, "R3_UJ_"), fresh(src, "%s_jam" % outer.name)
    name, hi = outer.name, paren(text, outer.hi)

    def from_start(op, end):
        init = ("%s %s = %s" % (var_type(fn, outer), name, start)) if outer.declared else "%s = %s" % (name, start)
        return "for (%s; %s %s %s; %s)" % (init, name, op, end, source_of(text, outer.inc))

    pad = text.indent(span(text, outer.node)[0])
    inner_head = text[slice(*_header(fn, inner))]
    body = text[span(text, inner.body)[0] : stmt_end(text, inner.node)]
    lines = [
        "{",
        "  %s %s = %s;" % (var_type(fn, outer), start, source_of(text, outer.lo)),
        "  for (; %s + (%s - 1) %s %s; %s += %s)" % (start, size, outer.op, hi, start, size),
        "    " + inner_head,
        "      " + from_start("<", "%s + %s" % (start, size)),
        "        " + body,
        "  " + from_start(outer.op, hi),  # the last iterations, fewer than a block
        "    " + inner_head,
        "      " + body,
        "}",
    ]
    begin, end = span(text, outer.node)[0], stmt_end(text, outer.node)
    jammed = text.edit([(0, 0, knob_header(size, JAM[0])), (begin, end, ("\n" + pad).join(lines))])
    what = "unroll-and-jam %s into the %s loop in %s (%s)" % (name, inner.name, fn.name, size)
    # The element the body accumulates into, in a local across each block: without it the
    # copies load and store it once each (matmul, i,k,j: markedly slower without it).
    jfn = Function(replace(src, text=jammed))
    block = [l for l in jfn.loops() if l.name == name and source_of(jfn.text, l.lo) == start and l.is_innermost()]
    try:
        jammed, element = _scalar_replaced(jfn, block[0])
        what = "%s, %s in a local" % (what, element)
    except (Refused, IndexError):
        pass
    return Proposal(jammed, "unroll-and-jam", what, {size: JAM})


def var_type(fn, loop):
    decl = fn.decls[loop.id]
    return (decl.get("type") or {}).get("qualType", "int")


# ---------------------------------------------------------------- scalar replacement


def scalar_replace(fn):
    out = []
    for loop in fn.loops():
        if hinted(loop.parents) or omp_bound(loop.parents):
            continue
        try:
            out.append(_scalar_replace(fn, loop))
        except Refused:
            continue
    return out


def _scalar_replace(fn, loop):
    text, element = _scalar_replaced(fn, loop)
    return Proposal(
        text, "scalar-replace", "scalar-replace %s across the %s loop in %s" % (element, loop.name, fn.name)
    )


def _scalar_replaced(fn, loop):
    """(the unit's text, the element) with the one element a loop writes kept in a local
    across the loop: legal when nothing else is written in the loop, every access to that
    array is to that element, and the element's index does not change in the loop. The
    loop is guarded by its own entry test so an empty loop touches no memory, as before."""
    fx = effects(loop.body)
    if fx.refusal:
        raise Refused(fx.refusal)
    bases = fx.written_bases()
    if len(bases) != 1:
        raise Refused("not one array written")
    accs = fx.on(bases[0])
    first = accs[0]
    if first.decl is None or fn.is_local_pointer(first.decl["id"]) or first.decl["id"] in fx.locals:
        raise Refused("not a named array")
    if len({a.index_key for a in accs}) != 1 or not is_arithmetic(first.node):
        raise Refused("not one element")
    private_writes(fn, fx)  # other scalars: the body's own
    no_hidden_alias(fn, fx)
    varying = set(fx.scalar_writes) | fx.locals | {loop.id}
    for index in first.indices:
        if index is None:
            continue
        if (
            refs(index) & varying
            or has_kind(index, ("CallExpr",))
            or any(a.base == first.base for a in effects(index).accesses)
        ):
            raise Refused("the index changes in the loop")
    if not loop.declared and not fn.pure_counter(loop.id):
        raise Refused("%s is used after the loop" % loop.name)
    text = fn.text
    element = source_of(text, first.node)
    acc = fresh(fn.source, "r3_%s" % first.decl["name"])
    begin, end = span(text, loop.node)[0], stmt_end(text, loop.node)
    pad = text.indent(begin)
    guard = "%s %s %s" % (paren(text, loop.lo), loop.op, paren(text, loop.hi))
    head = "if (%s) {\n%s  %s %s = %s;\n%s  " % (guard, pad, _element_type(first.node), acc, element, pad)
    tail = "\n%s  %s = %s;\n%s}" % (pad, element, acc, pad)
    edits = [(begin, begin, head), (end, end, tail)]
    edits += [span(text, a.node) + (acc,) for a in accs]
    return text.edit(edits), " ".join(element.split())


def paren(text, node):
    """A bound's text, in parentheses unless it is a single name or number."""
    simple = strip(node).get("kind") in ("DeclRefExpr", "IntegerLiteral")
    return source_of(text, node) if simple else "(%s)" % source_of(text, node)


def _element_type(node):
    t = node.get("type") or {}
    return t.get("desugaredQualType") or t.get("qualType")
