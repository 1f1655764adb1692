"""Pipeline SPECs: the compiler settings of one replay, as a short string.

    O3                                  -O3 for this machine
    O0,codegen=0,target=built           as a build at -O0 without -march compiled it
    O2,vectorize=0,unroll=1,inline=500  pipeline tuning options
    O3,passes=loop_unroll_and_jam;licm  extra passes after the standard pipeline
    O3,codegen=2,cpu=skylake,features=+avx2+fma-avx512f
    O3,fast=reassoc+contract,fma=off,noalias=1
    O3,polly=1,polly_tile=64,polly_matmul=0,polly_vec=stripmine
    O3,polly=1,polly_parallel=1,polly_fusion=1,polly_tile2=1
    O3,specialize=0:300+2:64            arguments 0 and 2 folded in, behind a guard

Keys: opt (or O0..O3/Os/Oz), vectorize, slp, unroll, interleave, inline,
passes, codegen, cpu, features, fast (flags joined by +, or ``fast``/``all``),
target (host: this machine, the default; built: the target the build compiled the
kernel for), fma (built: fuse a*b+c where the build did, the default; on; off),
noalias (0/1); polly (0/1: an ``opt -O3 -polly`` stage of the LLVM
that recorded, before the pipeline) and, with polly=1 only, polly_tile (tile size;
0: no tiling; default: Polly's), polly_matmul (0/1: the matrix-multiplication
pattern optimization, on by default), polly_vec (none/stripmine), and Polly's scheduler
options, 0/1, off by default: polly_parallel (OpenMP code for a parallel outer loop),
polly_fusion (greedy fusion), polly_coincidence (outer band members parallel),
polly_tile2 (2nd-level tiling), polly_regtile (register tiling); specialize
(INDEX:VALUE joined by +: integer arguments folded in as constants, in a clone behind a
guard that runs the original for other values; replay/specialize.py).
"""

import re

import llvmlite.binding as llvm

from ..data import FAST_MATH_FLAGS, POLLY_SCHEDULER, Pipeline
from ..errors import PipelineError
from ..toolchain import target_names

_BOOL = {"1": True, "on": True, "yes": True, "true": True, "0": False, "off": False, "no": False, "false": False}
POLLY_VECTORIZERS = ("none", "stripmine")
_EXCLUDED_PASSES = ("printer", "viewer", "verifier", "aa_eval", "refprune", "debug")


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


def _specialize(value):
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
        if key not in ("opt", "codegen", "target", "compiler"):
            own_keys.append(item)
        if key == "opt":
            if value not in ("0", "1", "2", "3", "s", "z"):
                raise PipelineError("opt=%s: expected 0, 1, 2, 3, s or z" % value)
            p.opt = value
        elif key in ("vectorize", "loop_vectorize"):
            p.loop_vectorize = _bool(key, value)
        elif key in ("slp", "slp_vectorize"):
            p.slp_vectorize = _bool(key, value)
        elif key == "unroll":
            p.unroll = _bool(key, value)
        elif key == "interleave":
            p.interleave = _bool(key, value)
        elif key in ("inline", "inline_threshold"):
            p.inline_threshold = _int(key, value, 0, 100000)
        elif key == "passes":
            names = tuple(filter(None, re.split(r"[;+ ]", value)))
            known = set(known_passes())
            for n in names:
                if n not in known:
                    raise PipelineError("unknown pass '%s'; known passes: %s" % (n, ", ".join(sorted(known))))
            p.passes = names
        elif key == "codegen":
            p.codegen = _int(key, value, 0, 3)
        elif key == "cpu":
            p.cpu = value
            known = target_names(llvm.get_process_triple())
            if value not in ("host", "built") and known and value not in known[0]:
                raise PipelineError(
                    "cpu=%s: LLVM knows no such CPU (cpu=host, or a name `llc -mcpu=help` lists)" % value
                )
        elif key == "features":
            p.features = value if value == "host" else ",".join(re.findall(r"[+-][\w.]+", value))
            if value != "host" and (not p.features or re.sub(r"[+-][\w.]+|,", "", value)):
                raise PipelineError("features=%s: expected host or +feat-feat..." % value)
            known = target_names(llvm.get_process_triple())
            unknown = [f for f in p.features.split(",") if known and value != "host" and f[1:] not in known[1]]
            if unknown:
                raise PipelineError(
                    "features=%s: LLVM knows no feature %s (see `llc -mattr=help`)"
                    % (value, ", ".join(f[1:] for f in unknown))
                )
        elif key in ("fast", "fast_math"):
            if value in ("all", "fast", "1"):
                p.fast_math = FAST_MATH_FLAGS
            elif value in ("none", "0", ""):
                p.fast_math = ()
            else:
                flags = tuple(filter(None, value.split("+")))
                for f in flags:
                    if f not in FAST_MATH_FLAGS:
                        raise PipelineError("unknown fast-math flag '%s'; known: %s" % (f, "+".join(FAST_MATH_FLAGS)))
                p.fast_math = flags
        elif key == "fma":
            if value not in ("built", "on", "off"):
                raise PipelineError("fma=%s: expected built, on or off" % value)
            p.fma = value
        elif key == "target":
            if value not in ("host", "built"):
                raise PipelineError("target=%s: expected host or built" % value)
            p.cpu = p.features = value
        elif key == "noalias":
            p.noalias = _bool(key, value)
        elif key == "polly":
            p.polly = _bool(key, value)
        elif key == "polly_tile":
            p.polly_tile = _int(key, value, 0, 4096)
            polly_keys.append(item)
        elif key == "polly_matmul":
            p.polly_matmul = _bool(key, value)
            polly_keys.append(item)
        elif key in ("polly_vec", "polly_vectorizer"):
            if value not in POLLY_VECTORIZERS:
                raise PipelineError("%s=%s: expected %s" % (key, value, " or ".join(POLLY_VECTORIZERS)))
            p.polly_vectorizer = value
            polly_keys.append(item)
        elif key in POLLY_SCHEDULER:
            setattr(p, key, _bool(key, value))
            polly_keys.append(item)
        elif key == "specialize":
            p.specialize = _specialize(value)
        elif key == "compiler":
            if value not in ("build", "r3"):
                raise PipelineError("compiler=%s: expected build (the build's own compiler and flags) or r3" % value)
            p.build_compiler = value == "build"
        else:
            raise PipelineError("unknown pipeline key '%s'" % key)
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


def format_spec(p):
    """The canonical SPEC of a Pipeline (parse(format_spec(p)) == p)."""
    items = ["O" + p.opt]
    for key, value in (
        ("vectorize", p.loop_vectorize),
        ("slp", p.slp_vectorize),
        ("unroll", p.unroll),
        ("interleave", p.interleave),
    ):
        if value is not None:
            items.append("%s=%d" % (key, value))
    if p.inline_threshold is not None:
        items.append("inline=%d" % p.inline_threshold)
    if p.passes:
        items.append("passes=" + ";".join(p.passes))
    if p.codegen != 3:
        items.append("codegen=%d" % p.codegen)
    if p.cpu == p.features == "built":
        items.append("target=built")
    else:
        if p.cpu != "host":
            items.append("cpu=" + p.cpu)
        if p.features != "host":
            items.append("features=" + p.features.replace(",", ""))
    if set(p.fast_math) == set(FAST_MATH_FLAGS):
        items.append("fast")
    elif p.fast_math:
        items.append("fast=" + "+".join(p.fast_math))
    if p.fma != "built":
        items.append("fma=" + p.fma)
    if p.noalias:
        items.append("noalias=1")
    if p.specialize:
        items.append("specialize=" + "+".join("%d:%d" % pair for pair in p.specialize))
    if p.polly:
        items.append("polly=1")
        if p.polly_tile is not None:
            items.append("polly_tile=%d" % p.polly_tile)
        if not p.polly_matmul:
            items.append("polly_matmul=0")
        if p.polly_vectorizer != "none":
            items.append("polly_vec=" + p.polly_vectorizer)
        items += ["%s=1" % name for name in POLLY_SCHEDULER if getattr(p, name)]
    if p.build_compiler:
        items.append("compiler=build")
    return ",".join(items)
