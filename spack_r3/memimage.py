"""Memory image files (``pre.bin`` / ``post.bin`` of a capture).

Format (written by the record runtime, runtime/capture.c): the 8-byte magic ``R3MEM1\\0\\0``,
then records until EOF, little-endian::

    uint64 addr; uint64 size; uint64 kind; uint8 bytes[size]; zero padding to a multiple of 8

``kind`` 1 is a live heap chunk of the arena (user pointer, usable size), or a run of pages a
page-tracked capture touched, 2 a global the kernel references, 3 a live heap chunk the
OpenMP runtime allocated (team and barrier state: it changes whenever a parallel region
runs, so replay restores it but must not compare it), 4 the caller's stack. Kind 5 appears
in a page-tracked ``post.bin`` only: heap bytes the kernel did not change, with no bytes in
the file (they are the ``pre.bin`` beside it); ``read_regions`` gives them as kind 1
regions whose bytes ``region_bytes`` reads from that ``pre.bin``. Kind 6 appears in
``pre.bin`` only: read-only data of the executable or a library that an argument points
into (a string literal, a constant table), restored at its address and never compared; an
argument into a loaded object's writable data (a global another unit defines) is kind 2.
Kind 7 appears in a page-tracked ``pre.bin`` only: heap pages that had never been written
before the call (fresh calloc'ed memory), zeros, with no bytes in the file; ``read_regions``
gives them as kind 1 regions marked ``zero``.
"""

import bisect
import hashlib
import mmap
import os
import struct
import tempfile
from dataclasses import dataclass

from .errors import CaptureError

MAGIC = b"R3MEM1\0\0"
KIND_HEAP = 1
KIND_GLOBAL = 2
KIND_RUNTIME = 3  # heap chunks the OpenMP runtime allocated for itself
KIND_STACK = 4  # the caller's stack above a pointer argument that points into it
KIND_SAME = 5  # post.bin only: unchanged heap bytes, held by pre.bin
KIND_CONST = 6  # pre.bin only: read-only data of a loaded object an argument points into
KIND_ZERO = 7  # pre.bin only: heap pages never written before the call; zeros, no bytes stored
_HDR = struct.Struct("<QQQ")


@dataclass(frozen=True)
class Region:
    addr: int
    size: int
    kind: int
    offset: int  # where the region's bytes start in the file
    path: str = ""  # the file holding them, when not the image that listed the region
    zero: bool = False  # all zeros, nothing stored (kind 7, and kind 5 over kind 7)

    @property
    def end(self):
        return self.addr + self.size


def _pad(n):
    return (8 - n % 8) % 8


def read_regions(path):
    """All regions of the image at ``path``; CaptureError if it is not a complete image."""
    path = os.fspath(path)
    try:
        f = open(path, "rb")
    except OSError as err:
        raise CaptureError("%s: cannot read memory image: %s" % (path, err.strerror))
    with f:
        total = os.fstat(f.fileno()).st_size
        head = f.read(len(MAGIC))
        if head != MAGIC:
            if len(head) < len(MAGIC) and MAGIC.startswith(head):
                raise CaptureError("%s: truncated at byte %d (no complete header)" % (path, len(head)))
            raise CaptureError("%s: not a memory image (bad magic %r)" % (path, head))
        regions = []
        pos = len(MAGIC)
        while pos < total:
            raw = f.read(_HDR.size)
            if len(raw) < _HDR.size:
                raise CaptureError("%s: truncated at byte %d (record header at byte %d)" % (path, total, pos))
            addr, size, kind = _HDR.unpack(raw)
            data = pos + _HDR.size
            stored = 0 if kind in (KIND_SAME, KIND_ZERO) else size
            end = data + stored + _pad(stored)
            if end > total:
                raise CaptureError(
                    "%s: truncated at byte %d (record at byte %d needs %d bytes)" % (path, total, pos, end - pos)
                )
            if kind == KIND_ZERO:
                regions.append(Region(addr, size, KIND_HEAP, data, zero=True))
            else:
                regions.append(Region(addr, size, kind, data))
            f.seek(end)
            pos = end
    if any(r.kind == KIND_SAME for r in regions):
        regions = _resolve_same(path, regions)
    return regions


def identity_digest(path, chunk=1 << 20):
    """sha256 of what the image holds for the application: every region but the OpenMP
    runtime's own chunks (KIND_RUNTIME), whose bytes (its threads' barrier and spin state)
    differ from one run of the same call to the next. A capture's id is of this, so that
    the same call recorded again is the same capture."""
    h = hashlib.sha256()
    files = {}
    try:
        for r in read_regions(path):
            if r.kind == KIND_RUNTIME:
                continue
            h.update(_HDR.pack(r.addr, r.size, r.kind) + (b"z" if r.zero else b"d"))
            if r.zero:
                continue
            src = r.path or path
            f = files.get(src) or files.setdefault(src, open(src, "rb"))
            f.seek(r.offset)
            left = r.size
            while left:
                data = f.read(min(chunk, left))
                if not data:
                    raise CaptureError("%s: truncated in the region at 0x%x" % (src, r.addr))
                h.update(data)
                left -= len(data)
    finally:
        for f in files.values():
            f.close()
    return h.hexdigest()


def _resolve_same(path, regions):
    """Kind-5 regions of a post.bin as kind-1 regions read from the pre.bin beside it."""
    pre_path = os.path.join(os.path.dirname(path), "pre.bin")
    pre = sorted((r for r in read_regions(pre_path) if r.kind == KIND_HEAP), key=lambda r: r.addr)
    starts = [r.addr for r in pre]
    out = []
    for r in regions:
        if r.kind != KIND_SAME:
            out.append(r)
            continue
        # one unchanged range may span pre.bin's runs of copied and of zero pages
        i = bisect.bisect_right(starts, r.addr) - 1
        at = r.addr
        while at < r.end:
            if i < 0 or i >= len(pre) or not pre[i].addr <= at < pre[i].end:
                raise CaptureError("%s: unchanged bytes at 0x%x (%d) are not in %s" % (path, r.addr, r.size, pre_path))
            stop = min(r.end, pre[i].end)
            out.append(Region(at, stop - at, KIND_HEAP, pre[i].offset + (at - pre[i].addr), pre_path, pre[i].zero))
            at = stop
            i += 1
    return out


def region_bytes(path, region):
    """The bytes of ``region`` (from read_regions of the same file)."""
    if region.zero:
        return bytes(region.size)
    with open(region.path or os.fspath(path), "rb") as f:
        f.seek(region.offset)
        data = f.read(region.size)
    if len(data) != region.size:
        raise CaptureError("%s: truncated at byte %d" % (path, region.offset + len(data)))
    return data


def region_view(path, region):
    """A read-only memoryview of ``region`` backed by mmap (no copy; for large regions)."""
    if region.size == 0:
        return memoryview(b"")
    if region.zero:
        return memoryview(bytes(region.size))
    with open(region.path or os.fspath(path), "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if region.offset + region.size > len(m):
        m.close()
        raise CaptureError("%s: truncated at byte %d" % (path, len(m)))
    return memoryview(m)[region.offset : region.offset + region.size]


def find_region(regions, addr):
    """The region containing address ``addr``, or None."""
    for r in regions:
        if r.addr <= addr < r.end:
            return r
    return None


def write_regions(path, regions):
    """Write ``[(addr, kind, bytes), ...]`` as a memory image, atomically."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".bin", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC)
            for addr, kind, data in regions:
                data = memoryview(data).cast("B")
                f.write(_HDR.pack(addr, len(data), kind))
                f.write(data)
                f.write(b"\0" * _pad(len(data)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
