"""Which caches a kernel's timed replays should start with: the state the application
leaves them in between two of the kernel's calls.

Replay calls a kernel again and again on the same memory, so whatever fits in a core's
own caches stays there (WARM). In the application other code runs between two calls and
may push the kernel's data out; a candidate that is fast on cached data (a vectorised
reduction) then gains much less there than in a warm replay (a dot product of two 1.3 MB
vectors between sparse matrix products: 10.8x warm, 5.6x with each core's caches
emptied, 6.6x in the application). The recording gives both sides of the question: the
bytes each captured kernel touches (``memory.touched_bytes``, from page tracking) and how
often each was called.

    choice = choose(capture, captures_of_the_same_run)
    choice.state    # WARM, SHARED or COLD (replay.engine.CacheFlush)
    choice.reason   # one line for the user

The state matters only where the kernel's data fits in a cache level: a kernel that
streams more than its threads' own caches hold reads the last-level cache in replay as
in the application, whatever ran before.

A kernel can touch little per call and still read a large structure: a lookup into a
cross-section table or a binary search over an energy grid touches a few pages of it,
other pages on the next call. Replayed, the one recorded call finds its pages in L1 every
time; in the application they are mostly where the whole table fits. The recording says
so: ``memory.blocks_bytes``, the heap blocks holding the touched pages, is then many times
``touched_bytes``; the touched pages lie apart (``memory.runs``, runs of touched pages, is
at least half of them: a kernel working on one slice of a large pool touches one run);
and the kernel's calls together touch more than those blocks. Its footprint across calls
is the blocks.
"""

import os
from dataclasses import dataclass

from ..data import COLD, SHARED, WARM
from .engine import cache_bytes

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


SCATTER = 4  # blocks at least this many times what one call touches: a sparse reader


def scattered_over(capture, page=4096):
    """The bytes of the blocks a sparse reader's calls wander over (see above), or None:
    the call touched under 1/SCATTER of the blocks holding its pages, pages apart from
    each other, and its calls together touched at least those blocks' size."""
    touched = _footprint(capture)
    memory = capture.memory or {}
    blocks, runs = memory.get("blocks_bytes") or 0, memory.get("runs") or 0
    calls = capture.app.get("calls") or 0
    if not touched or blocks < SCATTER * touched or calls * touched < blocks or 2 * runs * page < touched:
        return None
    return blocks


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
    run = capture.app.get("run")
    key = (lambda c: c.app.get("run") == run) if run else (lambda c: c.app.get("app_s") == capture.app.get("app_s"))
    firsts = {}
    for c in sorted(captures, key=lambda c: c.instance):
        if key(c):
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
    table = scattered_over(capture)
    if table and table > private:
        where = ("more than the %s last-level cache: each call reads memory" % _mb(llc) if table > llc else
                 "more than %d thread(s)' %s of L2: each call reads the last-level cache" % (threads, _mb(private)))
        return CacheChoice(COLD if table > llc else SHARED,
                           "touches %s per call of %s of blocks, other parts on other calls (%d calls): %s"
                           % (_mb(footprint), _mb(table), calls, where))
    traffic = traffic_between_calls(capture, same_run(capture, captures))
    between = "between two calls the rest of the run touches %s" % _mb(traffic)
    if footprint <= llc and traffic >= llc:
        return CacheChoice(COLD, "touches %s; %s, more than the %s last-level cache"
                           % (_mb(footprint), between, _mb(llc)))
    if footprint <= private and traffic >= private:
        return CacheChoice(SHARED, "touches %s, which fits in %d thread(s)' %s of L2; %s"
                           % (_mb(footprint), threads, _mb(private), between))
    if footprint > private:
        return CacheChoice(WARM, "touches %s, more than %d thread(s)' %s of L2 hold: it streams "
                           "from the last-level cache in the application too" % (_mb(footprint), threads, _mb(private)))
    return CacheChoice(WARM, "touches %s; %s, which its threads' L2 (%s) holds beside it"
                       % (_mb(footprint), between, _mb(private)))
