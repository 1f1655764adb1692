"""Winners are confirmed before anyone sees them.

The best of a search is biased upward (the winner's curse: re-measurement gives
less than the search's best pick; bench/README.md has a case). So the few best
candidates of each kernel are

1. re-verified on every recorded instance of the kernel, several times over when
   the kernel is parallel (a data race can verify once by luck), in one process as
   many calls in a row as the recorded run made of the kernel (``consecutive_calls``),
   and
2. re-measured with many more pairs, in rounds spread over time and interleaved
   across kernels and candidates, so that one slow phase of the machine does not
   decide.

The speedup reported is the median of all re-measured pair ratios; its spread is
the range of the round medians. A kernel whose candidates do not beat the baseline
keeps the baseline (speedup 1, nothing to emit).
"""

import json
import os
import queue
import threading
from dataclasses import dataclass, field
from statistics import median
from typing import List, Optional

from ..data import OK, Variant
from ..replay.server import defer_to_workers


# A candidate keeps its own state (a static, a call counter) from call to call within one
# process, and each evaluation is a process of its own making few calls: a search's makes a
# verification run and a few pairs (2 when raced), a long kernel's no calibration run. So
# one that hangs, crashes or goes wrong only from its Nth call can pass every evaluation of
# a search and of the rounds below. Re-verification makes as many calls in a row as the
# recorded run made of the kernel (each output checked), bounded in count and in time: at
# most MOST_CONSECUTIVE_CALLS, and those that fit in CONSECUTIVE_S (or a quarter of the
# timeout) at the recorded call's time, but as many as a round makes whatever they cost.
# Beyond that bound (a kernel of seconds called thousands of times) it is not confirmed.
MOST_CONSECUTIVE_CALLS = 1000
CONSECUTIVE_S = 10.0


def consecutive_calls(capture_dir, timeout, pairs):
    """How many calls in a row a candidate of the capture in ``capture_dir`` makes in one
    process before it is confirmed (rounds of ``pairs`` pairs, ``timeout`` per evaluation):
    the recorded run's calls of the kernel, bounded; 1 for a capture that does not say."""
    try:
        with open(os.path.join(capture_dir, "capture.json")) as f:
            meta = json.load(f)
        calls, call_s = int(meta["app"].get("calls") or 1), float(meta.get("instance_s") or 0.0)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 1
    seconds = min(CONSECUTIVE_S, timeout / 4)
    fit = max(1 + pairs, int(seconds / call_s)) if call_s > 0 else MOST_CONSECUTIVE_CALLS
    return max(1, min(calls, MOST_CONSECUTIVE_CALLS, fit))


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
    instance_speedups: List[List[float]] = field(default_factory=list)  # per round, each instance's (replay.weighted)

    @property
    def speedup(self):
        return median(self.ratios) if self.ratios else None


def each_server(servers, drive):
    """Run ``drive(server)`` on a thread of its own for every server; wait for all. What a
    thread raises is raised here once all have ended (the first of them): an exception
    that only ended its thread left its caller waiting on work nobody would do."""
    raised = []

    def run(server):
        try:
            defer_to_workers(servers)
            drive(server)
        except BaseException as err:
            raised.append(err)

    threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if raised:
        raise raised[0]


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

    # 1. Every instance, several runs for parallel kernels, the recorded run's calls in a row
    # (verification runs, then runs each put back and checked as timed runs are).
    jobs, where = [], []
    for ti, (target, _) in enumerate(candidates):
        runs = parallel_runs if target.parallel else 1
        for ci, c in enumerate(confirmed[ti]):
            for k, capture in enumerate(target.captures):
                calls = max(runs + 1, consecutive_calls(capture, timeout, pairs))
                jobs.append(
                    lambda server, capture=capture, c=c, runs=runs, target=target, calls=calls: server.submit(
                        capture,
                        c.variant,
                        repeat=calls - runs,
                        tolerance=target.tolerance,
                        timeout=timeout,
                        verify_runs=runs,
                    )
                )
                where.append((ti, ci, k, calls))
    if progress:
        progress("re-verifying %d candidate(s) on every recorded instance" % sum(map(len, confirmed)))
    for (ti, ci, k, calls), ev in zip(where, run_jobs(servers, jobs)):
        c = confirmed[ti][ci]
        if ev.status != OK and not c.rejected:
            c.rejected = "instance %d of %d, %d calls in a row: %s%s" % (
                k + 1,
                len(candidates[ti][0].captures),
                calls,
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
            if ev.instance_speedups:
                c.instance_speedups.append(list(ev.instance_speedups))
