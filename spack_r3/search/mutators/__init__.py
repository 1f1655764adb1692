"""Mutators: what proposes source variants of a kernel's unit for the outer loop.

One small interface (like Optuna's samplers): a mutator looks at the kernel's unit as
the parent variant has it and proposes rewrites of it; when a child fails to compile or
to verify, ``repair`` gets the diagnostic and may propose a fixed rewrite.

    mutator = make_mutator("rules")
    for proposal in mutator.propose(source, feedback):
        ...  # becomes a patch (sourcepatch.make_patch), compiled and verified in a worker

Implementations: ``rules`` (deterministic rewrites found on clang's AST, no model) and
``llm`` (a chat model through any OpenAI-compatible endpoint).
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple


@dataclass
class KernelSource:
    """A kernel's translation unit, as a mutator sees it."""

    kernel: str  # the kernel's symbol
    function: str  # its name in the source (the symbol, demangled for C++)
    filename: str  # the unit's file name (patches and diagnostics use it)
    text: str  # the unit's whole source, as the parent variant has it
    parse_args: List[str]  # clang flags that parse it (-I, -D, -std, -fopenmp, ...), no source/output
    compile_dir: str  # where those flags are relative to
    clang: str  # the compiler that builds the unit
    include_dir: str = ""  # the original source's folder (for its own "..." includes)
    openmp: bool = False  # the unit is compiled with -fopenmp (an OpenMP pragma takes effect)
    # A unit its build compiles without -fopenmp: whether a rewrite may add OpenMP threads
    # (its variant then compiles with -fopenmp added: ``search.openmp``), and if not, why.
    add_openmp: bool = False
    openmp_refusal: str = ""
    tolerance: Optional[float] = None  # relative FP tolerance (None/0: exact results only)
    scalars: Dict[str, int] = field(default_factory=dict)  # recorded integer arguments by name, if known
    rules: Tuple[str, ...] = ()  # the rewrites the parent already carries, in order

    @property
    def threads(self):
        """Whether a rewrite may add OpenMP threads (``omp parallel for``, a wavefront)."""
        return self.openmp or self.add_openmp


@dataclass
class Proposal:
    """One rewrite of the whole unit."""

    text: str  # the unit after the rewrite
    rule: str  # what made it: a rule's name, or "llm"
    description: str  # one line for reports ("interchange j,k in matmul")
    knobs: Dict[str, Tuple[int, ...]] = field(default_factory=dict)  # macro -> values (default first)
    # Why the rule expects it to pay on this shape, as a count (interchange: accesses of the
    # innermost loop it makes unit-stride, less those it makes strided); 0: nothing known.
    # The remix tries those above 0 early and those below 0 last.
    promise: int = 0


@dataclass
class Feedback:
    """What the search knows so far (the variable end of a model's prompt)."""

    parent_speedup: float = 1.0
    best: List[Tuple[str, float]] = field(default_factory=list)  # (description, speedup) of the best so far
    failures: List[Tuple[str, str]] = field(default_factory=list)  # (description, diagnostic) of recent failures
    examples: List[dict] = field(default_factory=list)  # inherited winning rewrites (see search.patterns)


class Mutator:
    """Proposes rewrites; subclasses set ``name`` and implement ``propose``."""

    name = "none"
    # Whether proposals are worth asking for ahead of time (a model is slow; rules are not).
    concurrent = False
    # Whether each propose/repair is a request to a model (counted, and reported when it gave nothing).
    uses_model = False
    timeout = None  # the longest one request may take, seconds (None: not bounded)

    def propose(self, source: KernelSource, feedback: Feedback) -> List[Proposal]:
        raise NotImplementedError

    def repair(self, source: KernelSource, proposal: Proposal, diagnostic: str) -> Optional[Proposal]:
        """A fixed version of ``proposal`` that failed with ``diagnostic``, or None."""
        return None


def make_mutator(name, model=None):
    """``rules``, ``llm`` (``model``: a ``model.client.ModelConfig``) or ``none``."""
    if name == "rules":
        from .rules import RulesMutator

        return RulesMutator()
    if name == "llm":
        from .llm import LLMMutator

        return LLMMutator(model)
    if name == "none":
        return None
    raise ValueError("unknown mutator %r (choose rules, llm or none)" % name)
