"""The rules mutator: every rewrite rule of ``rules.py`` and ``stencils.py``, in the order
the remix tries them, each proposal checked to parse; a Fortran unit gets
``fortranrules.py``'s (its compile checks them)."""

from typing import List, Optional

from . import cast, fortranrules, recurrences, stencils
from .base import Feedback, KernelSource, Mutator, Proposal, language
from .loops import Function
from .rules import (
    interchange,
    omp_collapse,
    omp_for_simd,
    omp_parallel,
    omp_simd,
    restrict,
    scalar_replace,
    stage,
    tile,
    unroll_and_jam,
    unroll_pragma,
    vectorize_pragma,
)


class RulesMutator(Mutator):
    name = "rules"

    def propose(self, source: KernelSource, feedback: Optional[Feedback] = None) -> List[Proposal]:
        if language(source) == "Fortran":  # rules of its own, on the text
            return fortranrules.propose(source)
        fn = Function(source)
        out = []
        # What no pipeline setting reaches first: a new layout, register reuse (LLVM's
        # unroll-and-jam pass is off in its -O pipelines), a new loop order. Then what the
        # pipeline search has a setting for (noalias, vectorize, unroll) but only for the whole
        # kernel. The remix tries one rewrite class at a time in this order, and a budget
        # that pays for four children (matmul) reached the interchange last.
        # Time tiling first: on a stencil it is what no other rule or pipeline setting reaches.
        for rule in (
            stencils.wavefront,
            stencils.time_tile,
            stage,
            recurrences.reduction_interchange,
            recurrences.pivot_hoist,
            unroll_and_jam,
            interchange,
            stencils.fuse,
            tile,
            restrict,
            omp_parallel,
            omp_collapse,
            omp_simd,
            omp_for_simd,
            vectorize_pragma,
            unroll_pragma,
            scalar_replace,
            stencils.distribute,
        ):
            out.extend(rule(fn))
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
