"""How many paired runs an evaluation needs, from the spread of the pairs measured so far.

Five pairs give a median good to about a percent on a compute-bound kernel, and to
several percent on a memory-bound one (cg's spmv: one pair's ratio ranged widely around
1.0x). There every candidate of the search screened within that noise, the best of the
medians was the luckiest, and which search "won" was chance. So a study estimates one
pair's noise from its own evaluations and asks as many pairs as put the median's
standard error near ``TARGET_SE``; a kernel with quiet pairs keeps the base count and
costs nothing more.

    budget = PairBudget(base=5)
    budget.add(pair_noise(evaluation.ratios))   # after each verified evaluation
    budget.pairs()                              # for the next one
"""

import math
import random
from statistics import median

TARGET_SE = 0.02  # relative standard error of an evaluation's median ratio
# Two evaluations closer than this (relative) are not told apart: their difference has
# sqrt(2) times an evaluation's standard error; two standard errors of it.
INDISTINCT = 2 * 2**0.5 * TARGET_SE
# One candidate against another, or the search's best against its earlier best: at or
# below this ratio they are not told apart (runs of one variant differ by about this much).
MIN_GAIN = 1.01
# A winner counts (is reported as one and built by emit) only above this confirmed
# speedup over the build: a few percent in replay does not survive into the application
# (heat's stencil lost it there), and is no reason to relax its FP
# semantics. ``beats_build`` is the one place that decides it.
WIN_ABOVE = 1 + INDISTINCT
MOST_FACTOR = 6  # at most this many times the base pairs
RECENT = 25  # evaluations the estimate is taken over: the noise of a busy machine drifts


def clearly_above(a, b):
    """Whether search value ``a`` lies above ``b`` by more than two evaluations tell
    apart (``INDISTINCT``)."""
    return a > b * (1 + INDISTINCT)


def beats_build(speedup):
    """Whether a confirmed speedup over the kernel as built makes a winner: above
    ``WIN_ABOVE`` (``clearly_above`` 1.0). Decided where a kernel's result is made
    (``results.kernel_result``); emit builds the results that won."""
    return clearly_above(speedup, 1.0)


def pair_noise(ratios):
    """One pair's noise in an evaluation: the robust standard deviation (1.4826 x MAD)
    of its log ratios; None with fewer than 3 usable pairs."""
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    if len(logs) < 3:
        return None
    mid = median(logs)
    return 1.4826 * median(abs(x - mid) for x in logs)


def pairs_for(noise, base, most, target_se=TARGET_SE):
    """Pairs whose median has a standard error of ``target_se`` when one pair's log ratio
    has standard deviation ``noise`` (the median's is about 1.2533 sigma / sqrt(n))."""
    need = math.ceil((1.2533 * noise / target_se) ** 2)
    return max(base, min(most, need))


class PairBudget:
    """Pairs per evaluation for one study, from the noise of its evaluations so far
    (and of ``prior`` ones: its kernel's other studies)."""

    def __init__(self, base, prior=(), most=None, target_se=TARGET_SE):
        self.base, self.target_se = base, target_se
        self.most = most or base * MOST_FACTOR
        self.noises = [n for n in prior if n is not None]

    def add(self, noise):
        if noise is not None:
            self.noises.append(noise)

    def estimate(self):
        """One pair's noise now (None until three evaluations gave theirs)."""
        recent = self.noises[-RECENT:]
        return median(recent) if len(recent) >= 3 else None

    def pairs(self):
        noise = self.estimate()
        return self.base if noise is None else pairs_for(noise, self.base, self.most, self.target_se)


def ratio_interval(a_rounds, b_rounds, level=0.95, draws=2000, seed=0):
    """How much faster candidate a is than b, from their confirmation pairs: the ratio of
    their median pair ratios, and its ``level`` confidence interval by a two-level bootstrap
    (rounds drawn with replacement, then pairs within each drawn round). Rounds are the unit
    because the machine's phase moves between them (on nbody's force kernel three candidates
    read close together in one round and all higher in the next, each round's pairs tight);
    resampling pairs alone would call such a phase a difference between candidates.
    ``*_rounds``: lists of pair ratios, one list per round; no rounds is the baseline itself
    (1.0). Deterministic for a given ``seed``."""
    a_rounds = [r for r in a_rounds if r] or [[1.0]]
    b_rounds = [r for r in b_rounds if r] or [[1.0]]
    point = median([x for r in a_rounds for x in r]) / median([x for r in b_rounds for x in r])
    rng = random.Random(seed)

    def resample(rounds):
        drawn = [rng.choice(rounds) for _ in rounds]
        return median([rng.choice(r) for r in drawn for _ in r])

    ratios = sorted(resample(a_rounds) / resample(b_rounds) for _ in range(draws))
    tail = (1 - level) / 2
    return point, ratios[int(tail * draws)], ratios[min(draws - 1, int((1 - tail) * draws))]


def clearly_faster(a_rounds, b_rounds):
    """Whether a candidate is faster than another beyond noise, from their confirmation
    pairs (``*_rounds`` as for ``ratio_interval``): by more than MIN_GAIN, with the 95%
    interval of a/b above 1. Used by pick and by the benchmark's verdicts alike."""
    point, low, _ = ratio_interval(a_rounds, b_rounds)
    return point > MIN_GAIN and low > 1
