"""Pipeline SPECs: the compiler settings of one replay, as a short string.

    O3                                  -O3 for this machine
    O0,codegen=0,target=built           as a build at -O0 without -march compiled it
    O2,vectorize=0,unroll=1,inline=500  pipeline tuning options
    O3,passes=loop_unroll_and_jam;sccp  extra passes after the standard pipeline
    O3,codegen=2,cpu=skylake,features=+avx2+fma-avx512f
    O3,fast=reassoc+contract,fma=off,noalias=1
    O3,polly=1,polly_tile=64,polly_matmul=0,polly_vec=stripmine
    O3,polly=1,polly_parallel=1,polly_fusion=1,polly_tile2=1
    O3,specialize=0:300+2:64            arguments 0 and 2 folded in, behind a guard

The keys, with their aliases and values, are the rows of ``settings.SETTINGS`` (for
people: docs/replay.md, "Pipeline SPECs"); this module reads and writes them from there.
A syntax of its own (passes, cpu, features, fast, specialize) has a codec here.
"""

import re
from dataclasses import fields

import llvmlite.binding as llvm

from ..data import Pipeline
from ..errors import PipelineError
from ..settings import BY_KEY, FAST_MATH_FLAGS, SETTINGS
from ..toolchain import target_names

_BOOL = {"1": True, "on": True, "yes": True, "true": True, "0": False, "off": False, "no": False, "false": False}
_EXCLUDED_PASSES = ("printer", "viewer", "verifier", "aa_eval", "refprune", "debug")
_DEFAULTS = {f.name: f.default for f in fields(Pipeline)}


def known_passes():
    """Extra passes a SPEC may name: llvmlite's new pass manager ``add_<name>_pass`` methods."""
    names = []
    for attr in dir(llvm.ModulePassManager):
        m = re.match(r"add_(\w+)_pass$", attr)
        if m and not any(x in m.group(1) for x in _EXCLUDED_PASSES):
            names.append(m.group(1))
    return sorted(names)


def _bool(key, value):
    try:
        return _BOOL[value.lower()]
    except KeyError:
        raise PipelineError("%s=%s: expected 0 or 1" % (key, value))


def _int(key, value, lo=None, hi=None):
    try:
        v = int(value)
    except ValueError:
        raise PipelineError("%s=%s: expected an integer" % (key, value))
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise PipelineError("%s=%s: expected %s..%s" % (key, value, lo, hi))
    return v


def _choice(setting, key, value):
    if value not in setting.choices:
        labels = list(setting.choices)
        expected = setting.expect or " or ".join(filter(None, (", ".join(labels[:-1]), labels[-1])))
        raise PipelineError("%s=%s: expected %s" % (key, value, expected))
    return setting.choices[value]


def _passes(key, value):
    names = tuple(filter(None, re.split(r"[;+ ]", value)))
    known = set(known_passes())
    for n in names:
        if n not in known:
            raise PipelineError("unknown pass '%s'; known passes: %s" % (n, ", ".join(sorted(known))))
    return names


def _cpu(key, value):
    known = target_names(llvm.get_process_triple())
    if value not in ("host", "built") and known and value not in known[0]:
        raise PipelineError("cpu=%s: LLVM knows no such CPU (cpu=host, or a name `llc -mcpu=help` lists)" % value)
    return value


def _features(key, value):
    features = value if value == "host" else ",".join(re.findall(r"[+-][\w.]+", value))
    if value != "host" and (not features or re.sub(r"[+-][\w.]+|,", "", value)):
        raise PipelineError("features=%s: expected host or +feat-feat..." % value)
    known = target_names(llvm.get_process_triple())
    unknown = [f for f in features.split(",") if known and value != "host" and f[1:] not in known[1]]
    if unknown:
        raise PipelineError(
            "features=%s: LLVM knows no feature %s (see `llc -mattr=help`)" % (value, ", ".join(f[1:] for f in unknown))
        )
    return features


def _fast(key, value):
    if value in ("all", "fast", "1"):
        return FAST_MATH_FLAGS
    if value in ("none", "0", ""):
        return ()
    flags = tuple(filter(None, value.split("+")))
    for f in flags:
        if f not in FAST_MATH_FLAGS:
            raise PipelineError("unknown fast-math flag '%s'; known: %s" % (f, "+".join(FAST_MATH_FLAGS)))
    return flags


def _specialize(key, value):
    if value in ("", "none"):
        return ()
    pairs = []
    for item in value.split("+"):
        m = re.match(r"^(\d+):(-?\d+)$", item.strip())
        if not m:
            raise PipelineError("specialize=%s: expected INDEX:VALUE joined by + (e.g. 0:300+2:64)" % value)
        pairs.append((int(m.group(1)), int(m.group(2))))
    if len({i for i, _ in pairs}) != len(pairs):
        raise PipelineError("specialize=%s: an argument named twice" % value)
    return tuple(sorted(pairs))


# How each kind of setting reads its value: (setting, the key as written, value) -> the
# fields' value.
_READ = {
    "bool": lambda s, key, value: _bool(key, value),
    "int": lambda s, key, value: _int(key, value, s.low, s.high),
    "choice": _choice,
    "passes": lambda s, key, value: _passes(key, value),
    "cpu": lambda s, key, value: _cpu(key, value),
    "features": lambda s, key, value: _features(key, value),
    "fast": lambda s, key, value: _fast(key, value),
    "specialize": lambda s, key, value: _specialize(key, value),
}


def parse(spec):
    """Pipeline from a SPEC string (empty or None: the baseline)."""
    p = Pipeline()
    if not spec:
        return p
    polly_keys, own_keys = [], []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        m = re.match(r"^-?O([0123sz])$", item)
        if m:
            p.opt = m.group(1)
            continue
        if "=" not in item:
            if item in ("fast", "fast-math"):
                p.fast_math = FAST_MATH_FLAGS
                continue
            raise PipelineError("pipeline item '%s' is not KEY=VALUE (see r3 replay --help)" % item)
        key, value = (s.strip() for s in item.split("=", 1))
        setting = BY_KEY.get(key)
        if setting is None:
            raise PipelineError("unknown pipeline key '%s'" % key)
        if not setting.build:
            own_keys.append(item)
        if setting.polly:
            polly_keys.append(item)
        v = _READ[setting.kind](setting, key, value)
        for name in setting.fields:
            setattr(p, name, v)
    if p.build_compiler and (own_keys or p.fast_math):
        raise PipelineError(
            "compiler=build compiles with the build's own flags and takes none of %s" % ",".join(own_keys or ["fast"])
        )
    if polly_keys and not p.polly:
        raise PipelineError("%s: Polly's settings need polly=1" % ",".join(polly_keys))
    return p


def as_built(capture):
    """The kernel as its application runs it, the baseline every candidate is measured
    against: compiled by the build's compiler with the build's flags (its O-level, its
    target), which the other fields describe."""
    level = capture.opt_level
    return Pipeline(
        opt=level, codegen={"0": 0, "1": 1, "3": 3}.get(level, 2), cpu="built", features="built", build_compiler=True
    )


def _write_plain(s, value):
    """A bool, int or choice setting's item (None: a choice's several fields hold no one
    of its choices)."""
    if s.kind != "choice":
        return "%s=%d" % (s.key, value)
    labels = [label for label, v in s.choices.items() if v == value]
    if labels or len(s.fields) == 1:
        return "%s=%s" % (s.key, labels[0] if labels else value)
    return None


# How the kinds with a syntax of their own write a value other than the default.
_WRITE = {
    "passes": lambda s, value: "passes=" + ";".join(value),
    "cpu": lambda s, value: "cpu=" + value,
    "features": lambda s, value: "features=" + value.replace(",", ""),
    "fast": lambda s, value: "fast" if set(value) == set(FAST_MATH_FLAGS) else "fast=" + "+".join(value),
    "specialize": lambda s, value: "specialize=" + "+".join("%d:%d" % pair for pair in value),
}


def format_spec(p):
    """The canonical SPEC of a Pipeline (parse(format_spec(p)) == p): the O-level, then
    each setting away from its default, in ``SETTINGS``'s order; Polly's only with it."""
    items, written = ["O" + p.opt], set()
    for s in SETTINGS:
        if s.key == "opt" or (s.polly and not p.polly) or written.intersection(s.fields):
            continue
        values = [getattr(p, name) for name in s.fields]
        value, default = values[0], _DEFAULTS[s.field]
        if any(v != value for v in values) or value == default or (isinstance(default, tuple) and not value):
            continue
        item = _WRITE[s.kind](s, value) if s.kind in _WRITE else _write_plain(s, value)
        if item is not None:
            items.append(item)
            written.update(s.fields)
    return ",".join(items)
