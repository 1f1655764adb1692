"""How the next candidate is chosen: Optuna samplers, picked by name.

Optuna's sampler interface is the one small interface here: the study loop asks a
trial, and whichever sampler the study holds fills it in. ``tpe`` (the default) is
Optuna's multivariate Tree-structured Parzen Estimator with grouped conditional
parameters (Polly's knobs exist only when Polly runs); ``constant_liar`` keeps
parallel workers from being handed the same point. Every ``EXPLORE_EVERY``-th of its
trials is drawn at random instead (``Interleaved``). TPE models the space from its
"good" trials, the best tenth by default; where more than that lie within noise of the
best, all of them are the good group (``plateau_gamma``). ``random`` is the control.
"""

import math
import warnings

import optuna

from ..errors import R3Error
from .noise import clearly_above

SAMPLERS = ("tpe", "random")
# TPE leaves a region it rates low for good: on the dense demo's matrix product it stayed
# on Polly's matmul pattern and never tried the codegen level that lifted the strip-mined
# nest further, which random search found.
# With a quarter of its trials drawn at random, it always holds what random search would
# have found on a quarter of the budget.
EXPLORE_EVERY = 4


class Interleaved(optuna.samplers.BaseSampler):
    """``model`` picks the trials, except every ``every``-th after the first ``startup``,
    which ``explore`` picks. Which one picks depends on the trial number alone: parallel
    workers and a resumed study need no state of their own."""

    def __init__(self, model, explore, every=EXPLORE_EVERY, startup=0):
        self.model, self.explore, self.every, self.startup = model, explore, every, startup

    def explores(self, number):
        return number >= self.startup and (number - self.startup) % self.every == self.every - 1

    def _for(self, trial):
        return self.explore if self.explores(trial.number) else self.model

    def infer_relative_search_space(self, study, trial):
        return self._for(trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self._for(trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self._for(trial).sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study, trial):
        self.model.before_trial(study, trial)
        self.explore.before_trial(study, trial)

    def after_trial(self, study, trial, state, values):
        self.model.after_trial(study, trial, state, values)
        self.explore.after_trial(study, trial, state, values)

    def reseed_rng(self):
        self.model.reseed_rng()
        self.explore.reseed_rng()


def plateau_gamma(values):
    """TPE's size of the good group for ``n`` finished trials: Optuna's default (the best
    tenth, at most 25), or every trial within noise of the best (``INDISTINCT``) where
    those are more, up to half. ``values()``: the finished trials' values.

    On a kernel where the best lie on a plateau (heat's stencil: half of TPE's codes
    within noise of its best, none steadily beyond the build) the best tenth are the
    luckiest measurements, and TPE would sample around them; with the whole plateau as
    its good group it samples the plateau broadly while still avoiding what is clearly
    worse (the stencil without its loop vectorizer).
    A kernel with a peak keeps the default."""

    def gamma(n):
        default = min(math.ceil(0.1 * n), 25)
        done = [v for v in values() if v is not None]
        if not done:
            return default
        best = max(done)
        plateau = sum(not clearly_above(best, v) for v in done)
        return max(default, min(plateau, n // 2))

    return gamma


def make_sampler(name, seed=None, startup_trials=10, values=None):
    """``values``: the study's finished values now (a callable), for ``plateau_gamma``."""
    if name == "tpe":
        # multivariate, group and constant_liar are flagged experimental; gamma deprecated (Optuna 4.9)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            warnings.simplefilter("ignore", FutureWarning)
            tpe = optuna.samplers.TPESampler(
                multivariate=True,
                group=True,
                constant_liar=True,
                seed=seed,
                n_startup_trials=startup_trials,
                gamma=plateau_gamma(values) if values else None,
            )
        # (a seed of its own: the random draws are not random search's first ones again)
        return Interleaved(
            tpe, optuna.samplers.RandomSampler(seed=None if seed is None else seed + 1), startup=startup_trials
        )
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise R3Error("unknown sampler '%s' (choose: %s)" % (name, ", ".join(SAMPLERS)))
