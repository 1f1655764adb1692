"""Memory the recorded call writes before it reads, and candidates that read it anyway.

Replay restores a call's recorded memory before every run, so the memory a kernel only
writes holds, at every run, what the application's call found there: often fresh zeros.
A candidate that skips initialising it (``c[i][j] = 0`` left out of an i-k-j matmul) then
verifies, and wins, and the application, whose later calls find the previous results
there, fails its self-check. So:

* ``probe`` finds the byte spans the recorded call changed that the kernel *as built*
  does not read before writing: it runs the built kernel with spans poisoned and keeps
  those under which it still verifies (halving a group that does not, within a budget);
* ``check_poisoned`` runs a candidate once per poison with those spans poisoned: a
  candidate whose output depends on them relies on initial contents, and is wrong.

Scratch memory a candidate mallocs is its own neighbour of the same class: in the fresh
child it is fresh zero pages; in the application, recycled heap. Both probe and check
run with glibc's ``M_PERTURB`` set (every malloc'd block filled with 0x7e), so a
candidate that sums into a block it never cleared is wrong as well.

Each poison is every byte the same: 0xff reads as NaN in every float width and -1 in
every integer width; 0x7e as a huge finite float (2.0e301 as a double, 8.5e37 as a
float), which a ``fmax`` or a comparison that drops NaN does not hide.
"""

import ctypes
import time
from contextlib import contextmanager

import numpy as np

POISONS = (0xFF, 0x7E)
ALIGN = 8  # a span covers whole words: a double of which one byte changed is one value
JOIN = 64  # changed runs this close are one span: fewer probe runs, and no probe split mid-row
PROBE_RUNS = 24  # the built kernel's runs a probe may take (two per group tried)


def written_spans(prepared):
    """(address, end) of the bytes the recorded call changed, word-aligned, near runs joined."""
    pre_of = dict(prepared.outputs)
    spans = []
    for addr, after in prepared.post:
        before = pre_of.get(addr)
        if before is None or len(before) != len(after):
            continue
        diff = np.frombuffer(before, np.uint8) != np.frombuffer(after, np.uint8)
        at = np.flatnonzero(diff)
        if not at.size:
            continue
        # runs of changed bytes: starts where the gap to the previous change is over JOIN
        breaks = np.flatnonzero(np.diff(at) > JOIN)
        starts = np.concatenate(([at[0]], at[breaks + 1]))
        ends = np.concatenate((at[breaks], [at[-1]])) + 1
        for lo, hi in zip(starts.tolist(), ends.tolist()):
            lo, hi = addr + lo, addr + hi
            lo, hi = max(addr, lo - lo % ALIGN), min(addr + len(after), -(-hi // ALIGN) * ALIGN)
            spans.append((lo, hi))
    return spans


def poison(spans, byte):
    for lo, hi in spans:
        ctypes.memset(lo, byte, hi - lo)


M_PERTURB = -6  # mallopt(3): fill each allocated block with the byte's complement
_libc = ctypes.CDLL(None)


@contextmanager
def perturbed_malloc(byte=0x7E):
    """malloc hands out blocks filled with ``byte`` meanwhile (glibc; elsewhere a no-op)."""
    mallopt = getattr(_libc, "mallopt", None)
    if mallopt is None:
        yield
        return
    mallopt(M_PERTURB, byte ^ 0xFF)
    try:
        yield
    finally:
        mallopt(M_PERTURB, 0)


def _verifies_poisoned(prepared, frame, compiled, tolerance, spans):
    """None where every poison of ``spans`` (malloc perturbed) leaves the output as
    recorded; else the Check of the first that does not."""
    from .engine import check, restore

    for byte in POISONS:
        restore(prepared)
        poison(spans, byte)
        with perturbed_malloc():
            frame.run(compiled)
        checked = check(prepared, frame, tolerance)
        if not checked.verified:
            return checked
    return None


def probe(prepared, frame, built, tolerance, seconds, runs=PROBE_RUNS):
    """The spans of ``written_spans`` that the kernel as built (``built``) writes before it
    reads: those it verifies with poisoned. A group it fails under is halved and each half
    tried; a span it fails under alone is one it reads (an accumulation, ``y += a x``).
    None where it fails with nothing poisoned but malloc (a kernel as built that reads
    what it never cleared: no check can rest on it). No group is begun after ``seconds``:
    what is found by then is poisoned, the rest is left as recorded."""
    deadline = time.monotonic() + seconds
    if _verifies_poisoned(prepared, frame, built, tolerance, []) is not None:
        return None
    found, todo, spent = [], [written_spans(prepared)], len(POISONS)
    while todo and spent + len(POISONS) <= runs and time.monotonic() < deadline:
        group = todo.pop(0)
        if not group:
            continue
        spent += len(POISONS)
        if _verifies_poisoned(prepared, frame, built, tolerance, group) is None:
            found.extend(group)
        elif len(group) > 1:
            todo += [group[: len(group) // 2], group[len(group) // 2 :]]
    return sorted(found)


def check_poisoned(prepared, frame, candidate, tolerance):
    """None, or the Check (detail worded) of a candidate that reads what the recorded call
    only writes (``prepared.first_written``) or malloc'd memory it never cleared."""
    spans = prepared.first_written
    if spans is None:  # the probe found the kernel as built reads uncleared memory
        return None
    wrong = _verifies_poisoned(prepared, frame, candidate, tolerance, spans)
    if wrong is not None:
        wrong.detail = (
            "relies on the initial contents of memory the recorded call writes before reading "
            "(%d bytes in %d spans, poisoned) or of memory it allocates: %s"
            % (sum(hi - lo for lo, hi in spans), len(spans), wrong.detail)
        )
    return wrong
