"""How the next candidate is chosen: Optuna samplers, picked by name.

Optuna's sampler interface is the one small interface here: the study loop asks a
trial, and whichever sampler the study holds fills it in. ``tpe`` (the default) is
Optuna's multivariate Tree-structured Parzen Estimator with grouped conditional
parameters (Polly's knobs exist only when Polly runs); ``constant_liar`` keeps
parallel workers from being handed the same point. ``random`` is the control.
"""

import warnings

import optuna

from ..errors import R3Error

SAMPLERS = ("tpe", "random")


def make_sampler(name, seed=None, startup_trials=10):
    if name == "tpe":
        with warnings.catch_warnings():  # multivariate/group/constant_liar are flagged experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(multivariate=True, group=True, constant_liar=True, seed=seed,
                                              n_startup_trials=startup_trials)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise R3Error("unknown sampler '%s' (choose: %s)" % (name, ", ".join(SAMPLERS)))
