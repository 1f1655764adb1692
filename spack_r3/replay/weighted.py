"""One candidate measured on a kernel's picked instances, weighed as the application runs them.

Record's ``--instances cover`` captures one call per stratum of the kernel's calls, each
stratum an equal share of its time (``record.instances``). A candidate that makes stratum i
``s_i`` times faster makes the kernel ``1 / sum(w_i / s_i)`` times faster, ``w_i`` the share
of the kernel's time stratum i carries: the time-weighted (harmonic) mean. A serial code
that wins 30x on the cheapest calls (no fork to pay) and loses 0.6x on the costly ones
loses in the application, and so it does here.

    ev = combine([server.submit(c, variant, ...) for c in captures], weights)

The same weights make the prediction of the report (``Capture.selection``), and the check
in the application sets that against the tuned build's time (``roundtrip/check.py``).
"""

from dataclasses import replace
from statistics import median
from typing import List, Optional, Sequence

from ..data import OK, Evaluation


def normalized(weights: Sequence[float]) -> List[float]:
    total = sum(weights)
    return [w / total for w in weights] if total > 0 else [1.0 / len(weights)] * len(weights)


def weighted_speedup(speedups: Sequence[float], weights: Sequence[float]) -> Optional[float]:
    """``1 / sum(w_i / s_i)``: the kernel's speedup from each stratum's; None if any is
    unknown or not positive."""
    if not speedups or any(s is None or s <= 0 for s in speedups):
        return None
    return 1.0 / sum(w / s for w, s in zip(normalized(weights), speedups))


def weights_of(selections) -> Optional[List[float]]:
    """The instances' weights from their captures' ``selection``s; None unless every
    capture was picked (``--instances cover``) and there are several."""
    if len(selections) < 2 or any(not s or s.get("weight") is None for s in selections):
        return None
    return normalized([float(s["weight"]) for s in selections])


def combine(evaluations: Sequence[Evaluation], weights: Sequence[float]) -> Evaluation:
    """One Evaluation of a variant from its evaluations on each instance (in the order of
    ``weights``). The first instance that fails decides the status, named in the
    diagnostics. Pair ratios are combined pair by pair (as many as every instance has);
    times are the weighted mean call."""
    n = len(evaluations)
    for i, ev in enumerate(evaluations):
        if ev.status != OK:
            return replace(ev, diagnostics="instance %d of %d: %s" % (i + 1, n, ev.diagnostics or ev.status))
    w = normalized(weights)
    first = evaluations[0]
    pairs = min(len(ev.ratios) for ev in evaluations)
    ratios = [weighted_speedup([ev.ratios[p] for ev in evaluations], w) for p in range(pairs)]
    ratios = [r for r in ratios if r is not None]
    speedup = weighted_speedup([ev.speedup for ev in evaluations], w) if pairs else None
    if speedup is None and ratios:
        speedup = median(ratios)

    def mean_of(field):
        values = [getattr(ev, field) for ev in evaluations]
        return sum(wi * v for wi, v in zip(w, values)) if all(v is not None for v in values) else None

    stages = {}
    for ev in evaluations:
        for k, v in ev.stages.items():
            stages[k] = stages.get(k, 0.0) + v
    return replace(
        first,
        verified=all(ev.verified for ev in evaluations),
        max_rel_error=max(ev.max_rel_error for ev in evaluations),
        mismatched_bytes=sum(ev.mismatched_bytes for ev in evaluations),
        time_median_s=mean_of("time_median_s"),
        time_min_s=mean_of("time_min_s"),
        time_max_s=mean_of("time_max_s"),
        baseline_median_s=mean_of("baseline_median_s"),
        compile_s=sum(ev.compile_s or 0.0 for ev in evaluations),
        speedup=speedup,
        speedup_min=min(ratios) if ratios else None,
        speedup_max=max(ratios) if ratios else None,
        pairs=pairs,
        ratios=ratios,
        resampled=sum(ev.resampled for ev in evaluations),
        calls=sum(ev.calls for ev in evaluations),
        stages=stages,
        raced_out=False,
        diagnostics="; ".join(ev.diagnostics for ev in evaluations if ev.diagnostics),
        instance_speedups=[ev.speedup for ev in evaluations],
        instance_weights=list(w),
    )
