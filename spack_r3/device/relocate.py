"""Pointers to a device variable's recorded address, moved to the replay module's copy.

A CUDA/HIP replay maps the recorded allocations at their recorded device addresses, so
pointers between them stay valid; a ``__device__`` / ``__constant__`` variable, though,
lives in the module replay loads, at an address the driver picks. A pointer to it that
the application stored in device memory or passed as an argument would point at nothing.
Before a launch, ``relocate_launch`` rewrites each such pointer to the loaded variable's
address plus the same offset; after it, ``translate_back`` reads a word that holds a
loaded variable's address + k, where the recording holds the recorded address + k, as the
recording's, so the comparison with post.bin stays exact.

Which words are pointers is not knowable from the bytes (the kernel's IR would have to say
which words it loads as pointers, and through which casts): a word is taken for one when
it is 8-byte aligned (by its device address; in an argument, by its offset) and its value
lies exactly inside a captured variable's [address, address + size). A 64-bit data word of
that value is rewritten too (a false positive: the kernel reads another number there;
where that changes what it stores, the replay reports a wrong output, and its diagnostics
name every word rewritten, ``Relocated.note``); a one-past-the-end pointer
(address + size) is not rewritten, nor a pointer into a variable the kernel does not use
itself (the recorder captures only those its index names). Pure numpy on the captured
bytes: no GPU.
"""

from dataclasses import dataclass, field
from typing import List, Tuple

import numpy as np

WORD = 8  # a device pointer's bytes (nvptx64, amdgcn)
LISTED = 64  # words moved that are kept by name (all are counted)


@dataclass(frozen=True)
class Variable:
    """A captured device variable: its recorded address and size, and its address in the
    module replay loaded."""

    name: str
    recorded: int
    size: int
    loaded: int


@dataclass
class Relocated:
    """The launch's memory and arguments with pointers into the captured variables moved;
    ``count`` words moved, the first ``LISTED`` of them in ``moved``: (where, the variable,
    the offset into it) (where: ``0x<device address>``, or ``argument <i>``, `` +<offset>``
    into a struct passed by value)."""

    memory: List[Tuple[int, bytes]]
    arguments: List[bytes]
    moved: List[Tuple[str, str, int]] = field(default_factory=list)
    count: int = 0

    def note(self, most=8):
        """One line for the replay's diagnostics ("" where nothing moved)."""
        if not self.count:
            return ""
        shown = ["%s -> %s+%d" % m for m in self.moved[:most]]
        more = " and %d more" % (self.count - len(shown)) if self.count > len(shown) else ""
        return "relocated %d pointer(s) into device variables to the loaded module's copies: %s%s" % (
            self.count,
            ", ".join(shown),
            more,
        )

    def add(self, where, count, moved):
        """Count ``count`` words moved in ``where`` (a name of the (byte offset) of each of
        ``moved``, relocate's), listing them while fewer than LISTED are."""
        self.count += count
        self.moved += [(where(at), v.name, k) for at, v, k in moved[: max(LISTED - len(self.moved), 0)]]


def _table(variables):
    """The variables sorted by recorded address, their starts and their ends."""
    vs = sorted(variables, key=lambda v: v.recorded)
    starts = np.array([v.recorded for v in vs], dtype=np.uint64)
    ends = np.array([v.recorded + v.size for v in vs], dtype=np.uint64)
    return vs, starts, ends


def _words(data, base):
    """(first aligned byte offset, the aligned little-endian 64-bit words of ``data``),
    aligned by the device address ``base`` of its first byte."""
    first = (-base) % WORD
    count = max(len(data) - first, 0) // WORD
    return first, np.frombuffer(data, dtype="<u8", count=count, offset=min(first, len(data)))


def _inside(words, starts, ends):
    """Per word, the index of the variable whose recorded [start, end) holds it, else -1."""
    out = np.full(len(words), -1, dtype=np.int64)
    if not len(starts) or not len(words):
        return out
    near = np.nonzero((words >= starts[0]) & (words < ends.max()))[0]  # most words are nowhere near
    at = np.searchsorted(starts, words[near], side="right").astype(np.int64) - 1
    hit = words[near] < ends[at]
    out[near[hit]] = at[hit]
    return out


def relocate(data, base, variables, listed=LISTED):
    """(``data`` with each aligned word inside a variable's recorded range moved to its
    loaded copy (the same offset), the number of words moved, [(byte offset, variable,
    offset in it)] of the first ``listed`` of them). ``base``: the device address of
    ``data``'s first byte (0 for an argument: aligned by its offset)."""
    vs, starts, ends = _table(variables)
    first, words = _words(data, base)
    at = _inside(words, starts, ends)
    hits = np.nonzero(at >= 0)[0]
    if not len(hits):
        return data, 0, []
    which = at[hits]
    offsets = words[hits] - starts[which]
    out = bytearray(data)
    view = np.frombuffer(out, dtype="<u8", count=len(words), offset=min(first, len(out)))
    view[hits] = np.array([v.loaded for v in vs], dtype=np.uint64)[which] + offsets
    moved = [(first + int(i) * WORD, vs[w], int(k)) for i, w, k in zip(hits[:listed], which, offsets)]
    return bytes(out), len(hits), moved


def relocate_launch(memory, arguments, variables):
    """Relocated of a launch: ``memory`` [(device address, bytes)] as it is restored (the
    allocations at their recorded addresses, each variable's bytes at its loaded copy),
    ``arguments`` [bytes] the kernel parameters; a pointer-sized argument is one word, a
    struct passed by value (over 8 bytes) is read word by word by its offsets."""
    if not variables:
        return Relocated(list(memory), list(arguments))
    out = Relocated([], [])
    for addr, data in memory:
        data, count, moved = relocate(data, addr, variables)
        out.memory.append((addr, data))
        out.add(lambda at, addr=addr: "0x%x" % (addr + at), count, moved)
    for i, arg in enumerate(arguments):
        if len(arg) < WORD:  # an int, a float: no pointer
            out.arguments.append(arg)
            continue
        arg, count, moved = relocate(arg, 0, variables)
        out.arguments.append(arg)
        byval = len(arg) > WORD
        out.add(lambda at, i=i, byval=byval: "argument %d" % i + (" +%d" % at if byval else ""), count, moved)
    return out


def translate_back(got, want, base, variables):
    """``got`` (device bytes at ``base`` after a launch) with each aligned word that differs
    from ``want`` (the recording's) only as a relocated pointer does (the loaded copy's
    address + k where the recording holds the recorded address + k) read as ``want``'s:
    the words replay relocated, and pointers to a variable the kernel itself stored."""
    if not variables or got == want or len(got) != len(want):
        return got
    vs, starts, ends = _table(variables)
    first, have = _words(got, base)
    _, need = _words(want, base)
    differ = np.nonzero(have != need)[0]
    at = _inside(need[differ], starts, ends)
    loaded = np.array([v.loaded for v in vs], dtype=np.uint64)
    keep = at >= 0
    idx, at = differ[keep], at[keep]
    # the same offset in the same variable (uint64: a word below the loaded copy wraps past any offset)
    idx = idx[have[idx] - loaded[at] == need[idx] - starts[at]]
    if not len(idx):
        return got
    out = bytearray(got)
    view = np.frombuffer(out, dtype="<u8", count=len(have), offset=min(first, len(out)))
    view[idx] = need[idx]
    return bytes(out)


def reading_back(read, expected, variables):
    """``read(address, size)`` of device memory with ``translate_back`` applied against
    ``expected`` [(address, bytes)], the recording's: what ``cudareplay.checked`` compares."""
    want = dict(expected)

    def read_back(addr, size):
        got = read(addr, size)
        return translate_back(got, want[addr], addr, variables) if addr in want else got

    return read_back
