"""Which caches a kernel's timed replays should start with: the state the application
leaves them in between two of the kernel's calls.

Replay calls a kernel again and again on the same memory, so whatever fits in a core's
own caches stays there (WARM). In the application other code runs between two calls and
may push the kernel's data out; a candidate that is fast on cached data (a vectorised
reduction) then gains much less there than in a warm replay (a dot product of two
vectors between sparse matrix products: the cold replay came nearer the application's
speedup than the warm one). The recording gives both sides of the question: the
bytes each captured kernel touches (``memory.touched_bytes``, from page tracking) and how
often each was called.

    choice = choose(capture, captures_of_the_same_run)
    choice.state    # WARM, SHARED or COLD (replay.engine.CacheFlush)
    choice.reason   # one line for the user

The state matters only where the kernel's data fits in a cache level: a kernel that
streams more than its threads' own caches hold reads the last-level cache in replay as
in the application, whatever ran before.

What page counts cannot tell: how much of a large structure a kernel's calls share. In
XSBench (public code, 37 MB of nuclide grids, ``memory.blocks_bytes``; each call touches
a few pages apart, ``memory.runs``) ``calculate_macro_xs`` reads its cross sections from
memory (cold replay came nearest its time in the application) while the binary searches
it calls find their upper levels cached (warm replay came nearest). Both look alike in
the recording; a rule on the
blocks' size picked cold for both. Replaying several recorded calls in their order shows
it (``replay.sequence``, for a kernel recorded with ``--instances N``); a kernel recorded
at one call, or whose calls cannot form a sequence, is timed by the rules below.
"""

import os
from dataclasses import dataclass

from ..capture import run_key
from ..data import COLD, SHARED, WARM
from ..machine import cache_bytes

AUTO = "auto"  # r3 tune --cache auto: each kernel's state chosen here


@dataclass
class CacheChoice:
    state: str
    reason: str


def _mb(n):
    return "%.1f MB" % (n / 1e6)


def _footprint(capture):
    """Bytes the captured call touched; None when the capture kept the whole heap."""
    memory = capture.memory or {}
    return memory.get("touched_bytes") if memory.get("mode") == "pages" else None


def top_calls(capture):
    """Calls of the kernel with no recorded kernel below them on the main thread's stack
    (captures recorded before that was counted: all its calls)."""
    top = capture.app.get("top_calls")
    return capture.app.get("calls") or 0 if top is None else top


def traffic_between_calls(capture, run):
    """Bytes the run touches, on average, between two calls of ``capture``'s kernel, from
    the captures of the run: the pages each outermost call touched (a caller's footprint
    holds what its callees touch inside it), times those calls, less the kernel's own
    calls, spread over its calls. A kernel nested in a time step is separated from its next
    call by the rest of the step. Code that was not captured adds to it: a lower bound."""
    calls = capture.app.get("calls") or 0
    if not calls:
        return 0
    outermost = sum(_footprint(c) * top_calls(c) for c in run if _footprint(c))
    own = (_footprint(capture) or 0) * calls
    return max(outermost - own, 0) / calls


def same_run(capture, captures):
    """The first instance of each kernel recorded in the same run as ``capture``."""
    firsts = {}
    for c in sorted(captures, key=lambda c: c.instance):
        if run_key(c) == run_key(capture):
            firsts.setdefault(c.kernel, c)
    return list(firsts.values())


def choose(capture, captures, l2=None, llc=None, cpus=None):
    """The cache state for ``capture``'s timed runs, from the captures of its run.
    ``l2``/``llc``: one core's level-2 and last-level cache bytes (default: this machine's)."""
    l2 = l2 or cache_bytes(2)
    llc = llc or cache_bytes()
    cpus = cpus or os.cpu_count() or 1
    footprint = _footprint(capture)
    calls = capture.app.get("calls") or 0
    if not l2 or not llc:
        return CacheChoice(WARM, "this machine does not say how large its caches are")
    if footprint is None:
        return CacheChoice(WARM, "the capture kept the whole heap, so what the kernel touches is unknown")
    if calls < 2:
        return CacheChoice(WARM, "called once, nothing runs between its calls")
    threads = min(capture.launch.get("threads") or 1, cpus) if capture.launch.get("openmp") else 1
    private = l2 * threads
    traffic = traffic_between_calls(capture, same_run(capture, captures))
    between = "between two calls the rest of the run touches %s" % _mb(traffic)
    if footprint <= llc and traffic >= llc:
        return CacheChoice(
            COLD, "touches %s; %s, more than the %s last-level cache" % (_mb(footprint), between, _mb(llc))
        )
    if footprint <= private and traffic >= private:
        return CacheChoice(
            SHARED,
            "touches %s, which fits in %d thread(s)' %s of L2; %s" % (_mb(footprint), threads, _mb(private), between),
        )
    if footprint > private:
        return CacheChoice(
            WARM,
            "touches %s, more than %d thread(s)' %s of L2 hold: it streams "
            "from the last-level cache in the application too" % (_mb(footprint), threads, _mb(private)),
        )
    return CacheChoice(
        WARM, "touches %s; %s, which its threads' L2 (%s) holds beside it" % (_mb(footprint), between, _mb(private))
    )
