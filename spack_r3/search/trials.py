"""What a trial of a study records (its user attributes) and how trials are read back:
which count against a budget, the variant and pairs each measured, and one code's trials
pooled as one (``bayes.Study`` writes them; tune, results and the benches read them)."""

import copy
import json
from statistics import median

from optuna.trial import TrialState

from ..data import Variant
from .simplify import settings

INTERRUPTED = "interrupted"  # status of a trial whose process died (or stopped) while it ran: never counted
DUPLICATE = "duplicate"  # a point proposed again, replaced by a neighbour (in memory only, never counted)
WITHDRAWN = "withdrawn"  # a trial claimed past the budget that another process's claims filled (never counted)


def counted(trial):
    """Trials that count as evaluations: finished, and not left behind by a kill."""
    return trial.state == TrialState.COMPLETE or (
        trial.state == TrialState.FAIL and trial.user_attrs.get("status") not in (INTERRUPTED, DUPLICATE, WITHDRAWN)
    )


def point(values):
    """A point of the space as a key: parameter values compare equal as JSON."""
    return json.dumps(values, sort_keys=True)


def trial_variant(trial):
    """The Variant a finished trial evaluated."""
    return Variant.from_json(trial.user_attrs["evaluation"]["variant"])


def code_key(evaluation):
    """What a trial's measurements are pooled by: the code it ran (trials of older
    databases, which lack it, by their variant)."""
    return evaluation.get("code") or repr(evaluation.get("variant"))


def trial_ratios(trial):
    """The pair ratios a finished trial measured (its value alone in older databases)."""
    return trial.user_attrs["evaluation"].get("ratios") or [trial.value]


def pooled_ratios(trials):
    """Every pair ratio of ``trials`` (one code's), together."""
    return [r for t in trials for r in trial_ratios(t)]


def evaluation_attrs(variant, ev, seconds, noise):
    return {
        "variant": variant.to_json(),
        "relaxes_fp": variant.pipeline.relaxes_fp,
        "time_s": ev.time_median_s,
        "baseline_s": ev.baseline_median_s,
        "speedup": ev.speedup,
        "speedup_min": ev.speedup_min,
        "speedup_max": ev.speedup_max,
        "max_rel_error": ev.max_rel_error,
        "eval_s": seconds,
        "diagnostics": (ev.diagnostics or "")[:500],
        "cache": ev.cache,
        "resampled": ev.resampled,
        "pairs": ev.pairs,
        "pair_noise": noise,
        "code": ev.code,
        "ratios": ev.ratios,
        "raced_out": ev.raced_out,
        "stages": ev.stages,
    }


def raced_out(trial):
    """Whether ``trial``'s pairs stopped early, the candidate clearly slower than the build:
    its value tells the sampler so, but it is never a winner."""
    return bool(trial.user_attrs.get("evaluation", {}).get("raced_out"))


def pooled_trial(trials):
    """One code's trials as one: the simplest of them (fewest settings away from the
    defaults, then the earliest), valued at the median of all their pairs."""
    simplest = min(trials, key=lambda t: (len(settings(trial_variant(t))), t.number))
    ratios = pooled_ratios(trials)
    out = copy.copy(simplest)
    out.value = median(ratios)
    out.user_attrs = dict(
        simplest.user_attrs,
        evaluation=dict(
            simplest.user_attrs["evaluation"],
            speedup_min=min(ratios),
            speedup_max=max(ratios),
            pairs=len(ratios),
            trials=len(trials),
        ),
    )
    return out


def best_curve(trials):
    """Best verified speedup after each of ``trials`` in time order (None before the first success)."""
    best, out = None, []
    for t in sorted(trials, key=lambda t: t.datetime_complete or t.datetime_start):
        if t.state == TrialState.COMPLETE and not raced_out(t):
            best = max(best or 0.0, t.value)
        out.append(best)
    return out
