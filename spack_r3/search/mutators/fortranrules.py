"""Rewrite rules for Fortran kernels, on the unit's text (clang's AST has no Fortran).

    proposals = propose(source)   # source: a KernelSource whose unit is Fortran

The kernel's procedure is found by its name (``subroutine smooth`` for
``_QMfieldsPsmooth``, or a ``bind(c, name="...")``), its DO nests by their ``do`` and
``end do`` lines. Each rule decides with a conservative test that the rewrite keeps the
kernel's results and is not offered when unsure (as ``rules.py`` does for C):

- ``contiguous``: assumed-shape dummy arrays (``a(:,:)``) get the ``contiguous``
  attribute, so their first dimension is known unit-stride and the loops over it
  vectorize without a stride check. The results cannot change: a caller passing a
  non-contiguous section gets flang's copy-in/copy-out at the call.
- ``interchange``: a perfect nest of two DO loops whose inner loop runs over a later
  subscript than the outer one (a row-major habit in column-major Fortran) is swapped
  so the innermost loop walks the first subscript, where every array written is written
  and read at one subscript naming both loop variables (no dependence between
  iterations), with no scalar written and no call in the body. Offered when it makes
  more references unit-stride than it makes strided.
- ``section-assign``: a whole assignment to an allocatable array (``t = tn``) becomes
  one to its whole section (``t(:,:) = tn``): the same elements in the same order,
  without Fortran 2003's reallocation check, which makes flang call its runtime for the
  copy instead of a loop it inlines and vectorizes. Replay checks the shapes conform.
- ``omp-simd``: ``!$omp simd`` before an innermost DO loop by the same test, in a unit
  compiled with -fopenmp.

Fixed-form units (``.f``) and labelled DO loops are read but not rewritten by the loop
rules (their continuation and label rules are not handled): ``contiguous`` and
``section-assign`` still apply.
"""

import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ... import fortran
from .base import KernelSource, Proposal

_PROCEDURE = re.compile(
    r"^\s*(?:[\w()*,=\s]*?\s)?(subroutine|function)\s+(\w+)\s*(\(([^)]*)\))?(.*)$",
    re.I,
)
_END = re.compile(r"^\s*end\s*(subroutine|function)?\s*(\w+)?\s*(!.*)?$", re.I)
_DO = re.compile(r"^(\s*)(?:\w+\s*:\s*)?do\s+(\w+)\s*=\s*(.+)$", re.I)
_LABELLED_DO = re.compile(r"^\s*do\s+\d+", re.I)
_END_DO = re.compile(r"^\s*end\s*do\b", re.I)
_ASSIGN = re.compile(r"^\s*(\w+)\s*(\(([^=]*)\))?\s*=(?!=)\s*(.+)$")
_REF = re.compile(r"\b(\w+)\s*\(")
_BIND = re.compile(r"bind\s*\(\s*c\s*,\s*name\s*=\s*['\"](\w+)['\"]", re.I)


def procedure_names(source: KernelSource) -> Tuple[str, ...]:
    """The names the kernel's procedure may have in its unit: the last part of flang's
    name, an external name without its ``_``, the symbol itself (``bind(c)``)."""
    full = fortran.demangle(source.kernel)
    if full:
        return (full.split("::")[-1],)
    names = [source.kernel]
    if source.kernel.endswith("_"):
        names.append(source.kernel[:-1])
    return tuple(names)


def procedure_span(text: str, names) -> Optional[Tuple[int, int]]:
    """(first line, last line) index of the procedure named one of ``names`` (any case), or
    declared ``bind(c, name=...)`` with one of them; None if it is not found."""
    lines = text.split("\n")
    wanted = {n.lower() for n in names}
    for i, line in enumerate(lines):
        code = _code(line)
        m = _PROCEDURE.match(code)
        if not m or code.lstrip().lower().startswith("end"):
            continue
        bind = _BIND.search(code)
        if m.group(2).lower() not in wanted and not (bind and bind.group(1).lower() in wanted):
            continue
        depth = 0
        for j in range(i, len(lines)):
            c = _code(lines[j])
            if _PROCEDURE.match(c) and not c.lstrip().lower().startswith("end"):
                depth += 1
            elif (
                _END.match(c)
                and not _END_DO.match(c)
                and not re.match(
                    r"^\s*end\s*(if|do|select|where|associate|block|forall|module|program|type|interface)\b", c, re.I
                )
            ):
                depth -= 1
                if depth == 0:
                    return i, j
        return None
    return None


_MODULE = re.compile(r"^\s*module\s+(\w+)\s*$", re.I)
_CONTAINS = re.compile(r"^\s*contains\s*$", re.I)


def procedure_unit(text: str, names) -> Optional[str]:
    """A compilable unit holding only the procedure named one of ``names``: the procedure
    alone when it is external, else its module's specification part (declarations,
    interfaces, ``use``), ``contains``, the procedure and ``end module``. None where the
    procedure or its module is not found."""
    span = procedure_span(text, names)
    if span is None:
        return None
    lines = text.split("\n")
    module = None
    for i in range(span[0] - 1, -1, -1):
        code = _code(lines[i])
        if _MODULE.match(code) and not re.match(r"^\s*module\s+procedure\b", code, re.I):
            module = i
            break
        if re.match(r"^\s*end\s+module\b", code, re.I):
            break
    body = lines[span[0] : span[1] + 1]
    if module is None:
        return "\n".join(body) + "\n"
    contains = next((i for i in range(module, span[0]) if _CONTAINS.match(_code(lines[i]))), None)
    if contains is None:
        return None
    name = _MODULE.match(_code(lines[module])).group(1)
    return "\n".join(lines[module : contains + 1] + body + ["end module %s" % name]) + "\n"


def _code(line):
    """A line without its trailing comment (a ``!`` outside quotes)."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "!":
            return line[:k]
    return line


@dataclass
class Loop:
    var: str
    begin: int  # the ``do`` line
    end: int  # the ``end do`` line
    indent: str
    children: List["Loop"] = field(default_factory=list)


def do_loops(lines, lo, hi):
    """The outermost DO loops between lines ``lo`` and ``hi``, with their inner loops; None
    where a labelled or unbalanced DO makes the nesting unsure."""
    top, stack = [], []
    for i in range(lo, hi + 1):
        code = _code(lines[i])
        if _LABELLED_DO.match(code) or code.rstrip().endswith("&"):
            return None
        m = _DO.match(code)
        if m:
            stack.append(Loop(m.group(2).lower(), i, -1, m.group(1)))
        elif _END_DO.match(code):
            if not stack:
                return None
            loop = stack.pop()
            loop.end = i
            (stack[-1].children if stack else top).append(loop)
    return None if stack else top


def _innermost(loops):
    for loop in loops:
        if loop.children:
            yield from _innermost(loop.children)
        else:
            yield loop


def _subscripts(text):
    """{array: [subscript text, ...]} of every ``name(...)`` reference in ``text``."""
    refs = {}
    for m in _REF.finditer(text):
        depth, k = 1, m.end()
        while k < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            k += 1
        refs.setdefault(m.group(1).lower(), []).append(re.sub(r"\s+", "", text[m.end() : k - 1]).lower())
    return refs


def independent(body, loop_vars) -> Optional[str]:
    """Why the iterations of the loops over ``loop_vars`` may depend on each other, or
    None: every statement is an array assignment; each array written is written and read
    at one subscript, which names every loop variable as a whole subscript."""
    writes = {}
    for line in body:
        code = _code(line).strip()
        if not code:
            continue
        m = _ASSIGN.match(code)
        if not m or m.group(2) is None:
            return "the body holds more than array assignments: %s" % code[:60]
        writes.setdefault(m.group(1).lower(), set()).add(re.sub(r"\s+", "", m.group(3)).lower())
    refs = _subscripts("\n".join(_code(l) for l in body))
    for array, written in writes.items():
        used = set(refs.get(array, [])) | written
        if len(used) != 1:
            return "%s is written and read at different subscripts" % array
        parts = next(iter(used)).split(",")
        if any(v not in parts for v in loop_vars):
            return "%s is written at a subscript not naming every loop variable" % array
    for name in refs:  # a call in an expression may have effects (intrinsics are fine but unknown here)
        if name not in writes and name in _called(body):
            return "the body calls %s" % name
    return None


def _called(body):
    return {m.group(1).lower() for line in body for m in re.finditer(r"\bcall\s+(\w+)", _code(line), re.I)}


def _stride_gain(body, outer, inner):
    """Array references whose first subscript is ``outer``'s variable (unit-stride once it
    is innermost) less those whose first subscript is ``inner``'s."""
    gain = 0
    for subs in _subscripts("\n".join(_code(l) for l in body)).values():
        for s in subs:
            first = s.split(",")[0]
            gain += (first == outer) - (first == inner)
    return gain


def interchange(source: KernelSource, lines, span) -> List[Proposal]:
    out = []
    for loop in do_loops(lines, *span) or []:
        stack = [loop]
        while stack:
            outer = stack.pop()
            stack.extend(outer.children)
            if len(outer.children) != 1 or outer.children[0].children:
                continue
            inner = outer.children[0]
            if inner.begin != outer.begin + 1 or inner.end != outer.end - 1:
                continue  # not a perfect nest
            body = lines[inner.begin + 1 : inner.end]
            gain = _stride_gain(body, outer.var, inner.var)
            if gain <= 0 or independent(body, [outer.var, inner.var]):
                continue
            new = list(lines)
            new[outer.begin] = outer.indent + lines[inner.begin].strip()
            new[inner.begin] = inner.indent + lines[outer.begin].strip()
            out.append(
                Proposal(
                    "\n".join(new),
                    "interchange",
                    "interchange %s,%s in %s" % (outer.var, inner.var, procedure_names(source)[0]),
                    promise=gain,
                )
            )
    return out


def omp_simd(source: KernelSource, lines, span) -> List[Proposal]:
    if not source.openmp:
        return []
    out = []
    for loop in _innermost(do_loops(lines, *span) or []):
        previous = _code(lines[loop.begin - 1]).strip().lower() if loop.begin else ""
        if "$omp" in lines[loop.begin - 1].lower() or previous.startswith("!$"):
            continue
        if independent(lines[loop.begin + 1 : loop.end], [loop.var]):
            continue
        new = lines[: loop.begin] + [loop.indent + "!$omp simd"] + lines[loop.begin :]
        out.append(
            Proposal(
                "\n".join(new), "omp-simd", "omp simd on the %s loop in %s" % (loop.var, procedure_names(source)[0])
            )
        )
    return out


def contiguous(source: KernelSource, lines, span) -> List[Proposal]:
    header = _code(lines[span[0]])
    m = _PROCEDURE.match(header)
    dummies = {d.strip().lower() for d in (m.group(4) or "").split(",")} if m else set()
    new, changed = list(lines), []
    for i in range(span[0] + 1, span[1]):
        code = _code(lines[i])
        if "::" not in code:
            continue
        attrs, entities = code.split("::", 1)
        low = attrs.lower()
        if any(w in low for w in ("contiguous", "pointer", "allocatable", "value")):
            continue
        names = [e.split("(")[0].strip().lower() for e in _top_level_split(entities)]
        shapes = [e for e in _top_level_split(entities) if re.search(r"\(\s*:\s*(,\s*:\s*)*\)", e)]
        if not shapes or not all(n in dummies for n in names) or len(shapes) != len(names):
            continue
        new[i] = attrs.rstrip() + ", contiguous :: " + entities.strip() + lines[i][len(code) :]
        changed += names
    if not changed:
        return []
    return [
        Proposal(
            "\n".join(new),
            "contiguous",
            "contiguous %s in %s" % (",".join(changed), procedure_names(source)[0]),
            promise=1,  # a sure gain, smaller than a loop order's
        )
    ]


def section_assign(source: KernelSource, lines, span) -> List[Proposal]:
    """Whole assignments to allocatable arrays (``t = tn``) as assignments to the whole
    section (``t(:,:) = tn``): the same elements in the same order, without the check for
    reallocating ``t`` (Fortran 2003's semantics) that makes flang call its runtime's
    ``Assign`` for each one instead of an inline loop."""
    ranks = {}
    for line in lines:
        code = _code(line)
        if "::" in code and "allocatable" in code.split("::", 1)[0].lower():
            for entity in _top_level_split(code.split("::", 1)[1]):
                m = re.match(r"\s*(\w+)\s*\(([\s:,]*)\)", entity)
                if m:
                    ranks[m.group(1).lower()] = m.group(2).count(":")
    new, changed = list(lines), []
    for i in range(span[0] + 1, span[1]):
        m = re.match(r"^(\s*)(\w+)(\s*=(?!=).*)$", lines[i])
        if not m or m.group(2).lower() not in ranks or not ranks[m.group(2).lower()]:
            continue
        new[i] = "%s%s(%s)%s" % (m.group(1), m.group(2), ",".join(":" * ranks[m.group(2).lower()]), m.group(3))
        changed.append(m.group(2))
    if not changed:
        return []
    return [
        Proposal(
            "\n".join(new),
            "section-assign",
            "assign %s as whole sections in %s" % (",".join(changed), procedure_names(source)[0]),
            promise=len(changed),
        )
    ]


def _top_level_split(text):
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        cur += ch
    return parts + [cur] if cur.strip() else parts


# The order the remix tries them: a loop order no pipeline setting reaches first (a row-order
# nest gains tens of times), then contiguous (what noalias-like settings cannot say).
RULES = (interchange, section_assign, contiguous, omp_simd)


def propose(source: KernelSource) -> List[Proposal]:
    lines = source.text.split("\n")
    span = procedure_span(source.text, procedure_names(source))
    if span is None:
        return []
    fixed = source.filename.lower().endswith((".f", ".for", ".ftn"))
    out = []
    for rule in RULES:
        if fixed and rule in (interchange, omp_simd):
            continue
        out.extend(rule(source, lines, span))
    return out
