"""The ``rules`` mutator's rules: deterministic rewrites of a kernel found on clang's AST,
no model (``ruleset.RulesMutator`` runs them in its registry's order). This module holds
the tests they share, ``restrict``, the OpenMP rules and clang's loop hints; ``nests.py``
the rules on a nest of two loops; ``staging.py`` ``stage``; ``stencils.py`` and
``recurrences.py`` theirs.

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

from . import cast
from .base import Proposal, language
from .loops import (
    LOOPS,
    QUALIFIERS,
    Refused,
    effects,
    has_kind,
    injective_in,
    is_arithmetic,
    is_float,
    kids,
    ref_decl,
    refs,
    span,
    type_of,
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


def invariant_in(fx, *loops):
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
    stores_disjoint(fn, fx, [loop.id], invariant_in(fx, loop))
    sums = reductions(fn, fx, loop.body, tolerance)
    private = private_writes(fn, fx, allowed=sums)
    if not loop.declared and not fn.pure_counter(loop.id):
        raise Refused("%s is used after the loop" % loop.name)
    return private, [fn.decls[v]["name"] for v in sums]


def bounds_fixed(fn, inner, outer_fx):
    """The inner loop's bounds read nothing the outer body changes (its own counter aside)."""
    fx = type(outer_fx)(
        accesses=outer_fx.accesses,
        locals=outer_fx.locals,
        scalar_writes={k: v for k, v in outer_fx.scalar_writes.items() if k != inner.id},
    )
    return fn.invariant(inner.lo, fx) and fn.invariant(inner.hi, fx)


def restrict_word(src):
    if language(src) == "C++":
        return "__restrict__"
    old = any(a in ("-std=c89", "-std=c90", "-std=gnu89", "-std=gnu90", "-ansi") for a in src.parse_args)
    return "__restrict" if old else "restrict"


# ---------------------------------------------------------------- restrict


def restrict(fn):
    src, text = fn.source, fn.text
    word = restrict_word(src)
    pointers = [p for p in fn.params if pointer_param(p)]
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


def pointer_param(param):
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
        if outer.id in refs(inner.lo) | refs(inner.hi) or not bounds_fixed(fn, inner, effects(outer.body)):
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
    invariant = invariant_in(fx, loop)
    return any(a.write and is_float(a.node) and not injective_in(a.indices, loop.id, invariant) for a in fx.accesses)
