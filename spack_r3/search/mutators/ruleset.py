"""The rewrite rules, one row each (``RULES``): the name a proposal carries, the remix's
class, whether its rewrites keep every result bit for bit, whether they add threads, and
the function that proposes them; the rules mutator tries C's in the order of the rows, each
proposal checked to parse. A Fortran unit gets ``fortranrules.py``'s (its compile checks
them), the model's proposals are ``llm``'s: their rows carry no function here.

A new rule is its function and one row; remix, openmp and the spending report read the
rows (``rule``, ``rewrite_class``, ``RULES``), never a list of names of their own.
"""

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from . import cast, fortranrules, recurrences, stencils
from .base import Feedback, KernelSource, Mutator, Proposal, language
from .loops import Function
from .nests import interchange, scalar_replace, tile, unroll_and_jam
from .rules import omp_collapse, omp_for_simd, omp_parallel, omp_simd, restrict, unroll_pragma, vectorize_pragma
from .staging import stage


@dataclass(frozen=True)
class Rule:
    name: str  # Proposal.rule
    # the remix's rewrite class: a child tries one class at a time, and a family of
    # children (the spending report, the bench) is named by its classes
    kind: str
    exact: bool = False  # every element sees its terms in the original order: bit-identical results
    threads: bool = False  # adds OpenMP threads (an omp parallel, a wavefront)
    verify_again: bool = False  # may add threads: its children are verified several times
    promising: bool = False  # its proposals say when they should pay (Proposal.promise)
    # C's rule on clang's AST: the functions that propose its rewrites, in the order tried
    propose: Tuple[Callable[[Function], List[Proposal]], ...] = ()


# In the order the rules mutator tries C's. What no pipeline setting reaches comes first:
# time tiling (on a stencil, what no other rule or setting reaches), a new layout, register
# reuse (LLVM's unroll-and-jam pass is off in its -O pipelines), a new loop order. Then what
# the pipeline search has a setting for (noalias, vectorize, unroll) but only for the whole
# kernel. The remix tries one class at a time in this order: a budget that paid for four
# children (matmul) reached the interchange last when it came later.
RULES: Tuple[Rule, ...] = (
    Rule("wavefront", "time-tiling", exact=True, threads=True, verify_again=True, propose=(stencils.wavefront,)),
    Rule("time-tile", "time-tiling", exact=True, propose=(stencils.time_tile,)),
    Rule("stage", "layout", exact=True, propose=(stage,)),
    Rule(
        "reduction-interchange",
        "loop-order",
        exact=True,
        promising=True,
        propose=(recurrences.reduction_interchange,),
    ),
    Rule("pivot-hoist", "aliasing", exact=True, propose=(recurrences.pivot_hoist,)),
    Rule("unroll-and-jam", "loop-order", exact=True, propose=(unroll_and_jam,)),
    Rule("interchange", "loop-order", exact=True, promising=True, propose=(interchange,)),
    Rule("fuse", "loop-order", exact=True, propose=(stencils.fuse,)),
    Rule("tile", "loop-order", exact=True, propose=(tile,)),
    Rule("restrict", "aliasing", exact=True, propose=(restrict,)),
    Rule("omp-parallel", "parallel", threads=True, verify_again=True, propose=(omp_parallel,)),
    Rule("omp-collapse", "other", propose=(omp_collapse,)),  # (an existing parallel loop's collapse)
    Rule("omp-simd", "vector", propose=(omp_simd, omp_for_simd)),
    Rule("vectorize-pragma", "vector", propose=(vectorize_pragma,)),
    Rule("unroll-pragma", "vector", propose=(unroll_pragma,)),
    Rule("scalar-replace", "aliasing", exact=True, propose=(scalar_replace,)),
    Rule("distribute", "loop-order", exact=True, propose=(stencils.distribute,)),
    # Fortran's rules on the text (fortranrules.py; its interchange and omp-simd are the rows above)
    Rule("contiguous", "aliasing", exact=True),
    Rule("section-assign", "layout", exact=True),
    # the model's rewrites (llm.py): anything, threads included
    Rule("llm", "model", verify_again=True),
)
BY_NAME: Dict[str, Rule] = {r.name: r for r in RULES}
OTHER = Rule("", "other")  # what a name no row has is taken as


def rule(name: str) -> Rule:
    """The row of the rule ``name`` (a proposal's or a child's); one with nothing special
    about it where no row has that name."""
    return BY_NAME.get(name, OTHER)


def rewrite_class(name: str) -> str:
    return rule(name).kind


def threaded(rules) -> bool:
    """Whether a variant carrying ``rules`` (names) runs on threads a rewrite added."""
    return any(rule(r).threads for r in rules)


class RulesMutator(Mutator):
    name = "rules"

    def propose(self, source: KernelSource, feedback: Optional[Feedback] = None) -> List[Proposal]:
        if language(source) == "Fortran":  # rules of its own, on the text
            return fortranrules.propose(source)
        fn = Function(source)
        out = []
        for row in RULES:
            for propose in row.propose:
                out.extend(propose(fn))
        # A target region's AST holds its loops once for each construct it combines (target,
        # teams, distribute, parallel for: clang's captured statements): one proposal each.
        texts = set()
        out = [p for p in out if not (p.text in texts or texts.add(p.text))]
        return [p for p in out if _parses(source, p)]


def _parses(source, proposal):
    """A last guard against a bad edit: the rewrite parses and still defines the kernel."""
    try:
        cast.function_definition(source, text=proposal.text)
        return True
    except cast.ASTError:
        return False
