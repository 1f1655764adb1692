"""What a mutator sees and gives: the kernel's unit (``KernelSource``), a rewrite of it
(``Proposal``), what the search knows so far (``Feedback``), and the interface every
mutator implements (``Mutator``). The mutators' modules and the MEP's slicer build on
these; the package's ``make_mutator`` picks an implementation."""

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ... import fortran

# A unit's extensions that say C++ (clang's own list, and the common spellings).
CXX_EXTENSIONS = (".cc", ".cpp", ".cxx", ".C", ".c++", ".cp", ".CPP", ".hpp", ".ii")


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


def language(source: KernelSource) -> str:
    """ "C", "C++" or "Fortran": a unit flang builds is Fortran; else what the unit's flags
    say (``-x``, a C++ ``-std=``), else its file's extension, else its compiler's name
    (``clang++``)."""
    if fortran.is_flang(source.clang) or fortran.is_source(source.filename):
        return "Fortran"
    args = list(source.parse_args)
    for i, a in enumerate(args):
        if a == "-x" and i + 1 < len(args):
            return "C++" if "++" in args[i + 1] else "C"
    if any(a.startswith("-std=") and "++" in a for a in args):
        return "C++"
    ext = os.path.splitext(source.filename)[1]
    if ext in CXX_EXTENSIONS:
        return "C++"
    if ext in (".c", ".i"):
        return "C"
    return "C++" if "++" in os.path.basename(source.clang) else "C"
