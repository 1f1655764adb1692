"""Rules for stencils and sequences of loops (issue 46): fusion, distribution, time tiling.

    fuse(fn)        # two adjacent loops -> one, the second shifted when its reads lag
    distribute(fn)  # a loop over several statements -> one loop per statement
    time_tile(fn)   # for t { for i ...; for i ...; } -> skewed tiles of (t, i), in order
    wavefront(fn)   # the same tiles, those of one wavefront in parallel (OpenMP)

Each is an instance-level argument about the loops being reordered: a statement
instance is one iteration of a loop over ``i`` (its whole body, inner loops included, in
its original order), and every element a written array is touched at is read off the
subscript that holds ``i``: ``A[i + c][...]`` (a true dimension) or ``a[(i + c) * n + ...]``
(a flat row-major index). Two instances can touch the same element only where their
``i + c`` agree, whatever the other subscripts say, so constraints on those offsets are
conservative. A time step may also hold a statement along one fixed row (a boundary,
``for (j ...) ey[0][j] = f[t];``, as FDTD writes): it is one instance, at that row, and its
accesses name rows by constants. Anything else (a written array reached without ``i`` or a
constant in a usable form, a scalar carried between statements, a call, a jump) is a
refusal, with its reason.

The schedule they share: statement k's instance ``i`` at time ``t`` runs at position
``p = i + shift_k + skew * t``. ``shift`` puts a statement after the instances of the
statements before it that it depends on (Jacobi's copy-back of row i-1 after the sweep of
row i: shift 1); ``skew`` makes every dependence between time steps point forward in
``p``, so tiles of (t, p) can run in order, or those with the same T + I at once. Every
dependence between instances is kept, and each instance runs its body as before, so every
element is computed from the same values in the same order: results are the original's bit
for bit, Gauss-Seidel's in-place sweep (rows i-1 new, i+1 old) included.
"""

from .base import Proposal
from .loops import Refused, cast, effects, has_kind, key, kids, ref_decl, refs, source_of, span, stmt_end, strip
from .rules import fresh, hinted, knob_header, no_hidden_alias, omp_bound, private_writes

TIME_TILE = (8, 4, 16, 32)  # time steps per tile
SPACE_TILE = (32, 16, 64, 128)  # positions (rows) per tile


# ---------------------------------------------------------------- offsets along i


def _linear(node, var):
    """(coefficient of ``var``, constant) of ``var``, ``var + c``, ``c + var``, ``var - c``; else None."""
    node = strip(node)
    if (ref_decl(node) or {}).get("id") == var:
        return 1, 0
    if node.get("kind") == "IntegerLiteral":
        return 0, int(node["value"])
    if node.get("kind") == "BinaryOperator" and node.get("opcode") in ("+", "-"):
        a, b = (_linear(k, var) for k in kids(node))
        if a is None or b is None:
            return None
        sign = 1 if node["opcode"] == "+" else -1
        return a[0] + sign * b[0], a[1] + sign * b[1]
    return None


def _terms(node, sign=1):
    """(sign, term) of a sum, signs kept."""
    node = strip(node)
    if node.get("kind") == "BinaryOperator" and node.get("opcode") in ("+", "-"):
        a, b = kids(node)
        return _terms(a, sign) + _terms(b, sign if node["opcode"] == "+" else -sign)
    return [(sign, node)]


def offsets(access, var):
    """{dimension: c} for every way ``access`` names row ``var + c``: ("dim", d) where
    subscript d is ``var + c``; ("flat", key of n) where the last subscript is
    ``(var + c) * n + rest`` (rest without ``var``, taken to stay within a row)."""
    out = {}
    for d, index in enumerate(access.indices):
        if index is None or var not in refs(index):
            continue
        lin = _linear(index, var)
        if lin is not None and lin[0] == 1:
            out[("dim", d)] = lin[1]
            continue
        if d != len(access.indices) - 1:
            continue
        using = [(s, t) for s, t in _terms(index) if var in refs(t)]
        if len(using) != 1 or using[0][0] != 1:
            continue
        term = using[0][1]
        if term.get("kind") != "BinaryOperator" or term.get("opcode") != "*":
            continue
        for row, n in (kids(term), kids(term)[::-1]):
            lin = _linear(row, var)
            if (
                lin is not None
                and lin[0] == 1
                and not refs(n) & {var}
                and not has_kind(n, ("CallExpr", "ArraySubscriptExpr"))
            ):
                out[("flat", key(n))] = lin[1]
    return out


class Statement:
    """One loop over ``i`` among those being scheduled together (or one statement of its
    body, ``region``, for distribution): what its instances touch."""

    def __init__(self, fn, loop, region=None):
        self.loop = loop
        fx = effects(loop.body if region is None else region, continue_ok=False)  # a continue would skip the rest
        if fx.refusal:
            raise Refused(fx.refusal)
        no_hidden_alias(fn, fx)
        self.private = private_writes(fn, fx)  # scalars: the instance's own, or pure inner counters
        if not loop.declared and not fn.pure_counter(loop.id):
            raise Refused("%s is used after the loop" % loop.name)
        self.accesses = [a for a in fx.accesses if not (a.decl and a.decl["id"] in fx.locals)]
        for a in self.accesses:
            if a.write and (a.decl is None or fn.is_local_pointer(a.decl["id"])):
                raise Refused("a store through %s" % (a.base[5:] if a.decl is None else a.decl["name"]))
        self.written = {a.base for a in self.accesses if a.write}

    @property
    def var(self):
        """The row counter its instance declares anew."""
        return self.loop.name

    def offsets(self, access):
        return offsets(access, self.loop.id)

    def moving(self):
        return "%s + c" % self.loop.name

    def bounds(self, text):
        """(first row, one past the last), as text."""
        return "(%s)" % source_of(text, self.loop.lo), _excl(text, self.loop)

    def instance(self, fn, at, pad):
        """Its instance at row ``at`` (text), under its bounds."""
        text, l = fn.text, self.loop
        body = text[span(text, l.body)[0] : stmt_end(text, l.node)]
        lo, hi = self.bounds(text)
        return "%s{\n%s  %s %s = %s;\n%s  if (%s >= %s && %s < %s)\n%s    %s\n%s}" % (
            pad,
            pad,
            _var_type(fn, l),
            l.name,
            at,
            pad,
            l.name,
            lo,
            l.name,
            hi,
            pad,
            body,
            pad,
        )


class OneRow:
    """A statement of a time step that touches one fixed row of the arrays the step writes
    (a boundary row: ``for (j ...) ey[0][j] = f[t];``): one instance, at that row."""

    def __init__(self, fn, node):
        fx = effects(node, continue_ok=False)
        if fx.refusal:
            raise Refused(fx.refusal)
        no_hidden_alias(fn, fx)
        self.loop, self.node, self.private, self.var = None, node, private_writes(fn, fx), None
        self.accesses = [a for a in fx.accesses if not (a.decl and a.decl["id"] in fx.locals)]
        for a in self.accesses:
            if a.write and (a.decl is None or fn.is_local_pointer(a.decl["id"])):
                raise Refused("a store through %s" % (a.base[5:] if a.decl is None else a.decl["name"]))
        self.written = {a.base for a in self.accesses if a.write}
        rows = {c for a in self.accesses if a.write for c in _literal_rows(a).values()}
        if len(rows) != 1:
            raise Refused("it writes no one fixed row")
        self.row = rows.pop()

    def offsets(self, access):
        return {d: c - self.row for d, c in _literal_rows(access).items()}

    def moving(self):
        return "a constant row"

    def bounds(self, text):
        return "(%d)" % self.row, "(%d)" % (self.row + 1)

    def instance(self, fn, at, pad):
        body = fn.text[span(fn.text, self.node)[0] : stmt_end(fn.text, self.node)]
        return "%sif (%s == %d)\n%s  %s" % (pad, at, self.row, pad, body)


def _literal_rows(access):
    """{("dim", d): c} for each subscript of ``access`` that is an integer constant c."""
    out = {}
    for d, index in enumerate(access.indices):
        if index is not None and strip(index).get("kind") == "IntegerLiteral":
            out[("dim", d)] = int(strip(index)["value"])
    return out


def row_offsets(stmts):
    """{array base: [(statement index, write, c)]} over every array some statement writes,
    all on one dimension; Refused when an access of one has no usable row offset."""
    written = set().union(*(s.written for s in stmts))
    out = {}
    for base in sorted(written):
        dims, uses = None, []
        for k, s in enumerate(stmts):
            for a in s.accesses:
                if a.base != base:
                    continue
                if a.address:
                    raise Refused("the address of an element of %s is taken" % a.decl["name"])
                found = s.offsets(a)
                if not found:
                    raise Refused("%s is accessed without %s in a subscript" % (a.decl["name"], s.moving()))
                dims = set(found) if dims is None else dims & set(found)
                uses.append((k, a.write, found))
        if not dims:
            name = next(a.decl["name"] for s in stmts for a in s.accesses if a.base == base)
            raise Refused("the accesses of %s disagree on the dimension that moves with the loop" % name)
        dim = sorted(dims)[0]
        out[base] = [(k, w, found[dim]) for k, w, found in uses]
    return out


def pairs(rows):
    """(k, c_k, l, c_l) for every two accesses of one array, at least one a write."""
    for uses in rows.values():
        for k, wk, ck in uses:
            for l, wl, cl in uses:
                if wk or wl:
                    yield k, ck, l, cl


def shifts(n, rows):
    """The least shifts >= 0 that keep every dependence between statements of one step
    pointing forward: for k < l, shift_l >= shift_k + c_l - c_k."""
    shift = [0] * n
    for l in range(n):
        for k, ck, l2, cl in pairs(rows):
            if l2 == l and k < l:
                shift[l] = max(shift[l], shift[k] + cl - ck)
    return shift


def skew(rows, shift):
    """The least skew >= 0 that makes a dependence from one step to a later one point
    forward in p, between any two statements (itself included): skew >= c_l - c_k + shift_k - shift_l."""
    return max([0] + [cl - ck + shift[k] - shift[l] for k, ck, l, cl in pairs(rows)])


# ---------------------------------------------------------------- code


def _excl(text, loop):
    """A loop's exclusive upper bound, as text."""
    hi = "(%s)" % source_of(text, loop.hi)
    return hi if loop.op == "<" else "%s + 1" % hi


def _extreme(fn_name, texts):
    """min/max of texts as nested conditionals (one text: itself)."""
    texts = list(dict.fromkeys(texts))
    out = texts[0]
    for t in texts[1:]:
        op = "<" if fn_name == "min" else ">"
        out = "(%s %s %s ? %s : %s)" % (out, op, t, out, t)
    return out


def _var_type(fn, loop):
    return (fn.decls[loop.id].get("type") or {}).get("qualType", "int")


def _instances(fn, stmts, shift, at, pad):
    """The statements' instances at position ``at`` (text), each under its bounds."""
    return "\n".join(s.instance(fn, "%s - %d" % (at, sh) if sh else at, pad) for s, sh in zip(stmts, shift))


def _bounds(text, stmts, shift):
    """(least, one past the greatest) position of any statement's instance, as text."""
    ends = [s.bounds(text) for s in stmts]
    lo = _extreme("min", ["%s + %d" % (b[0], sh) if sh else b[0] for b, sh in zip(ends, shift)])
    hi = _extreme("max", ["%s + %d" % (b[1], sh) if sh else b[1] for b, sh in zip(ends, shift)])
    return lo, hi


def _invariant_bound(node, varying):
    """A loop bound with one value all through the loops being reordered: it names no
    variable they write, reads no memory, calls nothing, changes nothing."""
    if refs(node) & varying or has_kind(
        node, ("CallExpr", "ArraySubscriptExpr", "MemberExpr", "CompoundAssignOperator")
    ):
        return False
    for n, _ in cast.walk(node):
        op = n.get("opcode")
        if (
            n.get("kind") == "UnaryOperator"
            and op in ("*", "++", "--")
            or n.get("kind") == "BinaryOperator"
            and op == "="
        ):
            return False
    return True


def _where(fn, node):
    return fn.text.raw.count(b"\n", 0, span(fn.text, node)[0]) + 1


# ---------------------------------------------------------------- fusion


def _siblings(fn):
    """(first, second) canonical loops that follow each other in a block, outside OpenMP."""
    for loop in fn.loops():
        parent = loop.parents[-1] if loop.parents else None
        if parent is None or parent.get("kind") != "CompoundStmt" or omp_bound(loop.parents) or hinted(loop.parents):
            continue
        stmts = kids(parent)
        k = next(i for i, s in enumerate(stmts) if s is loop.node)
        if k + 1 < len(stmts) and stmts[k + 1].get("kind") == "ForStmt":
            second = fn.canonical(stmts[k + 1], loop.parents)
            if second is not None:
                yield loop, second


def fuse(fn):
    out = []
    for first, second in _siblings(fn):
        try:
            out.append(_fuse(fn, first, second))
        except Refused:
            continue
    return out


def _fuse(fn, first, second):
    """The two loops as one over positions p, the second's instance i at p - shift."""
    stmts = [Statement(fn, first), Statement(fn, second)]
    rows = row_offsets(stmts)
    varying = set()
    for s in stmts:
        fx = effects(s.loop.body)
        varying |= set(fx.scalar_writes) | fx.locals
    for s in stmts:
        for bound in (s.loop.lo, s.loop.hi):
            if not _invariant_bound(bound, varying | {t.loop.id for t in stmts}):
                raise Refused("a bound of the %s loop changes in the loops" % s.loop.name)
    shift = shifts(2, rows)
    if shift[1] > 8:
        raise Refused("the second loop would lag by %d" % shift[1])
    text = fn.text
    p = fresh(fn.source, "r3_p")
    pad = text.indent(span(text, first.node)[0])
    lo, hi = _bounds(text, stmts, shift)
    nest = "for (long %s = %s; %s < %s; %s++) {\n%s\n%s}" % (
        p,
        lo,
        p,
        hi,
        p,
        _instances(fn, stmts, shift, p, pad + "  "),
        pad,
    )
    begin, end = span(text, first.node)[0], stmt_end(text, second.node)
    lag = " (the second shifted by %d)" % shift[1] if shift[1] else ""
    return Proposal(
        text.edit([(begin, end, nest)]),
        "fuse",
        "fuse the %s loops at lines %d and %d in %s%s"
        % (first.name, _where(fn, first.node), _where(fn, second.node), fn.name, lag),
    )


# ---------------------------------------------------------------- distribution


def distribute(fn):
    out = []
    for loop in fn.loops():
        if omp_bound(loop.parents) or hinted(loop.parents) or loop.body.get("kind") != "CompoundStmt":
            continue
        try:
            out.append(_distribute(fn, loop))
        except Refused:
            continue
    return out


def _distribute(fn, loop):
    """One loop per statement of the body, in order: legal when no statement depends on a
    later statement's instance of an earlier iteration (c_l <= c_k for k < l)."""
    if loop.body.get("kind") != "CompoundStmt":
        raise Refused("the body is one statement")
    parts = kids(loop.body)
    if len(parts) < 2:
        raise Refused("one statement")
    if any(s.get("kind") in ("DeclStmt", "NullStmt") for s in parts):
        raise Refused("the body declares a variable its statements share")
    stmts = [Statement(fn, loop, part) for part in parts]
    rows = row_offsets(stmts)
    for k, ck, l, cl in pairs(rows):
        if k < l and cl > ck:
            raise Refused(
                "statement %d of the %s loop touches what statement %d touched in a later iteration"
                % (l + 1, loop.name, k + 1)
            )
    text = fn.text
    head = text[span(text, loop.node)[0] : span(text, loop.body)[0]].rstrip()
    pad = text.indent(span(text, loop.node)[0])
    new = ("\n" + pad).join(
        "%s {\n%s  %s\n%s}" % (head, pad, text[span(text, s)[0] : stmt_end(text, s)], pad) for s in parts
    )
    if not loop.parents or loop.parents[-1].get("kind") != "CompoundStmt":
        new = "{\n%s%s\n%s}" % (pad, new, pad)
    begin, end = span(text, loop.node)[0], stmt_end(text, loop.node)
    return Proposal(
        text.edit([(begin, end, new)]),
        "distribute",
        "distribute the %s loop at line %d in %s into %d" % (loop.name, _where(fn, loop.node), fn.name, len(parts)),
    )


# ---------------------------------------------------------------- time tiling


def time_tile(fn):
    return _time_tiles(fn, parallel=False)


def wavefront(fn):
    if not fn.source.threads:
        return []
    return _time_tiles(fn, parallel=True)


def _time_tiles(fn, parallel):
    out = []
    for loop in fn.loops():
        if omp_bound(loop.parents) or hinted(loop.parents):
            continue
        try:
            out.append(tiled(fn, loop, parallel))
        except Refused:
            continue
    return out


def time_steps(fn, loop):
    """(statements, shifts, skew) of a time loop: its body one or more loops over rows,
    every bound fixed across it; Refused (with the reason) otherwise."""
    parts = kids(loop.body) if loop.body.get("kind") == "CompoundStmt" else [loop.body]
    if not parts:
        raise Refused("an empty body")
    spaces, stmts = [], []
    for s in parts:
        inner = (
            fn.canonical(s, loop.parents + (loop.node,) + ((loop.body,) if loop.body is not s else ()))
            if s.get("kind") == "ForStmt"
            else None
        )
        if inner is None:
            raise Refused("the %s loop's body holds a statement that is not a loop over rows" % loop.name)
        if not inner.is_innermost():
            spaces.append(inner)
            stmts.append(Statement(fn, inner))
            continue
        try:  # a loop along one row (a boundary) runs as that row's instance
            stmts.append(OneRow(fn, s))
        except Refused as why:
            raise Refused(
                "the %s loop (line %d) has no inner loop and is not one row's (%s): not a space nest"
                % (inner.name, _where(fn, s), why)
            )
    if not spaces:
        raise Refused("no loop over rows in the %s loop" % loop.name)
    for s in stmts:
        for a in s.accesses:
            if a.base in set().union(*(x.written for x in stmts)) and any(
                loop.id in refs(i) for i in a.indices if i is not None
            ):
                raise Refused("%s moves with %s: not a time loop" % (a.decl["name"], loop.name))
    if not loop.declared and not fn.pure_counter(loop.id):
        raise Refused("%s is used after the loop" % loop.name)
    fx = effects(loop.body)
    varying = set(fx.scalar_writes) | fx.locals | {loop.id}
    for s in spaces:
        for bound in (s.lo, s.hi):
            if not _invariant_bound(bound, varying):
                raise Refused("a bound of the %s loop changes across the %s loop" % (s.name, loop.name))
    for bound in (loop.lo, loop.hi):
        if not _invariant_bound(bound, varying):
            raise Refused("a bound of the %s loop changes in it" % loop.name)
    rows = row_offsets(stmts)
    if not rows:
        raise Refused("nothing written")
    shift = shifts(len(stmts), rows)
    k = skew(rows, shift)
    if max(shift + [k]) > 8:
        raise Refused("a skew or shift beyond 8 rows")
    return stmts, shift, k


def tiled(fn, loop, parallel):
    stmts, shift, k = time_steps(fn, loop)
    text, src = fn.text, fn.source
    tt, ti = fresh(src, "R3_TT_"), fresh(src, "R3_TI_")
    names = {n: fresh(src, "r3_" + n) for n in ("t0", "t1", "p0", "p1", "nT", "nI", "w", "T", "I", "pb", "pe", "p")}
    v = names
    lo, hi = _bounds(text, stmts, shift)
    t_lo, t_hi = "(%s)" % source_of(text, loop.lo), _excl(text, loop)
    tname, ttype = loop.name, _var_type(fn, loop)
    pad = text.indent(span(text, loop.node)[0])
    private = sorted(set().union(*(s.private for s in stmts)) - {s.var for s in stmts} - {tname})
    sk = (" + %d * (long)%s" % (k, tname)) if k else ""
    lines = [
        "{",
        "  const long %s = %s, %s = %s;" % (v["t0"], t_lo, v["t1"], t_hi),
        "  const long %s = %s%s, %s = %s%s;"
        % (
            v["p0"],
            lo,
            (" + %d * %s" % (k, v["t0"])) if k else "",
            v["p1"],
            hi,
            (" + %d * (%s - 1)" % (k, v["t1"])) if k else "",
        ),
        "  if (%s < %s && %s < %s) {" % (v["t0"], v["t1"], v["p0"], v["p1"]),
        "    const long %s = (%s - %s + %s - 1) / %s, %s = (%s - %s + %s - 1) / %s;"
        % (v["nT"], v["t1"], v["t0"], tt, tt, v["nI"], v["p1"], v["p0"], ti, ti),
    ]
    if parallel:
        # tiles with T + I = w depend only on tiles of earlier wavefronts
        lines += [
            "    for (long %s = 0; %s < %s + %s - 1; %s++) {" % (v["w"], v["w"], v["nT"], v["nI"], v["w"]),
            "#pragma omp parallel for schedule(dynamic)%s" % (" private(%s)" % ", ".join(private) if private else ""),
            "      for (long %s = %s - %s + 1 > 0 ? %s - %s + 1 : 0; %s <= (%s < %s - 1 ? %s : %s - 1); %s++) {"
            % (v["T"], v["w"], v["nI"], v["w"], v["nI"], v["T"], v["w"], v["nT"], v["w"], v["nT"], v["T"]),
            "        const long %s = %s - %s;" % (v["I"], v["w"], v["T"]),
        ]
    else:
        lines += [
            "    for (long %s = 0; %s < %s; %s++) {" % (v["T"], v["T"], v["nT"], v["T"]),
            "      for (long %s = 0; %s < %s; %s++) {" % (v["I"], v["I"], v["nI"], v["I"]),
        ]
    lines += [
        "        for (%s %s = %s + %s * %s; %s < %s + (%s + 1) * %s && %s < %s; %s++) {"
        % (ttype, tname, v["t0"], v["T"], tt, tname, v["t0"], v["T"], tt, tname, v["t1"], tname),
        "          long %s = %s + %s * %s, %s = %s + %s;" % (v["pb"], v["p0"], v["I"], ti, v["pe"], v["pb"], ti),
        "          if (%s < %s%s)" % (v["pb"], lo, sk),
        "            %s = %s%s;" % (v["pb"], lo, sk),
        "          if (%s > %s%s)" % (v["pe"], hi, sk),
        "            %s = %s%s;" % (v["pe"], hi, sk),
        "          for (long %s = %s; %s < %s; %s++) {" % (v["p"], v["pb"], v["p"], v["pe"], v["p"]),
    ]
    at = "%s - %d * (long)%s" % (v["p"], k, tname) if k else v["p"]
    body = _instances(fn, stmts, shift, "(%s)" % at if k else at, pad + "            ")
    lines = [(pad + l if not l.startswith("#") else l) for l in lines]
    lines[0] = lines[0][len(pad) :]  # the first line takes the loop's place
    close = [pad + "          }", pad + "        }", pad + "      }", pad + "    }", pad + "  }", pad + "}"]
    new = "\n".join(lines) + "\n" + body + "\n" + "\n".join(close)
    begin, end = span(text, loop.node)[0], stmt_end(text, loop.node)
    header = knob_header(tt, TIME_TILE[0]) + knob_header(ti, SPACE_TILE[0])
    loops = sum(isinstance(s, Statement) for s in stmts)
    rows = len(stmts) - loops
    what = "%s %s over %d row loop%s%s in %s (skew %d%s; %s, %s)" % (
        "wavefront of time tiles of" if parallel else "time-tile",
        tname,
        loops,
        "s" if loops > 1 else "",
        " and %d one-row statement%s" % (rows, "s" if rows > 1 else "") if rows else "",
        fn.name,
        k,
        ", shifts %s" % ",".join(map(str, shift)) if any(shift) else "",
        tt,
        ti,
    )
    return Proposal(
        text.edit([(0, 0, header), (begin, end, new)]),
        "wavefront" if parallel else "time-tile",
        what,
        {tt: TIME_TILE, ti: SPACE_TILE},
    )
