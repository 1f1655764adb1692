"""Several recorded calls of one kernel, replayed one after another in their order.

Replay that repeats one call finds that call's data where its last run left it. Where
each call of the application reads other data, that flatters whatever makes the warm
path fast: in XSBench (public code) ``calculate_macro_xs`` looks up a random energy in
37 MB of nuclide grids on every call; its tuned variant's speedup over the build's -O0,
replayed on one call repeated, was far above what it measured inside the application. Recorded with
``--instances N``, the kernel's first N calls replay in sequence, each with its own
arguments and what it touched, and one timing sample is the whole sequence: the
caches see N different lookups, as the application's did.

The calls share one address space, as they did in the application. Memory that no call
writes must be the same in every capture (the application did not change it between
the calls), and is put in place once; memory that some call writes, and what differs
between the calls in the caller's stack and the runtimes' state around them, are put
back before each call as that call found them, untimed. Captures that disagree
elsewhere (a time step changed an input between two calls) cannot form a sequence, and
say where.

    seq = merge([engine.prepare(c, d) for c, d in instances])   # SequenceError if not
    view = seq.view()              # the first call's Prepared over the merged memory
    engine.map_recorded_memory(view); engine.restore(view)
    seq.verify(compiled, tolerance)   # every call checked against its own recording
    seq.timed(compiled)               # seconds for the whole sequence
"""

import ctypes
from dataclasses import dataclass, replace
from typing import List, Tuple

import numpy as np

from ..errors import R3Error
from . import engine

PAGE = 4096


class SequenceError(R3Error):
    """Why recorded calls cannot replay as one sequence (one line)."""


@dataclass
class Call:
    prepared: object  # engine.Prepared of this call's capture
    restore: List[Tuple[int, bytes]]  # this call's own pre-state of all memory some call writes


class _Pages:
    """Bytes known per page, with which of them are known: how captures are merged."""

    def __init__(self):
        self.data, self.known = {}, {}

    @staticmethod
    def chunks(addr, length):
        """(page, offset in the page, offset in the region, length) of a region, page by page."""
        pos = 0
        while pos < length:
            page, off = divmod(addr + pos, PAGE)
            n = min(PAGE - off, length - pos)
            yield page, off, pos, n
            pos += n

    def mark(self, addr, length):
        for page, off, _, n in self.chunks(addr, length):
            self.known.setdefault(page, np.zeros(PAGE, bool))[off : off + n] = True

    def covers(self, page):
        return self.known.get(page)


def _marked(ranges):
    """Pages x byte masks of (address, length) ranges."""
    pages = _Pages()
    for addr, length in ranges:
        pages.mark(addr, length)
    return pages


def merge(prepared):
    """One Sequence of ``prepared`` (engine.Prepared of each recorded call, in call order)."""
    if len(prepared) < 2:
        raise SequenceError("a sequence needs two recorded calls or more")
    first = prepared[0].capture

    def placed(c):  # the arena grows between calls (its end moves); where it starts does not
        return (c.arena.get("base"), c.arena.get("runtime_base"), [(g["name"], g["addr"]) for g in c.globals])

    for p in prepared[1:]:
        c = p.capture
        if c.kernel != first.kernel:
            raise SequenceError("captures %s and %s are of different kernels" % (first.id, c.id))
        if placed(c) != placed(first):
            raise SequenceError(
                "captures %s and %s come from different runs (their memory lies elsewhere)" % (first.id, c.id)
            )
    # Put back before each call: what any call writes, and the bytes of what the calls
    # found around them (the caller's stack, the runtimes' state) that differ between calls.
    # Only those: the runtimes' pool alone is 1.1 MB in XSBench, against 14-18 KB a call
    # put back this way, and each byte put back is cache the kernel's data loses.
    written = _marked((addr, len(data)) for p in prepared for addr, data in p.outputs)
    scratch = _marked((lo, hi - lo) for p in prepared for lo, hi in p.scratch)
    merged = _Pages()
    for i, p in enumerate(prepared):
        for addr, data in p.pre:
            buf = np.frombuffer(data, np.uint8)
            for page, off, pos, n in merged.chunks(addr, len(data)):
                mine = buf[pos : pos + n]
                have = merged.data.setdefault(page, np.zeros(PAGE, np.uint8))
                known = merged.known.setdefault(page, np.zeros(PAGE, bool))
                if not known[off : off + n].any():  # first seen: nothing to compare with
                    have[off : off + n] = mine
                    known[off : off + n] = True
                    continue
                w = written.covers(page)
                free = ~w[off : off + n] if w is not None else np.ones(n, bool)
                clash = known[off : off + n] & free & (have[off : off + n] != mine)
                s = scratch.covers(page)
                if s is not None and clash.any():  # differs around the call: put back each time
                    varies = clash & s[off : off + n]
                    written.known.setdefault(page, np.zeros(PAGE, bool))[off : off + n] |= varies
                    clash &= ~varies
                if clash.any():
                    where = page * PAGE + off + int(np.argmax(clash))
                    raise SequenceError(
                        "call %d of %s found memory at 0x%x other than an earlier call did, "
                        "and no call writes it: the application changed the kernel's input "
                        "between its calls" % (i + 1, first.kernel, where)
                    )
                have[off : off + n][~known[off : off + n]] = mine[~known[off : off + n]]
                known[off : off + n] = True
    # (a page one call never touched may be another's: a call's untouched pages are not checked)
    calls = [Call(replace(p, untouched=[]), _own_state(p, written)) for p in prepared]
    arena = dict(first.arena, end=hex(max(int(p.capture.arena["end"], 16) for p in prepared)))
    return Sequence(
        calls, _regions(merged), engine.page_ranges([(lo, hi) for p in prepared for lo, hi in p.ranges]), arena
    )


# Runs of bytes to put back that lie this close in one recorded region go back as one
# copy, with the call's own bytes between them (the same in every call): fewer, larger
# copies (XSBench: hundreds of runs a call, mostly a few bytes of stack and runtime state, as
# a few dozen).
JOIN_GAP = 1024


def _own_state(p, written):
    """A call's pre-state of every byte some call writes, as (address, bytes) copies."""
    out = []
    for addr, data in p.pre:
        spans = []
        for page, off, pos, n in written.chunks(addr, len(data)):
            w = written.covers(page)
            for lo, hi in _runs(w[off : off + n]) if w is not None else ():
                if spans and pos + lo - spans[-1][1] <= JOIN_GAP:
                    spans[-1][1] = pos + hi
                else:
                    spans.append([pos + lo, pos + hi])
        out += [(addr + lo, data[lo:hi]) for lo, hi in spans]
    return out


def _runs(mask):
    """[lo, hi) index runs where ``mask`` is set."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.view(np.int8), [0]))))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def _regions(pages):
    """The known bytes of ``pages`` as (address, bytes) runs, in address order."""
    out = []  # [address, end, pieces]
    for page in sorted(pages.data):
        for lo, hi in _runs(pages.known[page]):
            addr, data = page * PAGE + lo, pages.data[page][lo:hi].tobytes()
            if out and out[-1][1] == addr:
                out[-1][1] += len(data)
                out[-1][2].append(data)
            else:
                out.append([addr, addr + len(data), [data]])
    return [(addr, b"".join(pieces)) for addr, _, pieces in out]


class Sequence:
    def __init__(self, calls, pre, ranges, arena):
        self.calls, self.pre, self.ranges, self.arena = calls, pre, ranges, arena
        # Made in the candidate's process: each call's Frame, and what __r3_sequence reads.
        self.frames = None
        self._table = self._bytes = self._copies = None

    def __len__(self):
        return len(self.calls)

    def view(self):
        """The first call's Prepared over the sequence's memory: what ``map_recorded_memory``
        maps and ``restore`` puts in place; its IR is what a variant compiles."""
        first = self.calls[0].prepared
        return replace(first, pre=self.pre, ranges=self.ranges, capture=replace(first.capture, arena=self.arena))

    def _frames(self):
        if self.frames is None:
            self.frames = [engine.Frame(c.prepared) for c in self.calls]
            self._table = self._native_table(self.frames)
        return self.frames

    def _native_table(self, frames):
        """What ``__r3_sequence`` reads: per call {slots, ret, copies, ncopies}, and the
        copies {dst, src, len} into one buffer of the calls' bytes (kept alive here)."""
        data = b"".join(d for c in self.calls for _, d in c.restore)
        self._bytes = ctypes.create_string_buffer(data, max(len(data), 1))
        base, pos, self._copies = ctypes.addressof(self._bytes), 0, []
        table = (ctypes.c_uint64 * (4 * len(self.calls)))()
        for i, (call, frame) in enumerate(zip(self.calls, frames)):
            copies = (ctypes.c_uint64 * max(3 * len(call.restore), 1))()
            for j, (addr, d) in enumerate(call.restore):
                copies[3 * j : 3 * j + 3] = [addr, base + pos, len(d)]
                pos += len(d)
            self._copies.append(copies)
            table[4 * i : 4 * i + 4] = [
                ctypes.addressof(frame.slots),
                ctypes.addressof(frame.ret),
                ctypes.addressof(copies),
                len(call.restore),
            ]
        return table

    def _put_back(self, call):
        for addr, data in call.restore:
            ctypes.memmove(addr, data, len(data))

    def verify(self, compiled, tolerance):
        """Run every call in order from its own pre-state; the first that differs from its
        recording decides (the detail names it)."""
        worst = engine.Check(True, 0.0, 0)
        for i, (call, frame) in enumerate(zip(self.calls, self._frames())):
            self._put_back(call)
            frame.run(compiled)
            checked = engine.check(call.prepared, frame, tolerance)
            if not checked.verified:
                return replace(checked, detail="call %d of %d: %s" % (i + 1, len(self.calls), checked.detail))
            worst = replace(
                worst,
                max_rel_error=max(worst.max_rel_error, checked.max_rel_error),
                mismatched_bytes=worst.mismatched_bytes + checked.mismatched_bytes,
            )
        return worst

    def timed(self, compiled, preempted=None):
        """Seconds of one pass over the sequence: the calls' timed parts only, each call's
        memory put back before it and the call timed, all in native code."""
        self._frames()
        switches = engine.preemptions() if preempted is not None else 0
        ns = compiled.sequence(ctypes.addressof(self._table), len(self.calls))
        if preempted is not None:
            preempted.append(engine.preemptions() != switches)
        return max(ns - len(self.calls) * compiled.clock_ns, len(self.calls)) * 1e-9

    def passes_per_sample(self, compiled, min_s=engine.MIN_SAMPLE_S):
        return engine.runs_to_last(self.timed(compiled), min_s, engine.MOST_RUNS_PER_SAMPLE)
