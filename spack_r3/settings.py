"""The pipeline's settings, declared once: each on its own field of ``data.Pipeline``.

A field of ``Pipeline`` is one setting, in one line: its type, its default and its row,
``setting(default, key=..., kind=..., ...)``, with the arguments of ``Setting`` below
(what each means is said there). This module reads the rows into ``SETTINGS``: what
each setting is to the rest of the tool, its SPEC key and the aliases ``parse`` takes,
how its value is read and written, whether it relaxes floating-point results, whether
it needs Polly, and what the search offers for it. From this table
``compile/pipeline.py`` derives the SPEC parser and formatter, ``search/space.py`` its
parameters and the Variant they describe, ``search/simplify.py`` which settings a winner
can drop; ``data.Pipeline`` reads its own rows for which fields relax FP and which JSON
leaves out at their default.

A new setting is a field of ``Pipeline``; only one with a value syntax of its own (a
``kind`` other than bool, int or choice) also needs a codec in ``compile/pipeline.py``.
A setting of several fields (``target=`` sets cpu and features) is a row of its own,
declared here. ``SETTINGS`` is in the order ``format_spec`` writes: the fields' order,
with Polly's settings after the others and the build compiler last (the order SPECs had
when they were written by hand; a plan's or a study's text keeps it). The search asks its
parameters in its own order (``search/space.py``: a study's fingerprint depends on that).
"""

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .data import BUILD_TARGET, Pipeline

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

# A setting's lowering to one kind of flags (``lower`` reads it): None (none of that
# kind); a template the value fills, for any value but None; or value -> flags, where
# "*" is any other value (its flags templates) and, for a tuple value, each item maps
# on its own. BUILD_TARGET in flags stands for the build's own -march/-mcpu/-mtune.
Lowering = Union[None, str, Mapping[Any, Tuple[str, ...]]]


def same(*values: Any) -> Dict[Any, Any]:
    """An offer whose labels are the values themselves."""
    return {v: v for v in values}


@dataclasses.dataclass(frozen=True)
class Setting:
    """One row of ``SETTINGS``. A Pipeline field declares its own with ``data.setting``,
    whose arguments are these but ``fields`` (the field itself); there ``key`` defaults
    to the field's name, and ``choices`` and ``offer`` may be a tuple of values (the labels
    are the values) or, for ``offer``, a name in ``OFFERS``."""

    key: str  # the SPEC key format_spec writes; the search parameter's name too, unless ``param``
    fields: Tuple[str, ...]  # the Pipeline fields it sets (target= sets cpu and features)
    # bool (0/1, on/off, ...), int (``low``..``high``), choice (``choices``: label -> value),
    # or the name of a codec in compile/pipeline.py
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
    # What a value means as flags, for a compiler that is not replay's llvmlite (the MEP's
    # clang, Polly's opt stage): clang's driver flags, and LLVM options (opt's own command
    # line; each one -mllvm to clang). A value neither lowers is ``unlowered``'s reason.
    clang: Lowering = None
    llvm: Lowering = None
    unlowered: str = ""

    @property
    def field(self) -> str:
        return self.fields[0]

    @property
    def name(self) -> str:
        """The search parameter's name."""
        return self.param or self.key


# Settings of several fields, each a row of its own before its first field's. The target
# as a whole: this machine, or the one the build compiled the kernel for.
TARGET = Setting(
    "target",
    ("cpu", "features"),
    "choice",
    choices=same("host", "built"),
    build=True,
    droppable=False,
    offer=same("host", "built"),
    doc="this machine, or the target the build compiled for",
)
SEVERAL = (TARGET,)
# What a row's offer names (its other offers are the values themselves).
OFFERS: Mapping[str, Offer] = {"bool": BOOL, "tristate": TRISTATE, "fast-math": FAST_MATH_CHOICES}


def _values(given: Any) -> Any:
    """A row's choices or offer as declared: a tuple of values is ``same(*values)``."""
    return same(*given) if isinstance(given, tuple) else given


def _row(f: "dataclasses.Field[Any]") -> Setting:
    """The Setting declared on a Pipeline field."""
    row = dict(f.metadata["setting"])
    row.setdefault("key", f.name)
    if "choices" in row:
        row["choices"] = _values(row["choices"])
    if "offer" in row:
        offer = row["offer"]
        row["offer"] = OFFERS[offer] if isinstance(offer, str) else _values(offer)
    return Setting(fields=(f.name,), **row)


def _rows() -> Tuple[Setting, ...]:
    rows = []
    for f in dataclasses.fields(Pipeline):
        rows += [s for s in SEVERAL if s.field == f.name]
        rows.append(_row(f))
    # format_spec's order: Polly's settings after the others, then the build compiler
    return tuple(sorted(rows, key=lambda s: (s.key == "compiler", s.polly or s.key == "polly")))


SETTINGS: Tuple[Setting, ...] = _rows()

BY_KEY: Dict[str, Setting] = {k: s for s in SETTINGS for k in (s.key,) + s.aliases}
BY_NAME: Dict[str, Setting] = {s.name: s for s in SETTINGS if s.offer is not None}  # by search parameter


# -- lowering ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Lowered:
    """A pipeline as flags (``lower``)."""

    clang: Tuple[str, ...]  # clang's command line: driver flags, then the LLVM options (-mllvm each)
    llvm: Tuple[str, ...]  # the LLVM options alone: opt's command line
    unlowered: Tuple[str, ...]  # "key=value (why)" for each setting away from its default with no flag


def _flags(lowering: Lowering, value: Any, build: Sequence[str]) -> Optional[Tuple[str, ...]]:
    """The flags ``lowering`` gives ``value`` (None: it gives none, the value is unlowered)."""
    if lowering is None:
        return None
    if isinstance(lowering, str):
        return () if value is None else (lowering % value,)
    if isinstance(value, tuple) and value and not any(isinstance(k, tuple) for k in lowering):
        items = [_flags(lowering, v, build) for v in value]
        if any(i is None for i in items):
            return None
        return tuple(dict.fromkeys(f for i in items for f in i or ()))
    if value in lowering:
        flags = lowering[value]
    elif "*" in lowering and value is not None:
        flags = tuple(f % value for f in lowering["*"])
    else:
        return None
    out: List[str] = []
    for f in flags:
        out += [b for b in build if b.startswith(("-march", "-mcpu", "-mtune"))] if f == BUILD_TARGET else [f]
    return tuple(out)


def _written(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return "+".join(":".join(map(str, v)) if isinstance(v, tuple) else str(v) for v in value)
    return str(value)


def lower(pipeline: Pipeline, build_flags: Sequence[str] = (), rows: Sequence[Setting] = ()) -> Lowered:
    """``pipeline`` as flags, from its rows (``rows``: those alone; default every row);
    ``build_flags``: the build's own, whose target ``cpu=built`` keeps. Polly's settings
    lower only with Polly on."""
    clang: List[str] = []
    llvm: List[str] = []
    unlowered: List[str] = []
    for s in rows or SETTINGS:
        if len(s.fields) != 1 or (s.polly and not pipeline.polly):
            continue  # several fields (target=) lower on their fields' own rows
        value = getattr(pipeline, s.field)
        got = [_flags(s.clang, value, build_flags), _flags(s.llvm, value, build_flags)]
        if got == [None, None]:
            default = Pipeline.__dataclass_fields__[s.field].default
            if value != default and not (isinstance(default, tuple) and not value):
                unlowered.append("%s=%s (%s)" % (s.key, _written(value), s.unlowered or "no flag equivalent"))
            continue
        clang += got[0] or ()
        llvm += got[1] or ()
    clang = list(dict.fromkeys(clang))
    return Lowered(tuple(clang + [a for o in llvm for a in ("-mllvm", o)]), tuple(llvm), tuple(unlowered))


# Polly's stage: the rows whose LLVM options opt takes before llvmlite's pipeline.
POLLY_ROWS: Tuple[Setting, ...] = tuple(s for s in SETTINGS if s.polly or s.key == "polly")
