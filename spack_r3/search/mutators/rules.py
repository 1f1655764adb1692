"""The ``rules`` mutator's rules: deterministic rewrites of a kernel found on clang's AST,
no model (``ruleset.RulesMutator`` runs them, and ``stencils.py``'s, in order).

    proposals = RulesMutator().propose(source, Feedback())
    # -> Proposal(text=<whole unit>, rule="interchange", description="interchange k,j in gemm")

Every rule looks at the kernel's definition (``loops.Function``), decides with a
conservative test that the rewrite keeps the kernel's results, and edits the unit's
text at the AST's offsets. When the test is unsure, the rule is not offered: a proposal
that is wrong by construction would only cost a replay to find out.

- ``restrict``: the pointer parameters that lack it get ``restrict`` (``__restrict__`` in
  C++). An assertion of the caller's (replay checks it against the recording); refused
  when the body passes one parameter twice to a call or sets one from another.
- ``omp-parallel``: ``#pragma omp parallel for`` on an outermost loop whose iterations
  are independent (``independent``), or on each sweep of a loop that is not (a stencil's
  time loop: the sweeps of one step in parallel, the steps in order), in a unit compiled
  with -fopenmp, or one that may get it (``KernelSource.add_openmp``: no OpenMP pragmas of
  its own; see ``search.openmp``).
- ``omp-simd``: ``#pragma omp simd`` on an innermost loop, by the same test; where the
  loop is already an ``omp parallel for`` (or ``omp for``) directive's own, the directive
  becomes ``... for simd`` (LULESH: every hot loop is one, so no other hint reached them).
- ``omp-collapse``: ``collapse(2)`` on an OpenMP loop directive (an offload region's
  ``target teams distribute parallel for`` too) over a perfect nest whose inner iterations
  are independent, by the same test.
- ``vectorize-pragma``, ``unroll-pragma``: ``#pragma clang loop`` hints on an innermost
  loop, the count a macro knob. Vectorizing with a hint may reorder a floating-point
  reduction, so with exact results (no tolerance) a loop that may carry one is skipped.
- ``interchange``: swaps a perfect nest of two loops, or first distributes the outer loop
  around the inner one when the outer's iterations are independent (``matmul``'s
  ``c[..] = 0`` before its k loop). The interchanges that give the innermost loop more
  unit-stride accesses come first.
- ``unroll-and-jam``: a perfect nest of two loops, the inner one innermost, runs the outer
  loop in blocks of a macro knob's size inside the inner one (``for k`` blocks, ``for j``,
  ``for k`` in the block), so that what the copies share stays in registers: with the
  element the inner body accumulates into held in a local across the block (as
  ``scalar-replace``), matmul's ``c[i*n+j] += a[i*n+k] * b[k*n+j]`` in i,k,j order loads
  and stores ``c`` once per block of k, not once per k. Each element still sees its terms
  in the original order: the results are exact. Legal where the interchange is.
- ``tile``: strip-mines a perfect nest of two loops and moves both tile loops outside,
  the tile size a macro knob.
- ``scalar-replace``: an element read and written at the same index all through a loop
  (``c[i*n+j] += ...`` over k) lives in a local across the loop.
- ``stage``: a read-only array that an innermost loop reads with a stride is copied on
  entry, transposed, and those reads go to the copy (``pos[3*j+1]`` -> ``r3_pos[1L*n+j]``).
- ``time-tile``, ``wavefront``, ``fuse``, ``distribute`` (``stencils``): a time loop around
  loops over rows, skewed and tiled (the tiles of one wavefront in parallel); two adjacent
  loops fused, the second shifted where it must lag; a loop split per statement.

The pragma counts and tile sizes are macros (``R3_IC_1``...) defined at the top of the
unit under ``#ifndef``, so the inner search sets them with ``-D``: ``Proposal.knobs``
lists the values to try, the default first. Clang expands a macro inside
``#pragma clang loop ... (N)`` and, through one level of indirection, inside ``_Pragma``.
"""

import re
from dataclasses import dataclass, replace

from . import cast, dependence
from .base import Proposal, language
from .loops import (
    FLOAT_TYPES,
    INTEGER_TYPES,
    LOOPS,
    QUALIFIERS,
    Function,
    Refused,
    additive_terms,
    effects,
    has_kind,
    injective_in,
    is_arithmetic,
    is_float,
    is_integer,
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
    write_target,
)

INTERLEAVE = (4, 1, 2, 8)
UNROLL = (4, 2, 8)
TILE = (32, 8, 16, 64, 128)
JAM = (4, 2, 8, 16)
PRAGMA_HELPER = (
    "#ifndef R3_LOOP\n#define R3_PRAGMA(x) _Pragma(#x)\n"
    "#define R3_LOOP(x) R3_PRAGMA(x) /* expands x's macros first */\n#endif\n"
)


# ---------------------------------------------------------------- shared pieces


def fresh(source, base):
    """A name that nowhere occurs in the unit's text: ``base`` itself, else with a number
    (always numbered when ``base`` ends with '_': ``R3_TILE_1``)."""
    names = (base + str(n) if base.endswith("_") or n > 1 else base for n in range(1, 1000))
    for name in names:
        if name not in source.text:
            return name
    raise Refused("no fresh name for %s" % base)


def knob_header(name, default):
    return "#ifndef %s\n#define %s %d\n#endif\n" % (name, name, default)


def line_before(text, offset, line):
    """The edit that puts ``line`` (a directive) on a line of its own just before ``offset``."""
    if text.starts_line(offset):
        return (offset, offset, line + "\n" + text.indent(offset))
    return (offset, offset, "\n" + line + "\n")


def omp_bound(parents):
    """Whether the statement under ``parents`` is an OpenMP directive's own loop, or sits in
    a region that collapses loops or vectorizes with OpenMP already."""
    for p in reversed(parents):
        kind = p.get("kind", "")
        if kind.startswith("OMP") and ("Simd" in kind or any(c.get("kind") == "OMPCollapseClause" for c in kids(p))):
            return True
    for p in reversed(parents):
        kind = p.get("kind", "")
        if kind in ("CapturedStmt", "CapturedDecl"):
            continue
        return kind.startswith("OMP")
    return False


def hinted(parents):
    """A loop already under a ``#pragma clang loop`` (or another statement attribute)."""
    return bool(parents) and parents[-1].get("kind") == "AttributedStmt"


def _invariant_in(fx, *loops):
    """A test that an expression does not change across a region with effects ``fx``."""
    varying = set(fx.scalar_writes) | fx.locals | {l.id for l in loops}

    def test(expr):
        return not (refs(expr) & varying) and not has_kind(expr, ("CallExpr",))

    return test


def private_writes(fn, fx, allowed=()):
    """Classify the scalars a region writes: its own locals are fine, counters of loops in
    it that are only ever counters become ``private``; ``allowed`` names the rest that the
    caller handles (reductions); anything else is carried between iterations."""
    private = []
    for var in fx.scalar_writes:
        if var in fx.locals or var in allowed:
            continue
        if fn.pure_counter(var):
            private.append(fn.decls[var]["name"])
            continue
        raise Refused("%s is carried from one iteration to the next" % fn.decls.get(var, {}).get("name", var))
    return sorted(private)


def no_hidden_alias(fn, fx):
    """Refused when the region writes memory and reads some through a pointer the function
    computes (``p = a + 1; ... p[i]``) or an address expression that mentions a written
    array (``(a + 1)[i]``): the same element under another name. (Distinct parameters are
    taken not to overlap, as ``restrict`` asserts; replay checks it against the recording.)"""
    written = {a.decl["id"] for a in fx.accesses if a.write and a.decl}
    if not any(a.write for a in fx.accesses):
        return
    for a in fx.accesses:
        if a.decl is not None and fn.is_local_pointer(a.decl["id"]):
            raise Refused("an access through the local pointer %s" % a.decl["name"])
        if a.decl is None and refs(a.base_node) & written:
            raise Refused("a written array is also reached through %s" % a.base[5:])


def stores_disjoint(fn, fx, vars_, invariant):
    """Every array the region writes is written and read at one index that names a
    different element for different values of one of ``vars_`` (so iterations that differ
    there never touch the same element). Arrays declared in the region are its own."""
    no_hidden_alias(fn, fx)
    for base in fx.written_bases():
        accs = fx.on(base)
        decl = accs[0].decl
        if decl is None:
            raise Refused("a store through %s" % base[5:])
        if fn.is_local_pointer(decl["id"]):
            raise Refused("a store through the local pointer %s" % decl["name"])
        if decl["id"] in fx.locals:
            continue  # an array of the iteration's own
        if len({a.index_key for a in accs}) != 1:
            raise Refused("%s is accessed at different indices" % decl["name"])
        if not any(injective_in(accs[0].indices, v, invariant) for v in vars_):
            raise Refused("%s[...] is the same element in different iterations" % decl["name"])


def reductions(fn, fx, region, tolerance):
    """Scalars that a region only ever adds to (``s += x``): an OpenMP ``reduction(+:s)``.
    Floating-point sums reorder, so they need a tolerance."""
    out = []
    for var in fx.scalar_writes:
        decl = fn.decls.get(var)
        if var in fx.locals or decl is None or decl.get("storageClass") == "static" or not is_arithmetic(decl):
            continue
        if is_float(decl) and not tolerance:
            continue
        uses = [(n, p) for n, p in fn.uses.get(var, []) if any(x is region for x in p)]
        if all(
            p and p[-1].get("kind") == "CompoundAssignOperator" and p[-1].get("opcode") == "+=" and kids(p[-1])[0] is n
            for n, p in uses
        ):
            out.append(var)
    return out


def independent(fn, loop, tolerance=None):
    """(private, reductions) of a loop whose iterations may run in any order or at once;
    Refused otherwise. The conservative test: no calls but math, every array it writes is
    written and read at one index that moves with the induction variable, every scalar it
    writes is its own (or a pure inner counter, or a ``+=`` reduction)."""
    fx = effects(loop.body)
    if fx.refusal:
        raise Refused(fx.refusal)
    stores_disjoint(fn, fx, [loop.id], _invariant_in(fx, loop))
    sums = reductions(fn, fx, loop.body, tolerance)
    private = private_writes(fn, fx, allowed=sums)
    if not loop.declared and not fn.pure_counter(loop.id):
        raise Refused("%s is used after the loop" % loop.name)
    return private, [fn.decls[v]["name"] for v in sums]


# ---------------------------------------------------------------- restrict


def restrict(fn):
    src, text = fn.source, fn.text
    word = _restrict_word(src)
    pointers = [p for p in fn.params if _pointer_param(p)]
    lacking = [p for p in pointers if "restrict" not in (p.get("type") or {}).get("qualType", "")]
    if not lacking or _aliases(fn, pointers):
        return []
    edits = []
    for p in lacking:
        loc = p.get("loc") or {}
        if (
            "spellingLoc" in loc
            or not loc.get("_main")
            or text[loc["offset"] : loc["offset"] + len(p["name"])] != p["name"]
        ):
            return []  # written by a macro: leave the signature alone
        edits.append((loc["offset"], loc["offset"], word + " "))
    names = ", ".join(p["name"] for p in lacking)
    return [Proposal(text.edit(edits), "restrict", "restrict %s in %s" % (names, fn.name))]


def _pointer_param(param):
    """A named parameter written as a pointer (``T *p``, or a pointer typedef), not an array
    (``T a[]``: its declaration goes on past its name) nor a function pointer."""
    words = type_of(param).replace("*", " * ").split()  # "double *restrict": '*' is a word of its own
    while words and words[-1] in QUALIFIERS:
        words.pop()
    name, loc = param.get("name"), param.get("loc") or {}
    end = (param.get("range") or {}).get("end") or {}
    return (
        bool(name)
        and bool(words)
        and words[-1].endswith("*")
        and "(" not in " ".join(words)
        and end.get("offset") == loc.get("offset")
    )


def _aliases(fn, pointers):
    """Whether the body visibly makes two pointer parameters alias: one passed twice to a
    call, or one assigned from an expression that mentions another."""
    ids = {p["id"] for p in pointers}
    for node, _ in cast.walk(fn.body):
        kind = node.get("kind", "")
        if kind.endswith("CallExpr"):
            passed = [ref_decl(a)["id"] for a in kids(node)[1:] if ref_decl(a) and ref_decl(a)["id"] in ids]
            if len(passed) != len(set(passed)):
                return True
        if kind in ("BinaryOperator", "CompoundAssignOperator") and node.get("opcode") in ("=", "+=", "-="):
            target, value = kids(node)
            t = ref_decl(target)
            if t and t["id"] in ids and (refs(value) & ids) - {t["id"]}:
                return True
    return False


# ---------------------------------------------------------------- OpenMP


def omp_parallel(fn):
    """``omp parallel for`` on each outermost loop whose iterations are independent: a loop
    of the function's own, or one whose enclosing loops all carry a dependence (the sweeps
    of a stencil's time loop: each step's sweep in parallel, the steps in order). The sweeps
    of one time loop come first all at once, then each alone."""
    if not fn.source.threads:
        return []
    out, sweeps = [], {}
    for loop in fn.loops():
        if any(p.get("kind", "").startswith("OMP") for p in loop.parents) or hinted(loop.parents):
            continue
        around = loop.enclosing()
        if around and not _only_sequential_loops_around(fn, loop):
            continue
        try:
            pragma = _omp_directive(fn, loop, "#pragma omp parallel for")
        except Refused:
            continue
        where = ""
        if around:  # one of several sweeps, each named by its line
            sweeps.setdefault(id(around[-1]), []).append(pragma)
            where = " at line %d" % (fn.text.raw.count(b"\n", 0, pragma[0]) + 1)
        out.append(
            Proposal(
                fn.text.edit([pragma]), "omp-parallel", "omp parallel for over %s%s in %s" % (loop.name, where, fn.name)
            )
        )
    together = [
        Proposal(
            fn.text.edit(edits),
            "omp-parallel",
            "omp parallel for over each of the %d sweeps of a time loop in %s" % (len(edits), fn.name),
        )
        for edits in sweeps.values()
        if len(edits) > 1
    ]
    return together + out


def _only_sequential_loops_around(fn, loop):
    """Whether every loop around ``loop`` is a canonical for loop whose iterations depend on
    each other (a time loop), so that ``loop`` is the outermost one that may run in parallel."""
    for k, node in enumerate(loop.parents):
        if node.get("kind") not in LOOPS:
            continue
        outer = fn.canonical(node, loop.parents[:k]) if node.get("kind") == "ForStmt" else None
        if outer is None:
            return False
        try:
            independent(fn, outer, fn.source.tolerance)
        except Refused:
            continue
        return False  # the loop around is parallel itself: the pragma belongs there
    return True


def _omp_directive(fn, loop, pragma):
    """The edit that puts ``pragma`` (with the private and reduction clauses the loop needs)
    before ``loop``; Refused where its iterations are not independent."""
    private, sums = independent(fn, loop, fn.source.tolerance)
    if private:
        pragma += " private(%s)" % ", ".join(private)
    if sums:
        pragma += " reduction(+:%s)" % ", ".join(sums)
    return line_before(fn.text, span(fn.text, loop.node)[0], pragma)


def _omp_pragma(fn, loop, pragma, rule, description):
    """[the Proposal of ``pragma`` (with the private and reduction clauses the loop
    needs) before ``loop``], or [] where its iterations are not independent."""
    try:
        edit = _omp_directive(fn, loop, pragma)
    except Refused:
        return []
    return [Proposal(fn.text.edit([edit]), rule, description)]


def omp_simd(fn):
    if not fn.source.openmp:
        return []
    out = []
    for loop in _innermost(fn):
        out += _omp_pragma(
            fn, loop, "#pragma omp simd", "omp-simd", "omp simd on the %s loop in %s" % (loop.name, fn.name)
        )
    return out


OMP_FOR = re.compile(r"#\s*pragma\s+omp\s+((?:parallel\s+)?for)\b")


def omp_for_simd(fn):
    """``omp parallel for`` -> ``omp parallel for simd`` on a directive whose loop is
    innermost and independent, each such loop alone and, where there are several, all of
    them in one rewrite. The directive's clauses stay; a variable the test would make
    private or reduce must already be named in them, or the loop is left alone."""
    if not fn.source.openmp:
        return []
    out, edits = [], []
    for loop in fn.loops():
        directive = _owning_directive(loop)
        if directive is None or not loop.is_innermost() or hinted(loop.parents):
            continue
        begin, end = (directive.get("range") or {}).get("begin", {}), (directive.get("range") or {}).get("end", {})
        if "spellingLoc" in begin or "offset" not in begin or "offset" not in end:
            continue  # a _Pragma written by a macro
        line = fn.text[begin["offset"] : end["offset"]]
        head = OMP_FOR.match(line)
        if not head:
            continue
        try:
            private, sums = independent(fn, loop, fn.source.tolerance)
        except Refused:
            continue
        clauses = set(re.findall(r"\w+", line[head.end() :]))
        if any(v not in clauses for v in private + sums):
            continue
        at = begin["offset"] + head.end()
        line_no = fn.text.raw.count(b"\n", 0, at) + 1  # LULESH's loops are all ``i``
        out.append(
            Proposal(
                fn.text.edit([(at, at, " simd")]),
                "omp-simd",
                "omp %s simd on the %s loop at line %d in %s"
                % (" ".join(head.group(1).split()), loop.name, line_no, fn.name),
            )
        )
        edits.append((at, at, " simd"))
    if len(edits) > 1:
        # One loop of many rarely shows in the kernel's time (CalcEnergyForElems has ten): all at once first.
        out.insert(
            0,
            Proposal(
                fn.text.edit(edits), "omp-simd", "omp ... for simd on all %d such loops in %s" % (len(edits), fn.name)
            ),
        )
    return out


def omp_collapse(fn):
    """``collapse(2)`` on an OpenMP loop directive (``omp parallel for``, ``omp target teams
    distribute parallel for``) over a perfect nest of two loops: the inner loop's bounds fixed
    across the outer one and its iterations independent (``independent``, nothing to make
    private or reduce), the outer loop's being the directive's word. An offload region then
    spreads rows x columns over its teams and threads, not rows alone."""
    if not fn.source.openmp:
        return []
    out = []
    for outer in fn.loops():
        directive = next(
            (p for p in reversed(outer.parents) if p.get("kind") not in ("CapturedStmt", "CapturedDecl")), None
        )
        kind = (directive or {}).get("kind", "")
        if (
            not (kind.startswith("OMP") and kind.endswith("ForDirective"))
            or "Simd" in kind
            or any(c.get("kind") == "OMPCollapseClause" for c in kids(directive))
        ):
            continue
        body = outer.body
        stmts = kids(body) if body.get("kind") == "CompoundStmt" else [body]
        if len(stmts) != 1 or stmts[0].get("kind") != "ForStmt":
            continue
        inner = fn.canonical(stmts[0], outer.parents + (outer.node,) + ((body,) if body is not stmts[0] else ()))
        begin = (directive.get("range") or {}).get("begin") or {}
        if inner is None or "spellingLoc" in begin or "offset" not in begin:
            continue  # not canonical, or a _Pragma written by a macro
        if outer.id in refs(inner.lo) | refs(inner.hi) or not _bounds_fixed(fn, inner, effects(outer.body)):
            continue
        try:
            if independent(fn, inner, fn.source.tolerance) != ([], []):
                continue
        except Refused:
            continue
        end = fn.text.raw.find(b"\n", begin["offset"])
        if end < 0 or fn.text.raw[begin["offset"] : end].rstrip().endswith(b"\\"):
            continue  # a directive continued on the next line
        at = begin["offset"] + len(fn.text.raw[begin["offset"] : end].rstrip())
        out.append(
            Proposal(
                fn.text.edit([(at, at, " collapse(2)")]),
                "omp-collapse",
                "omp collapse(2) over the %s,%s loops in %s" % (outer.name, inner.name, fn.name),
            )
        )
    return out


def _owning_directive(loop):
    """The ``omp parallel for`` or ``omp for`` directive whose own loop this is, if any."""
    for p in reversed(loop.parents):
        kind = p.get("kind", "")
        if kind in ("CapturedStmt", "CapturedDecl"):
            continue
        if kind in ("OMPParallelForDirective", "OMPForDirective") and not any(
            c.get("kind") == "OMPCollapseClause" for c in kids(p)
        ):
            return p
        return None
    return None


def _innermost(fn):
    """Canonical innermost loops that no pragma or OpenMP directive owns yet."""
    return [l for l in fn.loops() if l.is_innermost() and not hinted(l.parents) and not omp_bound(l.parents)]


# ---------------------------------------------------------------- clang loop hints


def _hint(fn, loop, rule, words, prefix, values, what):
    knob = fresh(fn.source, prefix)
    begin = span(fn.text, loop.node)[0]
    text = fn.text.edit(
        [
            (0, 0, knob_header(knob, values[0]) + PRAGMA_HELPER),
            line_before(fn.text, begin, "R3_LOOP(clang loop %s(%s))" % (words, knob)),
        ]
    )
    return Proposal(text, rule, "%s the %s loop in %s (%s)" % (what, loop.name, fn.name, knob), {knob: values})


def vectorize_pragma(fn):
    out = []
    for loop in _innermost(fn):
        if not fn.source.tolerance and _may_reassociate(fn, loop):
            continue  # a hinted vectorizer reorders reductions: only within a tolerance
        try:
            out.append(
                _hint(
                    fn,
                    loop,
                    "vectorize-pragma",
                    "vectorize(enable) interleave_count",
                    "R3_IC_",
                    INTERLEAVE,
                    "vectorize",
                )
            )
        except Refused:
            continue
    return out


def unroll_pragma(fn):
    out = []
    for loop in _innermost(fn):
        try:
            out.append(_hint(fn, loop, "unroll-pragma", "unroll_count", "R3_UF_", UNROLL, "unroll"))
        except Refused:
            continue
    return out


def _may_reassociate(fn, loop):
    """Whether a loop may accumulate a floating-point value across iterations (into a scalar
    from outside, or an element that does not move with the induction variable)."""
    fx = effects(loop.body)
    if fx.refusal:
        return True
    for var in fx.scalar_writes:
        if var not in fx.locals and is_float(fn.decls.get(var) or {}):
            return True
    invariant = _invariant_in(fx, loop)
    return any(a.write and is_float(a.node) and not injective_in(a.indices, loop.id, invariant) for a in fx.accesses)


# ---------------------------------------------------------------- interchange and tiling


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
    if not _bounds_fixed(fn, inner, effects(outer.body)):
        raise Refused("the inner loop's bounds change in the outer loop")
    fx = effects(inner.body)
    if fx.refusal:
        raise Refused(fx.refusal)
    try:
        stores_disjoint(fn, fx, [outer.id, inner.id], _invariant_in(fx, outer, inner))
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


def _bounds_fixed(fn, inner, outer_fx):
    """The inner loop's bounds read nothing the outer body changes (its own counter aside)."""
    fx = type(outer_fx)(
        accesses=outer_fx.accesses,
        locals=outer_fx.locals,
        scalar_writes={k: v for k, v in outer_fx.scalar_writes.items() if k != inner.id},
    )
    return fn.invariant(inner.lo, fx) and fn.invariant(inner.hi, fx)


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
            _var_type(fn, l),
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
        init = ("%s %s = %s" % (_var_type(fn, l), l.name, t)) if l.declared else "%s = %s" % (l.name, t)
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
    name, hi = outer.name, _paren(text, outer.hi)

    def from_start(op, end):
        init = ("%s %s = %s" % (_var_type(fn, outer), name, start)) if outer.declared else "%s = %s" % (name, start)
        return "for (%s; %s %s %s; %s)" % (init, name, op, end, source_of(text, outer.inc))

    pad = text.indent(span(text, outer.node)[0])
    inner_head = text[slice(*_header(fn, inner))]
    body = text[span(text, inner.body)[0] : stmt_end(text, inner.node)]
    lines = [
        "{",
        "  %s %s = %s;" % (_var_type(fn, outer), start, source_of(text, outer.lo)),
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


def _var_type(fn, loop):
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
    guard = "%s %s %s" % (_paren(text, loop.lo), loop.op, _paren(text, loop.hi))
    head = "if (%s) {\n%s  %s %s = %s;\n%s  " % (guard, pad, _element_type(first.node), acc, element, pad)
    tail = "\n%s  %s = %s;\n%s}" % (pad, element, acc, pad)
    edits = [(begin, begin, head), (end, end, tail)]
    edits += [span(text, a.node) + (acc,) for a in accs]
    return text.edit(edits), " ".join(element.split())


def _paren(text, node):
    """A bound's text, in parentheses unless it is a single name or number."""
    simple = strip(node).get("kind") in ("DeclRefExpr", "IntegerLiteral")
    return source_of(text, node) if simple else "(%s)" % source_of(text, node)


def _element_type(node):
    t = node.get("type") or {}
    return t.get("desugaredQualType") or t.get("qualType")


# ---------------------------------------------------------------- staging copies


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
        if not (_pointer_param(param) or _row_array(param)):
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
    word = _restrict_word(src)
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


def _restrict_word(src):
    if language(src) == "C++":
        return "__restrict__"
    old = any(a in ("-std=c89", "-std=c90", "-std=gnu89", "-std=gnu90", "-ansi") for a in src.parse_args)
    return "__restrict" if old else "restrict"
