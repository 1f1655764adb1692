"""The search space of one kernel: typed parameters built from what its capture knows.

A space is a list of parameters (bool, categorical, int range). Some are
conditional: Polly's knobs exist only when Polly runs, the i-th extra pass only
when the pass sequence is that long, floating-point relaxations only when the
kernel's tolerance allows them, schedule and chunk only for OpenMP loops whose
schedule is decided at run time. ``suggest`` turns an Optuna trial into parameter
values, ``variant`` turns those into the Variant replay runs; ``describe`` prints
the space, so a user sees what is searched.

What each pipeline setting offers (its values, what each means, its description) is
its row in ``settings.SETTINGS``; this module decides when a setting is searched and
the order its parameters are asked in (the fingerprint of a study depends on it).
"""

import hashlib
import itertools
import json
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, Optional, Tuple

from ..data import Launch, Pipeline, Variant
from ..settings import BOOL, BY_KEY, BY_NAME, SETTINGS, TRISTATE

# Extra passes worth trying after the standard pipeline (llvmlite's names): loop and
# scalar clean-ups that can expose more vectorization or remove redundant work.
EXTRA_PASSES = (
    "loop_unroll_and_jam",
    "loop_unroll",
    "loop_strength_reduce",
    "new_gvn",
    "reassociate",
    "instruction_combine",
    "aggressive_instcombine",
    "sccp",
    "jump_threading",
    "dead_store_elimination",
    "mem_copy_opt",
    "simplify_cfg",
    "sinking",
    "loop_rotate",
)
MAX_EXTRA_PASSES = 3
KNOB_PREFIX = "knob:"  # parameters that are a source variant's macro knobs
# Polly's knobs swept together (``blocks``); its other settings, the scheduler's options,
# stay outside the block (its sweep would take 32 times as long).
POLLY_BLOCK = ("polly_tile", "polly_matmul", "polly_vec")
POLLY_OTHERS = tuple(s.name for s in SETTINGS if s.polly and s.offer is not None and s.name not in POLLY_BLOCK)
# The loop optimizations searched as "default" (what the O-level does), "on" or "off".
LOOP_SWITCHES = tuple(s.name for s in SETTINGS if s.offer is TRISTATE)
# The settings this space asks where their conditions hold (the others its rows offer
# come after them).
_PLACED = ("opt",) + LOOP_SWITCHES + ("inline", "codegen", "target", "noalias", "polly", "fast_math", "fma")


def _always(values):
    return True


@dataclass
class Param:
    """One dimension. ``choices`` for bool/categorical, ``low``..``high`` for int."""

    name: str
    kind: str  # "bool", "categorical" or "int"
    doc: str
    choices: Tuple = ()
    low: int = 0
    high: int = 0
    active: Callable = field(default=_always, repr=False)  # active(values so far) -> bool
    condition: str = ""  # the same condition, for people

    def suggest(self, trial):
        if self.kind == "bool":
            return trial.suggest_categorical(self.name, [False, True])
        if self.kind == "int":
            return trial.suggest_int(self.name, self.low, self.high)
        return trial.suggest_categorical(self.name, list(self.choices))

    def accepts(self, value):
        """Whether ``value`` lies in this dimension."""
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind == "int":
            return isinstance(value, int) and not isinstance(value, bool) and self.low <= value <= self.high
        return value in self.choices

    def values(self):
        """Every value of this dimension."""
        if self.kind == "bool":
            return [False, True]
        if self.kind == "int":
            return list(range(self.low, self.high + 1))
        return list(self.choices)

    def values_text(self):
        if self.kind == "bool":
            return "no, yes"
        if self.kind == "int":
            return "%d..%d" % (self.low, self.high)
        return ", ".join("default" if c is None else str(c) for c in self.choices)


@dataclass
class KernelFacts:
    """What the space depends on, read from a capture and its kernel's IR."""

    kernel: str
    parallel: bool = False  # the kernel forks OpenMP threads
    dispatch_loops: int = 0  # OpenMP loops whose schedule and chunk are run-time choices
    tolerance: Optional[float] = None  # relative FP tolerance; None or 0: exact results only
    cores: int = 1  # CPUs a replay worker has (most threads worth trying)
    serial: bool = False  # candidates run one thread, the kernel's own OpenMP regions too
    polly: bool = False  # an opt with Polly is available
    # The target the build compiled the kernel for: when it lacks vector or FMA features
    # this machine has (a generic x86-64 build), compiling for this machine is searched.
    built_target: str = ""
    retarget: bool = False
    built_fma: bool = True  # the build's target fuses a*b+c
    # Macro knobs of a source variant (name -> values, the rewrite's default first),
    # e.g. the tile size a tiling rule exposes: searched like any other setting.
    knobs: Dict[str, Tuple[int, ...]] = field(default_factory=dict)
    # Argument specializations worth trying (``specialize.choices``): (label, ((index,
    # value), ...)), "none" first; empty: no recorded-constant argument shapes the kernel.
    specialize: Tuple[Tuple[str, Tuple[Tuple[int, int], ...]], ...] = ()
    # An OpenMP target region forking teams (backends.OFFLOAD): its launch geometry, teams
    # and threads per team, is searched.
    teams: bool = False
    # A device kernel's launch geometry, as its backend searches it (device.geometry.params:
    # a CUDA launch's block and, for a grid-stride kernel, grid): Params asked as they are.
    geometry: Tuple[Param, ...] = ()

    @property
    def relax_fp(self):
        return bool(self.tolerance)


def _offer(name, **override):
    """The parameter of a pipeline setting, as its row in ``settings.SETTINGS`` offers it."""
    s = BY_NAME[name]
    if s.offer == BOOL:
        return Param(s.name, "bool", override.pop("doc", s.doc), **override)
    return Param(
        s.name, "categorical", override.pop("doc", s.doc), choices=override.pop("choices", tuple(s.offer)), **override
    )


def _powers(most):
    """1, 2, 4, ... up to ``most``."""
    return tuple(2**i for i in range(most.bit_length()) if 2**i <= most)


def _label(setting, value):
    """What the search calls a setting's ``value``."""
    if setting.offer == BOOL:
        return value
    return next(label for label, v in setting.offer.items() if v == value)


class Space:
    def __init__(self, facts):
        self.facts = facts
        self.params = self._build(facts)

    @staticmethod
    def _build(f):
        p = [_offer(name) for name in ("opt",) + LOOP_SWITCHES + ("inline", "codegen")]
        if f.retarget and not f.geometry:  # (a device kernel's code is compiled for its GPU, not this CPU)
            p.append(_offer("target", doc="%s (%s)" % (BY_NAME["target"].doc, f.built_target or "generic")))
        p += [
            _offer("noalias"),
            Param("passes", "int", BY_KEY["passes"].doc, low=0, high=MAX_EXTRA_PASSES),
        ]
        for i in range(MAX_EXTRA_PASSES):
            p.append(
                Param(
                    "pass%d" % i,
                    "categorical",
                    "extra pass %d" % (i + 1),
                    choices=EXTRA_PASSES,
                    active=lambda v, i=i: v.get("passes", 0) > i,
                    condition="passes > %d" % i,
                )
            )
        if f.polly:
            p.append(_offer("polly"))
            on = lambda v: v.get("polly", False)  # noqa: E731
            p += [_offer(name, active=on, condition="polly") for name in POLLY_BLOCK]
            # Its scheduler's options (issue 46): stencils and chains of products.
            p += [
                _offer(name, active=on, condition="polly")
                for name in POLLY_OTHERS
                if name != "polly_parallel" or f.cores > 1
            ]
        if f.relax_fp:
            p += [
                _offer("fast_math", doc="%s (within tolerance %g)" % (BY_NAME["fast_math"].doc, f.tolerance)),
                _offer(
                    "fma",
                    doc="%s (within tolerance %g): as built, or changed" % (BY_NAME["fma"].doc, f.tolerance),
                    choices=("built", "off" if f.built_fma else "on"),
                ),
            ]
        # A row that offers a setting this space does not place above is asked after them
        # (one that relaxes FP only within the tolerance): a new setting is searched once
        # its row says what to try.
        placed = {q.name for q in p} | set(_PLACED)
        p += [
            _offer(s.name)
            for s in BY_NAME.values()
            if s.name not in placed and not s.polly and (f.relax_fp or not s.relaxes_fp)
        ]
        if f.parallel and f.cores > 1:
            p.append(Param("threads", "int", "OpenMP threads", low=1, high=f.cores))
        if f.teams:  # on the host plugin a team is CPU threads: many more than the worker's CPUs time the scheduler
            p += [
                Param(
                    "num_teams",
                    "categorical",
                    "teams of the target region (default: the runtime's)",
                    choices=(None,) + _powers(2 * max(f.cores, 1)),
                ),
                Param(
                    "thread_limit",
                    "categorical",
                    "threads per team (default: the runtime's)",
                    choices=(None,) + _powers(max(f.cores, 1)),
                ),
            ]
        p += list(f.geometry)
        if f.dispatch_loops:
            p += [
                Param(
                    "schedule",
                    "categorical",
                    "OpenMP schedule of run-time scheduled loops",
                    choices=("static", "dynamic", "guided"),
                ),
                Param("chunk", "categorical", "OpenMP chunk size", choices=(None, 1, 4, 16, 64, 256)),
            ]
        if f.specialize and not f.geometry:  # (device code is not specialized yet: host replay's)
            p.append(
                Param(
                    "specialize",
                    "categorical",
                    BY_KEY["specialize"].doc,
                    choices=tuple(label for label, _ in f.specialize),
                )
            )
        for name, choices in sorted(f.knobs.items()):
            p.append(
                Param(
                    KNOB_PREFIX + name,
                    "categorical",
                    "source knob %s (-D%s=...)" % (name, name),
                    choices=tuple(choices),
                )
            )
        return p

    def suggest(self, trial):
        """Parameter values for an Optuna trial (only the active parameters are asked)."""
        values = {}
        for param in self.params:
            if param.active(values):
                values[param.name] = param.suggest(trial)
        return values

    def variant(self, values, base=None):
        """The Variant that parameter values describe (``base`` brings the source patch)."""
        pipe = Pipeline(
            passes=tuple(values["pass%d" % i] for i in range(values.get("passes", 0))),
            specialize=dict(self.facts.specialize).get(values.get("specialize", "none"), ()),
        )
        for name, s in BY_NAME.items():  # each setting its row offers, as the value its label means
            if name in values and (values.get("polly") or not s.polly):
                value = values[name] if s.offer == BOOL else s.offer[values[name]]
                for field_name in s.fields:
                    setattr(pipe, field_name, value)
        launch = Launch(
            threads=values.get("threads", 1 if self.facts.serial and self.facts.parallel else None),
            schedule=values.get("schedule"),
            chunk=values.get("chunk"),
            num_teams=values.get("num_teams"),
            thread_limit=values.get("thread_limit"),
            max_registers=values.get("max_registers"),
        )
        defines = {k[len(KNOB_PREFIX) :]: v for k, v in values.items() if k.startswith(KNOB_PREFIX)}
        if base is None:
            return Variant(pipeline=pipe, launch=launch, source_defines=defines)
        return replace(base, pipeline=pipe, launch=launch, source_defines=dict(base.source_defines, **defines))

    def _baseline_values(self):
        """Every parameter's value that describes the first candidate: -O3 for this
        machine, as compiled, as recorded; Polly's knobs at Polly's own defaults."""
        defaults = Pipeline()
        values = {name: _label(s, getattr(defaults, s.field)) for name, s in BY_NAME.items()}
        values.update(
            passes=0,
            specialize="none",
            threads=self.facts.cores,
            schedule="static",
            chunk=None,
            num_teams=None,
            thread_limit=None,
            max_registers=None,
        )
        return values

    def _values(self, change):
        """The active parameters' values: the baseline's, with ``change`` applied."""
        base, values = self._baseline_values(), {}
        base.update({KNOB_PREFIX + k: v[0] for k, v in self.facts.knobs.items()})
        for p in self.params:  # conditional ones as they become active
            if p.active(values):
                if p.name in change:
                    values[p.name] = change[p.name]
                elif p.name in base:
                    values[p.name] = base[p.name]
                else:  # a conditional one the baseline never activates (an extra pass)
                    values[p.name] = p.low if p.kind == "int" else (p.choices or (False,))[0]
        return values

    def adopt(self, values):
        """``values`` from another space's trial (the original's, for a source variant) as
        values of this one: what this space cannot take falls back to the baseline's."""
        return self._values(
            {p.name: values[p.name] for p in self.params if p.name in values and p.accepts(values[p.name])}
        )

    def defaults(self):
        """Values that describe the first candidate (-O3 for this machine)."""
        return self._values({})

    def neighbour(self, values, rng):
        """``values`` with one active setting changed at random (``rng``: a random.Random);
        settings the change brings into play (Polly's knobs, a longer pass sequence) are
        drawn at random too."""
        params = [p for p in self.params if p.name in values and (p.kind != "int" or p.high > p.low)]
        param = rng.choice(params)
        changed = dict(values, **{param.name: rng.choice([v for v in param.values() if v != values[param.name]])})
        out = {}
        for p in self.params:
            if p.active(out):
                out[p.name] = changed[p.name] if p.name in changed else rng.choice(p.values())
        return out

    def blocks(self):
        """Groups of settings that interact, by the setting that brings each into play:
        which value of one is best depends on the others. Polly's tile size, matrix-
        multiplication pattern and vectorizer: on the dense demo's matrix product the
        pattern gives about the same with any tile, and more lies only with the pattern off,
        the nest strip-mined and tiled."""
        if any(p.name == "polly" for p in self.params):
            return {"polly": POLLY_BLOCK}
        return {}

    def plain(self, switch):
        """The baseline with ``switch`` (a bool setting) on: a block's settings at their
        defaults, everything else as built."""
        return self._values({switch: True})

    def sweep(self, values, block):
        """Every combination of ``block``'s settings, the others at ``values``'s (none where
        ``values`` leave the block out)."""
        if any(name not in values for name in block):
            return []
        params = {p.name: p for p in self.params}
        return [
            dict(values, **dict(zip(block, combo)))
            for combo in itertools.product(*(params[name].values() for name in block))
        ]

    def seeds(self):
        """Where the Bayesian search starts: the baseline, then each setting measured to
        matter most on these kernels (DESIGN.md, "LLVM facts that bite": Polly on loop
        nests, noalias, fast-math within tolerance), alone and together."""
        names = {p.name for p in self.params}
        changes = [{}, {"noalias": True}]
        if "target" in names:
            changes.append({"target": "built"})
        if "polly" in names:
            changes.append({"polly": True})
        if "fast_math" in names:
            changes.append({"fast_math": "fast"})
            changes.append({"fast_math": "fast", "noalias": True})
        if "specialize" in names:  # every argument that shapes the kernel, folded in
            changes.append({"specialize": self.facts.specialize[-1][0]})
        if "polly" in names and "fast_math" in names:
            changes.append({"polly": True, "fast_math": "fast", "noalias": True})
        return [self._values(change) for change in changes]

    def fingerprint(self):
        """Short hash of the space: a study is resumed only into the same space. The
        settings that follow the CPUs of one replay worker are left out (threads, launch
        geometry, Polly's parallel code, offered with more than one): ``--workers`` decides
        those, and the number of workers is no part of the search (a run resumed with other
        ``--workers`` goes on with the same study)."""
        # (a device kernel's geometry follows no worker's CPUs: it stays in)
        workers = ("threads", "polly_parallel") + (() if self.facts.geometry else ("num_teams", "thread_limit"))
        desc = [
            (p.name, p.kind, [str(c) for c in p.choices], p.low, p.high, p.condition)
            for p in self.params
            if p.name not in workers
        ]
        return hashlib.sha256(json.dumps(desc).encode()).hexdigest()[:8]

    def describe(self):
        """One line per parameter: name, values, condition."""
        lines = []
        for p in self.params:
            lines.append(
                "  %-13s %-32s %s%s"
                % (p.name, p.values_text(), p.doc, (" [if %s]" % p.condition) if p.condition else "")
            )
        return "\n".join(lines)
