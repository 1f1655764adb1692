"""The pipeline's settings, declared once.

Each row of ``SETTINGS`` says what one setting of ``data.Pipeline`` is to the rest
of the tool: its SPEC key and the aliases ``parse`` takes, how its value is read
and written, whether it relaxes floating-point results, whether it needs Polly,
and what the search offers for it. From this table ``replay/pipeline.py`` derives
the SPEC parser and formatter, ``search/space.py`` its parameters and the Variant
they describe, ``search/simplify.py`` which settings a winner can drop, and
``data.Pipeline`` which fields relax FP and which JSON leaves out at their default.
``Pipeline`` itself keeps the field's type and default (mypy reads it there).

A new setting is a field of ``Pipeline`` and a row here; only a setting with a
value syntax of its own (a ``kind`` other than bool, int or choice) also needs a
codec in ``replay/pipeline.py``. The rows are in the order ``format_spec`` writes
them (plan digests depend on it); the search asks its parameters in its own order
(``search/space.py``: a study's fingerprint depends on that).

This module imports nothing of the package: ``data.py`` reads it.
"""

import dataclasses
from typing import Any, Dict, Mapping, Optional, Tuple, Union

FAST_MATH_FLAGS = ("reassoc", "nnan", "ninf", "nsz", "arcp", "contract", "afn")

# What the search offers for a bool setting (Optuna's own bool dimension).
BOOL = "bool"
# Pipeline tuning options the search leaves to the O-level, or forces.
TRISTATE: Mapping[str, Optional[bool]] = {"default": None, "on": True, "off": False}
# Floating-point relaxations, weakest first; offered only within the kernel's tolerance.
FAST_MATH_CHOICES: Mapping[str, Tuple[str, ...]] = {
    "none": (),
    "contract": ("contract",),
    "reassoc+contract": ("reassoc", "contract"),
    "reassoc+contract+nsz+arcp": ("reassoc", "contract", "nsz", "arcp"),
    "fast": FAST_MATH_FLAGS,
}

# A search offer: BOOL, or the search's values (labels) and the field value each means.
Offer = Union[str, Mapping[Any, Any]]


def same(*values: Any) -> Dict[Any, Any]:
    """An offer whose labels are the values themselves."""
    return {v: v for v in values}


@dataclasses.dataclass(frozen=True)
class Setting:
    key: str  # the SPEC key format_spec writes; the search parameter's name too, unless ``param``
    fields: Tuple[str, ...]  # the Pipeline fields it sets (target= sets cpu and features)
    # bool (0/1, on/off, ...), int (``low``..``high``), choice (``choices``: label -> value),
    # or the name of a codec in replay/pipeline.py
    kind: str
    aliases: Tuple[str, ...] = ()  # other keys parse takes
    low: int = 0
    high: int = 0
    choices: Mapping[Any, Any] = dataclasses.field(default_factory=dict)  # choice: label -> value
    expect: str = ""  # the error's "expected ...", where the choices alone do not say it
    relaxes_fp: bool = False  # a value other than the default changes floating-point results
    polly: bool = False  # only with polly=1 (written after it; reset with it)
    build: bool = False  # describes the build's own compile too: compiler=build takes it
    sparse: bool = False  # Pipeline.to_json leaves it out at its default (added after plans were written)
    droppable: bool = True  # simplify may put it back to its default
    offer: Optional[Offer] = None  # what the search tries (None: not searched as such)
    param: str = ""  # the search parameter's name, where it is not ``key``
    doc: str = ""  # the search parameter, for people (r3 tune's listing of the space)

    @property
    def field(self) -> str:
        return self.fields[0]

    @property
    def name(self) -> str:
        """The search parameter's name."""
        return self.param or self.key


# fmt: off
SETTINGS: Tuple[Setting, ...] = (
    Setting("opt", ("opt",), "choice", choices=same("0", "1", "2", "3", "s", "z"), build=True,
            offer=same("2", "3", "s"), doc="optimization level"),
    Setting("vectorize", ("loop_vectorize",), "bool", ("loop_vectorize",), offer=TRISTATE, doc="loop vectorizer"),
    Setting("slp", ("slp_vectorize",), "bool", ("slp_vectorize",), offer=TRISTATE, doc="SLP vectorizer"),
    Setting("unroll", ("unroll",), "bool", offer=TRISTATE, doc="loop unrolling"),
    Setting("interleave", ("interleave",), "bool", offer=TRISTATE, doc="loop interleaving"),
    Setting("inline", ("inline_threshold",), "int", ("inline_threshold",), low=0, high=100000,
            offer=same(None, 25, 225, 500, 1000), doc="inlining threshold"),
    # searched as a count and the passes themselves (search/space.py: passes, pass0, pass1, ...)
    Setting("passes", ("passes",), "passes", doc="extra passes after the standard pipeline"),
    Setting("codegen", ("codegen",), "int", low=0, high=3, build=True, offer=same(1, 2, 3),
            doc="code generation level"),
    # The target as a whole: this machine, or the one the build compiled the kernel for.
    Setting("target", ("cpu", "features"), "choice", choices=same("host", "built"), build=True, droppable=False,
            offer=same("host", "built"), doc="this machine, or the target the build compiled for"),
    Setting("cpu", ("cpu",), "cpu", droppable=False),
    Setting("features", ("features",), "features", droppable=False),
    Setting("fast", ("fast_math",), "fast", ("fast_math",), relaxes_fp=True, offer=FAST_MATH_CHOICES,
            param="fast_math", doc="fast-math flags"),
    Setting("fma", ("fma",), "choice", choices=same("built", "on", "off"), relaxes_fp=True,
            offer=same("built", "on", "off"), doc="FMA contraction"),
    Setting("noalias", ("noalias",), "bool", offer=BOOL,
            doc="pointer parameters do not alias (verified on every instance)"),
    # searched over the argument values a capture suggests (KernelFacts.specialize)
    Setting("specialize", ("specialize",), "specialize", sparse=True,
            doc="recorded-constant arguments folded into a guarded clone"),
    Setting("polly", ("polly",), "bool", offer=BOOL,
            doc="Polly polyhedral loop optimizer (opt stage before the pipeline)"),
    Setting("polly_tile", ("polly_tile",), "int", low=0, high=4096, polly=True,
            offer=same(None, 0, 16, 32, 64, 128, 256), doc="Polly tile size (0: no tiling)"),
    Setting("polly_matmul", ("polly_matmul",), "bool", polly=True, offer=BOOL,
            doc="Polly's matrix-multiplication pattern optimization"),
    Setting("polly_vec", ("polly_vectorizer",), "choice", ("polly_vectorizer",), choices=same("none", "stripmine"),
            polly=True, offer=same("none", "stripmine"), doc="Polly vectorizer"),
    # Polly's scheduler options (issue 46), 0/1, off by default
    Setting("polly_parallel", ("polly_parallel",), "bool", polly=True, sparse=True, offer=BOOL,
            doc="Polly's OpenMP code for parallel outer loops"),
    Setting("polly_fusion", ("polly_fusion",), "bool", polly=True, sparse=True, offer=BOOL,
            doc="Polly's greedy loop fusion"),
    Setting("polly_coincidence", ("polly_coincidence",), "bool", polly=True, sparse=True, offer=BOOL,
            doc="Polly: outer band members parallel (outer coincidence)"),
    Setting("polly_tile2", ("polly_tile2",), "bool", polly=True, sparse=True, offer=BOOL,
            doc="Polly's 2nd-level tiling"),
    Setting("polly_regtile", ("polly_regtile",), "bool", polly=True, sparse=True, offer=BOOL,
            doc="Polly's register tiling"),
    # The build's own compiler with the build's own flags: the baseline every speedup is against.
    Setting("compiler", ("build_compiler",), "choice", choices={"build": True, "r3": False}, build=True,
            expect="build (the build's own compiler and flags) or r3"),
)
# fmt: on

BY_KEY: Dict[str, Setting] = {k: s for s in SETTINGS for k in (s.key,) + s.aliases}
BY_NAME: Dict[str, Setting] = {s.name: s for s in SETTINGS if s.offer is not None}  # by search parameter
RELAXES_FP = tuple(s.field for s in SETTINGS if s.relaxes_fp)
SPARSE = tuple(s.field for s in SETTINGS if s.sparse)
