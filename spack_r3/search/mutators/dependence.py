"""Uniform dependences of a nest of two loops: whether it may run in the other order when
an array is read at an offset from where it is written (a recurrence).

    reorderable(fn, fx, outer, inner)   # Refused, with the reason, or None

``nests.pair_legal`` asks for every element written to be touched at one index only, so a
recurrence (``y[i][j] = x[i][j] + a * y[i - 1][j]``, ``s[i * w + j] += s[i * w + j - 1]``) is
no nest it may reorder, though its dependences allow it. Here each access of a written
array is read as one offset per loop variable: every subscript is ``v + c`` (a loop
variable plus a constant) or does not move with the loops (then it is the same in every
access), and a flat row-major index ``(v + c) * W + u + d`` counts as two subscripts (it
assumes ``u + d`` stays within a row, as every in-bounds access does). Two accesses then
touch one element only where the loop variables differ by the difference of their
offsets: a distance (d_outer, d_inner). The order of the two loops may change when no
distance points forward in the outer loop and backward in the inner one (the
interchange's and the tiling's test for two loops). A variable missing from an access
stands for any distance, which only a zero in the other place keeps legal.
"""

from .loops import Refused, key, kids, ref_decl, refs, strip

ANY = "*"


def _signed_terms(node, sign=1):
    """The terms of a sum with their signs: ``i * n + j - 1`` -> [(1, i * n), (1, j), (-1, 1)]."""
    node = strip(node)
    if node and node.get("kind") == "BinaryOperator" and node.get("opcode") in ("+", "-"):
        a, b = kids(node)
        return _signed_terms(a, sign) + _signed_terms(b, sign if node.get("opcode") == "+" else -sign)
    return [(sign, node)]


def _const(node):
    node = strip(node)
    if node.get("kind") == "IntegerLiteral":
        return int(node.get("value", "0"))
    return None


def _offset_form(terms, loops):
    """(variable id or a key of what does not move, constant) of ``v + c``-shaped terms."""
    var, rest, c = None, [], 0
    for sign, t in terms:
        value = _const(t)
        if value is not None:
            c += sign * value
            continue
        decl = ref_decl(strip(t)) or {}
        if decl.get("id") in loops:
            if var is not None or sign < 0:
                raise Refused("a subscript is not a loop variable plus a constant")
            var = decl["id"]
            continue
        if refs(t) & loops:
            raise Refused("a subscript is not a loop variable plus a constant")
        rest.append("%s%s" % ("+" if sign > 0 else "-", key(t)))
    if var is not None and rest:
        raise Refused("a subscript mixes a loop variable with other terms")
    return (var if var is not None else "key:" + ",".join(sorted(rest)), c)


def _dims(access, loops):
    """An access's subscripts as (variable-or-key, constant) pairs, a flat row-major index
    split into its row and its column."""
    out = []
    for index in access.indices:
        if index is None:
            raise Refused("an access through a pointer")
        terms = _signed_terms(index)
        rows = [
            st
            for st in terms
            if st[1].get("kind") == "BinaryOperator" and st[1].get("opcode") == "*" and refs(st[1]) & loops
        ]
        if len(rows) == 1 and rows[0][0] > 0:
            a, b = kids(rows[0][1])
            row, width = (a, b) if refs(a) & loops else (b, a)
            if refs(width) & loops:
                raise Refused("a subscript is not linear in the loops")
            out.append(("width:" + key(width),) + _offset_form(_signed_terms(row), loops))
            terms = [t for t in terms if t is not rows[0]]
        elif rows:
            raise Refused("a subscript is not linear in the loops")
        out.append(("",) + _offset_form(terms, loops))
    return out


def _distance(write, other, outer, inner, loops):
    """(d_outer, d_inner) between two accesses of one array (ANY: any distance); Refused
    where they do not have one shape."""
    a, b = _dims(write, loops), _dims(other, loops)
    if len(a) != len(b) or any(x[:2] != y[:2] for x, y in zip(a, b)):
        raise Refused("%s is accessed in two shapes" % (write.decl or {}).get("name", "an array"))
    d = {}
    for (_, var, ca), (_, _, cb) in zip(a, b):
        if var in loops:
            if var in d:
                raise Refused("a loop variable in two subscripts")
            d[var] = ca - cb
        elif ca != cb:
            return None  # a subscript that does not move tells them apart: never one element
    return d.get(outer, ANY), d.get(inner, ANY)


def _forward_then_back(d_outer, d_inner):
    """Whether a distance, oriented to point forward, runs forward in the outer loop and
    backward in the inner one (or may: ANY)."""
    if d_outer == ANY and d_inner == ANY:
        return True
    if d_outer == ANY:
        return d_inner != 0
    if d_inner == ANY:
        return d_outer != 0
    if d_outer < 0 or (d_outer == 0 and d_inner < 0):
        d_outer, d_inner = -d_outer, -d_inner
    return d_outer > 0 and d_inner < 0


def reorderable(fx, outer, inner):
    """Refused unless every dependence between the nest's iterations on the arrays it
    writes is uniform and allows the loops in the other order."""
    loops = {outer.id, inner.id}
    for base in fx.written_bases():
        accs = fx.on(base)
        if accs[0].decl is None or any(a.address for a in accs):
            raise Refused("a store through an expression")
        for w in [a for a in accs if a.write]:
            for other in accs:
                d = _distance(w, other, outer.id, inner.id, loops)
                if d is not None and _forward_then_back(*d):
                    raise Refused("a dependence runs forward in %s and backward in %s" % (outer.name, inner.name))
