"""Winners are confirmed before anyone sees them.

The best of a search is biased upward (the winner's curse: re-measurement gives
less than the search's best pick; bench/README.md has a case). So the few best
candidates of each kernel are

1. re-verified on every recorded instance of the kernel, several times over when
   the kernel is parallel (a data race can verify once by luck), and
2. re-measured with many more pairs, in rounds spread over time and interleaved
   across kernels and candidates, so that one slow phase of the machine does not
   decide.

The speedup reported is the median of all re-measured pair ratios; its spread is
the range of the round medians. A kernel whose candidates do not beat the baseline
keeps the baseline (speedup 1, nothing to emit).
"""

import queue
import threading
from dataclasses import dataclass, field
from statistics import median
from typing import List, Optional

from ..data import OK, Variant
from ..replay.server import defer_to_workers


@dataclass
class Confirmed:
    """A candidate after confirmation."""

    variant: Variant
    search_speedup: Optional[float] = None  # what the search measured (biased upward)
    rejected: str = ""  # why it was dropped (an instance it does not verify on, a failed run)
    ratios: List[float] = field(default_factory=list)
    round_speedups: List[float] = field(default_factory=list)
    round_ratios: List[List[float]] = field(default_factory=list)  # ``ratios`` by round
    baseline_times: List[float] = field(default_factory=list)
    times: List[float] = field(default_factory=list)
    screened_out: bool = False  # measured in the first round only: below the best few there (``confirm(keep=)``)

    @property
    def speedup(self):
        return median(self.ratios) if self.ratios else None


def each_server(servers, drive):
    """Run ``drive(server)`` on a thread of its own for every server; wait for all."""

    def run(server):
        defer_to_workers(servers)
        drive(server)

    threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def run_jobs(servers, jobs):
    """Run ``job(server)`` for every job, one thread per server; results in job order."""
    todo = queue.Queue()
    for i, job in enumerate(jobs):
        todo.put((i, job))
    results = [None] * len(jobs)
    errors = []

    def drive(server):
        while not errors:
            try:
                i, job = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results[i] = job(server)
            except Exception as err:  # a bad capture: reported to the caller
                errors.append(err)

    each_server(servers, drive)
    if errors:
        raise errors[0]
    return results


def confirm(servers, candidates, rounds=3, pairs=11, parallel_runs=5, timeout=60.0, progress=None, keep=None):
    """``candidates``: list of (Target, [(Variant, search_speedup), ...]).

    ``keep``: a race. Every candidate is measured in the first round; only each target's
    ``keep`` best there go on to the other rounds (a candidate without a search speedup,
    such as the lean form of the best, always goes on). Where a search's best lie within
    its noise of each other, the real best is rarely among the first few by search value
    (on heat's stencil the first three confirmed below the 7th and 9th).

    Returns, per target in order, its list of Confirmed (rejected ones included)."""
    confirmed = [[Confirmed(v, s) for v, s in cands] for _, cands in candidates]

    # 1. Every instance, several runs for parallel kernels.
    jobs, where = [], []
    for ti, (target, _) in enumerate(candidates):
        runs = parallel_runs if target.parallel else 1
        for ci, c in enumerate(confirmed[ti]):
            for k, capture in enumerate(target.captures):
                jobs.append(
                    lambda server, capture=capture, c=c, runs=runs, target=target: server.submit(
                        capture, c.variant, repeat=1, tolerance=target.tolerance, timeout=timeout, verify_runs=runs
                    )
                )
                where.append((ti, ci, k))
    if progress:
        progress("re-verifying %d candidate(s) on every recorded instance" % sum(map(len, confirmed)))
    for (ti, ci, k), ev in zip(where, run_jobs(servers, jobs)):
        c = confirmed[ti][ci]
        if ev.status != OK and not c.rejected:
            c.rejected = "instance %d of %d: %s%s" % (
                k + 1,
                len(candidates[ti][0].captures),
                ev.status,
                (" (%s)" % ev.diagnostics) if ev.diagnostics else "",
            )

    # 2. Rounds of paired measurements, interleaved across kernels and candidates.
    items = [(target, c) for (target, _), cs in zip(candidates, confirmed) for c in cs]
    if keep is None:
        _rounds(servers, items, range(rounds), rounds, pairs, timeout, progress, "re-measuring")
        return confirmed
    _rounds(servers, items, range(1), rounds, pairs, timeout, progress, "re-measuring")
    for cs in confirmed:
        screen(cs, keep)
    _rounds(servers, items, range(1, rounds), rounds, pairs, timeout, progress, "re-measuring")
    return confirmed


def screen(confirmed, keep):
    """Mark all but the ``keep`` best of a target's candidates after a first round (by its
    median) as screened out; candidates without a search speedup are never screened."""
    racing = sorted(
        (c for c in confirmed if not c.rejected and c.ratios and c.search_speedup is not None), key=lambda c: -c.speedup
    )
    for c in racing[keep:]:
        c.screened_out = True


def measure_again(servers, winners, rounds=3, pairs=11, timeout=60.0, progress=None):
    """The picked winners alone, measured afresh: their speedups as reported.

    Picking the best of a few candidates by the very pairs that give its speedup reads
    high once more (fresh runs, and the application, gave less on the cg demo).
    ``winners``: list of (Target, Variant). Returns a Confirmed each, in order."""
    again = [(target, Confirmed(variant)) for target, variant in winners]
    _rounds(servers, again, range(rounds), rounds, pairs, timeout, progress, "measuring the winners again")
    return [c for _, c in again]


def _rounds(servers, items, which, rounds, pairs, timeout, progress, what):
    """Rounds ``which`` (of ``rounds``) of ``pairs`` paired runs of every (Target, Confirmed)
    neither rejected nor screened out, interleaved, one job per server at a time."""
    for r in which:
        todo = [(target, c) for target, c in items if not c.rejected and not c.screened_out]
        if progress:
            progress(
                "%s: round %d of %d, %d pairs for each of %d candidate(s)" % (what, r + 1, rounds, pairs, len(todo))
            )
        jobs = [
            lambda server, target=target, c=c: target.submit(server, c.variant, pairs=pairs, timeout=timeout)
            for target, c in todo
        ]
        for (_, c), ev in zip(todo, run_jobs(servers, jobs)):
            if ev.status != OK:
                c.rejected = "%s, round %d: %s %s" % (what, r + 1, ev.status, ev.diagnostics)
                continue
            c.ratios += ev.ratios
            c.round_ratios.append(list(ev.ratios))
            c.round_speedups.append(ev.speedup)
            c.baseline_times.append(ev.baseline_median_s)
            c.times.append(ev.time_median_s)
