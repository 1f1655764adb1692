"""Winners without passengers: settings that do not earn their keep are dropped.

A search's best variant carries every setting the sampler happened to pick, most
of which do nothing for this kernel (an inlining threshold for a kernel that calls
nothing, an extra pass that finds no work). What gets emitted and built later
should be the settings that matter: each non-default setting of the winner is put
back to its default, one at a time, in parallel on the pool; those whose removal
keeps at least ``keep`` of the winner's paired speedup are all removed together.
The simplified variant then goes through confirmation beside the original
candidates, and wins ties (see ``results.kernel_result``).
"""

from dataclasses import fields, replace

from ..data import OK, Launch, Pipeline
from ..settings import SETTINGS
from .confirm import run_jobs

_PIPELINE_DEFAULTS = {f.name: f.default for f in fields(Pipeline)}
# Polly's settings mean nothing without it; the target is not a passenger (settings.SETTINGS).
_POLLY_KNOBS = tuple(name for s in SETTINGS if s.polly for name in s.fields)
_KEPT = {name for s in SETTINGS if not s.droppable for name in s.fields}
SOURCE = "source"  # the setting that is a variant's source rewrite (patch and macro knobs)


def settings(variant):
    """The non-default settings of a variant, each as (name, the variant without it)."""
    p = variant.pipeline
    names = [
        name
        for name, default in _PIPELINE_DEFAULTS.items()
        if name not in _KEPT and getattr(p, name) != default and (p.polly or name not in _POLLY_KNOBS)
    ]
    names += [name for name in ("threads", "schedule", "chunk") if getattr(variant.launch, name) is not None]
    if variant.source_patch:  # a rewrite is a setting too: one that does not pay is not emitted
        names.append(SOURCE)
    return [(name, without(variant, [name])) for name in names]


def without(variant, names):
    """``variant`` with every setting in ``names`` back at its default."""
    p, launch = variant.pipeline, variant.launch
    reset = {n: _PIPELINE_DEFAULTS[n] for n in names if n in _PIPELINE_DEFAULTS}
    if "polly" in names:  # without Polly its knobs mean nothing
        reset.update({k: _PIPELINE_DEFAULTS[k] for k in _POLLY_KNOBS})
    out = replace(
        variant, pipeline=replace(p, **reset), launch=replace(launch, **{n: None for n in names if hasattr(Launch, n)})
    )
    if SOURCE in names:
        out = replace(out, source_patch=None, source_defines={}, source_rule=None, source_openmp=False)
    return out


def simplify(servers, target, variant, speedup, pairs=5, keep=0.97, timeout=60.0):
    """The variant without the settings that do not matter (or ``variant`` itself)."""
    trials = settings(variant)
    if not trials:
        return variant
    evs = run_jobs(
        servers, [lambda server, v=v: target.submit(server, v, pairs=pairs, timeout=timeout) for _, v in trials]
    )
    passengers = [name for (name, _), ev in zip(trials, evs) if ev.status == OK and ev.speedup >= keep * speedup]
    return without(variant, passengers) if passengers else variant
