"""The host replay engine: compile a captured kernel with a pipeline, put memory
back where it was recorded, run, check and time it.

The replay worker (see ``worker``) prepares captures and may compile; mapping
memory at fixed addresses and calling JIT-compiled code happen only in the child
it forks for each candidate.
"""

import bisect
import ctypes
import ctypes.util
import functools
import hashlib
import json
import mmap
import os
import resource
import subprocess
import time
from dataclasses import dataclass, field, replace
from statistics import median
from typing import List, Optional, Tuple

import llvmlite.binding as llvm
import numpy as np

from .. import backends
from ..data import COLD, Pipeline
from ..errors import CaptureError, R3Error
from ..iredit import init_native
from ..machine import cache_bytes
from ..memimage import KIND_GLOBAL, KIND_HEAP, KIND_RUNTIME, KIND_STACK, read_regions, region_bytes
from .compare import Check, compare, fp_types
from .libraries import load_runtime
from ..compile.module import UnreplayableError, declared_functions, extract_kernel, trampoline
from ..compile.stages import (
    CompileError,
    KernelIR,
    build_flags,
    build_object,
    cached_object,
    cuts,
    keep_object,
    module_triple,
    object_key,
    optimized_module,
    renamed_bitcode,
    resolve_target,
    spent,
    target_machine,
)

MAP_FIXED_NOREPLACE = 0x100000
MAP_POPULATE = 0x8000
PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.memcmp.restype = ctypes.c_int
_libc.memcmp.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
_initialized = False
RUNTIME_GLOBAL_PREFIXES = (".gomp_critical_user_", "__kmp", ".kmp")


def init_llvm(libomp=None):
    """Once per process: native target, and the OpenMP runtime for parallel kernels."""
    global _initialized
    if not _initialized:
        init_native()
        # The C and math libraries a kernel may call, visible to the JIT's symbol search.
        for lib in ("c", "m"):
            path = ctypes.util.find_library(lib)
            if path:
                llvm.load_library_permanently(path)
        _initialized = True
    if libomp:
        llvm.load_library_permanently(libomp)


@dataclass
class Prepared:
    """A capture parsed once by the worker and shared (copy-on-write) by every candidate."""

    capture: object
    ir: str
    pre: List[Tuple[int, bytes]]
    post: List[Tuple[int, bytes]]
    slots: List[int]
    byval: List[bytes]
    ret: bytes = b""
    ranges: List[Tuple[int, int]] = field(default_factory=list)
    fp_types: List = field(default_factory=list)
    outputs: List[Tuple[int, bytes]] = field(default_factory=list)  # pre-state of what the kernel writes
    unit: Optional[KernelIR] = None  # the kernel's module and bitcode: what a variant is compiled from
    directory: str = ""  # the capture's folder
    # (start, end) of what the call found around it rather than its input: the caller's
    # stack and the runtimes' state, which differ from call to call whatever the kernel reads
    scratch: List[Tuple[int, int]] = field(default_factory=list)
    # mapped pages the recorded call never touched (neither in pre.bin nor in post.bin): zeros
    # at replay, and still zeros after a run, or the kernel wrote where the application's
    # call never did (a one-ulp change of an element it never writes verified before)
    untouched: List[Tuple[int, int]] = field(default_factory=list)
    # (start, end) of what the call writes before it reads (``replay.poison.probe``; set by
    # the worker once per capture): a candidate is also checked with it poisoned; None:
    # no such check (the kernel as built fails it, or the probe could not run)
    first_written: Optional[List[Tuple[int, int]]] = None


def host_engine_runs(capture):
    """The capture's backend, where the host engine runs its kernels; else R3Error with one
    line: a CUDA kernel's replay needs a CUDA device (``no CUDA device: ...`` where none is)."""
    backend = backends.of_capture(capture)
    if backend.host_engine:
        return backend
    from ..device.cudareplay import driver_of

    driver_of(capture)  # no device: one line, "no CUDA device: <why>" ("no HIP device: <why>")
    raise R3Error(
        "capture %s: %s is a %s kernel: the host engine does not run it; "
        "the replay servers send it to device/cudaworker.py" % (capture.id, capture.kernel, backend.name.upper())
    )


def prepare(capture, directory):
    def read(name):
        with open(os.path.join(directory, name), "rb") as f:
            return f.read()

    # The host engine runs the host backend's kernels and the offload backend's device
    # functions on the host plugin (x86 code calling libomp); any other backend is refused.
    host_engine_runs(capture)
    if capture.unreplayable:  # it would run, and differ: refused, never reported as wrong output
        raise CaptureError("capture %s: %s cannot replay: %s" % (capture.id, capture.kernel, capture.unreplayable))
    bitcode, link_units = read("module.bc"), tuple(read(u) for u in capture.link_units)
    recorded_globals = tuple(g["name"] for g in capture.globals)
    try:
        ir = extract_kernel(bitcode, capture.kernel, list(recorded_globals), list(link_units))
    except UnreplayableError as err:
        raise CaptureError("capture %s: %s cannot replay: %s" % (capture.id, capture.kernel, err))
    except (KeyError, ValueError, RuntimeError) as err:
        raise CaptureError("capture %s: cannot extract kernel %s: %s" % (capture.id, capture.kernel, err))
    # C++ code calls its runtime (OpenMP regions' exception cleanup, std::vector::at), Fortran
    # code flang's (array assignment, MATMUL):
    # the worker loads the one the build linked, once, for every candidate it forks.
    unloaded = load_runtime(capture.compile_command, capture.source_file)
    missing = [f for f in declared_functions(ir) if llvm.address_of_symbol(f) is None]
    if missing:  # MCJIT would abort the process on them: say what is wrong instead
        raise CaptureError(
            "capture %s: %s calls %s, defined in another translation unit or library that "
            "replay does not load%s"
            % (
                capture.id,
                capture.kernel,
                ", ".join(sorted(missing)),
                " (%s not found)" % ", ".join(unloaded) if unloaded else "",
            )
        )
    pre_path, post_path = os.path.join(directory, "pre.bin"), os.path.join(directory, "post.bin")
    pre_regions = read_regions(pre_path)
    joined = _joined([(r.addr, r.kind, bytes(region_bytes(pre_path, r))) for r in pre_regions])
    pre = [(addr, data) for addr, _, data in joined]
    heap = [(addr, addr + len(data)) for addr, kind, data in joined if kind == KIND_HEAP]
    post_regions = read_regions(post_path)
    post = [(r.addr, bytes(region_bytes(post_path, r))) for r in _compared(heap, post_regions)]
    # OpenMP's critical-section words hold the recording process's lock handles:
    # replay starts them from zero (no lock) and never compares them.
    runtime = [
        (int(g["addr"], 16), int(g["addr"], 16) + g["size"])
        for g in capture.globals
        if g["name"].startswith(RUNTIME_GLOBAL_PREFIXES)
    ]
    inside = lambda addr: any(lo <= addr < hi for lo, hi in runtime)  # noqa: E731
    pre = [(a, bytes(len(d)) if inside(a) else d) for a, d in pre]
    post = [(a, d) for a, d in post if not inside(a)]
    slots = [int(a, 16) for a in capture.args]
    byval = [bytes.fromhex(b) if b else b"" for b in capture.byval_data]
    arena = [(int(capture.arena["base"], 16), int(capture.arena["end"], 16))]
    if capture.arena.get("runtime_base"):  # the runtimes' pool at the arena's top
        arena.append((int(capture.arena["runtime_base"], 16), int(capture.arena["runtime_end"], 16)))
    ranges = page_ranges(
        arena
        + [(int(g["addr"], 16), int(g["addr"], 16) + g["size"]) for g in capture.globals]
        + [(r.addr, r.end) for r in pre_regions if r.kind == KIND_STACK]
        + [(r.addr, r.end) for r in pre_regions if not any(lo <= r.addr < hi for lo, hi in arena)]
    )
    # An opt stage (Polly) starts again from the bitcode, in the text of its own LLVM.
    unit = KernelIR(
        capture.kernel,
        ir,
        bitcode,
        link_units,
        recorded_globals,
        capture.compile_command[0] if capture.compile_command else None,
        build_level=capture.opt_level,
    )
    scratch = [(addr, addr + len(data)) for addr, kind, data in joined if kind in (KIND_STACK, KIND_RUNTIME)]
    touched = page_ranges([(r.addr, r.end) for r in list(pre_regions) + list(post_regions)])
    return Prepared(
        capture,
        ir,
        pre,
        post,
        slots,
        byval,
        bytes.fromhex(capture.ret) if capture.ret else b"",
        ranges,
        fp_types(ir),
        _outputs(pre, post),
        unit,
        directory,
        scratch,
        _minus(ranges, touched),
    )


def _minus(ranges, holes):
    """The parts of sorted, disjoint ``ranges`` outside sorted, disjoint ``holes``."""
    out = []
    for lo, hi in ranges:
        for h_lo, h_hi in holes:
            if h_hi <= lo or h_lo >= hi:
                continue
            if h_lo > lo:
                out.append((lo, h_lo))
            lo = max(lo, h_hi)
        if lo < hi:
            out.append((lo, hi))
    return out


def _joined(regions):
    """``(address, kind, bytes)`` regions sorted, heap regions that meet joined:
    a page-tracked pre.bin splits a run of touched pages where copied pages meet pages that
    were zeros, and the kernel's output may span both."""
    out = []  # [address, end, kind, pieces]
    for addr, kind, data in sorted(regions, key=lambda r: r[0]):
        if kind == KIND_HEAP and out and out[-1][2] == KIND_HEAP and out[-1][1] == addr:
            out[-1][1] += len(data)
            out[-1][3].append(data)
        else:
            out.append([addr, addr + len(data), kind, [data]])
    return [(addr, kind, pieces[0] if len(pieces) == 1 else b"".join(pieces)) for addr, _, kind, pieces in out]


def _compared(heap, post_regions):
    """The post-state regions replay compares. Heap regions only where the pre-state holds
    them (``heap``: its sorted, joined heap ranges; a block the kernel allocated is
    allocated elsewhere at replay; a page-tracked capture leaves out what the allocator
    rewrote); globals and the caller's stack always; runtime state (OpenMP's team and
    barrier blocks, a worker's TLS) never."""
    starts = [lo for lo, _ in heap]

    def held(r):
        i = bisect.bisect_right(starts, r.addr) - 1
        return i >= 0 and r.end <= heap[i][1]

    return [r for r in post_regions if r.kind in (KIND_GLOBAL, KIND_STACK) or (r.kind == KIND_HEAP and held(r))]


def _outputs(pre, post):
    """(address, pre-state bytes) of every compared range the kernel changed: what must be
    put back between timed runs."""
    starts = sorted((a, d) for a, d in pre)
    keys = [a for a, _ in starts]
    out = []
    for addr, data in post:
        i = bisect.bisect_right(keys, addr) - 1
        if i < 0:
            continue
        base, whole = starts[i]
        before = whole[addr - base : addr - base + len(data)]
        if len(before) == len(data) and before != data:
            out.append((addr, before))
    return out


def page_ranges(spans):
    pages = sorted((lo // PAGE * PAGE, -(-hi // PAGE) * PAGE) for lo, hi in spans if hi > lo)
    merged = []
    for lo, hi in pages:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def map_recorded_memory(prepared):
    """Map the recorded arena and globals at their recorded addresses (fresh process only)."""
    prot = mmap.PROT_READ | mmap.PROT_WRITE
    # MAP_POPULATE: fault the pages in at once, not one by one on the first restore.
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | MAP_POPULATE
    for lo, hi in prepared.ranges:
        got = _libc.mmap(lo, hi - lo, prot, flags, -1, 0)
        if got != lo:
            err = ctypes.get_errno()
            raise RuntimeError(
                "cannot map recorded memory at 0x%x-0x%x in the replay worker: %s"
                % (lo, hi, os.strerror(err) if err else "placed elsewhere")
            )
    bind_globals(prepared)


def bind_globals(prepared):
    """Point the JIT's symbols for recorded globals at their recorded addresses;
    must precede compilation (MCJIT resolves symbols when it finalizes)."""
    for g in prepared.capture.globals:
        llvm.add_symbol(g["name"], int(g["addr"], 16))


def restore(prepared, outputs_only=False):
    """Put recorded memory back: everything, or (between timed runs, after the check
    run proved the kernel writes nothing else) only what the kernel writes."""
    with spent("restore"):
        for addr, data in prepared.outputs if outputs_only else prepared.pre:
            ctypes.memmove(addr, data, len(data))


def with_source_variant(prepared, patch, defines, openmp=False):
    """``prepared`` with its kernel compiled from a source variant of its unit (see
    ``replay.source``; ``openmp``: with -fopenmp added): the same capture, memory and
    baseline; only the code differs."""
    from .source import variant_bitcode

    capture, unit = prepared.capture, prepared.unit
    bitcode = variant_bitcode(capture, prepared.directory, patch, defines, openmp=openmp)
    if backends.of_capture(capture) is not backends.HOST:
        bitcode = _region_named(bitcode, capture.kernel, unit.clang)
    try:
        fn = llvm.parse_bitcode(bitcode).get_function(capture.kernel)
    except NameError:
        raise CompileError("the source variant no longer defines %s" % capture.kernel)
    params = [str(a.type) for a in fn.arguments]
    if params != list(capture.signature["params"]):
        raise CompileError(
            "the source variant changed %s's signature (%s, recorded %s)"
            % (capture.kernel, ", ".join(params), ", ".join(capture.signature["params"]))
        )
    try:
        variant = KernelIR.from_bitcode(
            capture.kernel, bitcode, unit.link_units, unit.recorded_globals, unit.clang, build_level=unit.build_level
        )
    except (UnreplayableError, KeyError, ValueError, RuntimeError) as err:
        raise CompileError("the source variant's %s cannot replay: %s" % (capture.kernel, err))
    return replace(prepared, unit=variant, ir=variant.ir)


def _region_named(bitcode, kernel, clang=None):
    """A source variant's device module with its region of ``kernel``'s function and line
    named ``kernel``: the variant, compiled from a scratch copy of the unit, names its
    regions after that copy's file ids (``record.offload.region_key``). Still the bitcode
    of ``clang``'s LLVM, which a Polly stage reads (``stages.renamed_bitcode``)."""
    from ..record.offload import region_key

    for fn in llvm.parse_bitcode(bitcode).functions:
        if fn.name != kernel and not fn.is_declaration and region_key(fn.name) == region_key(kernel) != fn.name:
            return renamed_bitcode(bitcode, {fn.name: kernel}, clang)
    return bitcode


class Compiled:
    """One JIT-compiled variant of a kernel, ready to call: ``stages.optimized_module`` (the
    code a build of the variant gets too), emitted as an object (or that object from the
    object cache, ``stages.object_key``) and loaded by MCJIT beside the trampoline; or, for
    the baseline (``pipeline.build_compiler``), the object the build's own compiler makes
    of the kernel (``stages.build_object``), loaded the same way."""

    cached = False  # loaded from the object cache (``stages.cached_object``), not compiled

    def __init__(self, prepared, pipeline, launch=None):
        t0 = time.perf_counter()
        unit = prepared.unit or KernelIR(prepared.capture.kernel, prepared.ir, build_level=prepared.capture.opt_level)
        if pipeline.build_compiler:
            with spent("build"):
                obj = build_object(unit, build_flags(prepared.capture.compile_command))
            # the trampoline only: this machine's target, as any other caller of the object
            tm = target_machine(
                module_triple(unit.ir), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(), 3, jit=True
            )
            mod = None
            self.code = hashlib.sha256(obj).hexdigest()[:16]
        else:
            cpu, features = resolve_target(pipeline, unit)
            # An MCJIT engine owns its target machine: a fresh one per engine.
            tm = target_machine(module_triple(unit.ir), cpu, features, pipeline.codegen, jit=True)
            # The object of the same module, pipeline and target compiled before (a launch-only
            # change, a point measured again, a confirmation round) is loaded, not rebuilt.
            key = object_key(unit, pipeline, launch, cpu, features)
            with spent("object"):
                hit = cached_object(key)
            self.cached = hit is not None
            if hit:
                obj, optimized = hit
            else:
                mod = optimized_module(unit, pipeline, launch, cpu, features, tm=tm)
                optimized = str(mod)
                with spent("codegen"):  # what MCJIT would do with the module: the same code
                    obj = tm.emit_object(mod)
                keep_object(key, obj, optimized)
            mod = None
            self.code = code_digest(optimized, cpu, features, pipeline.codegen, launch)
        with spent("link"):
            if cuts():  # the trampoline's object, compiled once by the worker (``trampoline_object``)
                tramp = llvm.parse_assembly("")
                tramp.triple, tramp.data_layout = module_triple(unit.ir), str(tm.target_data)
                self.engine = llvm.create_mcjit_compiler(tramp, tm)
                self.engine.add_object_file(llvm.ObjectFileRef.from_data(trampoline_object(prepared)))
            else:
                base, end = (int(prepared.capture.arena[k], 16) for k in ("base", "end"))
                tramp = llvm.parse_assembly(trampoline(prepared.capture.kernel, prepared.capture.signature, base, end))
                tramp.triple, tramp.data_layout = module_triple(unit.ir), str(tm.target_data)
                self.engine = llvm.create_mcjit_compiler(tramp, tm)
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            self.engine.finalize_object()
        addr = self.engine.get_function_address("__r3_call")
        if not addr:
            raise CompileError("kernel entry not found after compilation")
        self.call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(addr)
        self.timed = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
            self.engine.get_function_address("__r3_timed")
        )
        self.sequence = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)(
            self.engine.get_function_address("__r3_sequence")
        )
        # what two clock readings cost, taken off every timed span
        self.clock_ns = min(self.timed(None, None, 0) for _ in range(32))
        self.compile_s = time.perf_counter() - t0


_trampolines = {}  # (kernel, signature, arena) -> the trampoline's object


def trampoline_object(prepared):
    """The object of a capture's trampoline (``module.trampoline``: how replay calls and times
    the kernel), for this host at codegen level 3, compiled once per process: the worker
    compiles it before it forks a candidate (compiling runs no kernel code), and every
    candidate's child loads it instead of compiling it again (a compile saved per candidate)."""
    capture = prepared.capture
    base, end = (int(capture.arena[k], 16) for k in ("base", "end"))
    key = (capture.kernel, json.dumps(capture.signature, sort_keys=True), base, end)
    if key not in _trampolines:
        with spent("link"):
            triple = module_triple(prepared.unit.ir if prepared.unit else prepared.ir)
            tm = target_machine(triple, llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(), 3, jit=True)
            mod = llvm.parse_assembly(trampoline(capture.kernel, capture.signature, base, end))
            mod.triple, mod.data_layout = triple, str(tm.target_data)
            _trampolines[key] = tm.emit_object(mod)
    return _trampolines[key]


def code_digest(optimized_ir, cpu, features, codegen, launch=None):
    """What a candidate runs, as a short digest: the same optimized IR, for the same target
    at the same codegen level, is the same machine code, and with the same launch settings
    the same measurement. Many pipelines give one kernel the same code (a pass with no
    work, an inlining threshold with nothing to inline), so their measurements can be
    pooled (``search.bayes``)."""
    key = "\0".join([optimized_ir, cpu or "", features or "", str(codegen), repr(launch)])
    return hashlib.sha256(key.encode(errors="surrogateescape")).hexdigest()[:16]


class Frame:
    """Argument slots, by-value copies and the return buffer for calling a kernel."""

    def __init__(self, prepared):
        n = max(len(prepared.slots), 1)
        self.slots = (ctypes.c_uint64 * n)(*prepared.slots)
        self._keep = []
        for i, data in enumerate(prepared.byval):
            if data:
                buf = ctypes.create_string_buffer(data, len(data))
                self._keep.append(buf)
                self.slots[i] = ctypes.addressof(buf)
        self.ret = ctypes.create_string_buffer(32)

    def run(self, compiled):
        compiled.call(ctypes.addressof(self.slots), ctypes.addressof(self.ret))

    def timed(self, compiled, n=1):
        """Seconds that ``n`` calls back to back took, timed in native code."""
        ns = compiled.timed(ctypes.addressof(self.slots), ctypes.addressof(self.ret), n)
        return max(ns - compiled.clock_ns, 1) * 1e-9


def check(prepared, frame, tolerance):
    """Compare memory and return value after a run against the recording."""
    worst, bad, where = 0.0, 0, ""
    for addr, want in prepared.post:
        if _libc.memcmp(addr, want, len(want)) == 0:  # in place: no copy of large arrays
            continue
        err, nbytes = compare(ctypes.string_at(addr, len(want)), want, prepared.fp_types)
        if nbytes:
            bad += nbytes
            if err > worst or not where:
                where = "memory at 0x%x (%d bytes) differs" % (addr, len(want))
            worst = max(worst, err)
    stray = ""  # never within tolerance: the recording says nothing was there
    for lo, hi in prepared.untouched:
        page = np.frombuffer((ctypes.c_char * (hi - lo)).from_address(lo), dtype=np.uint8)
        if page.any():
            bad += int(np.count_nonzero(page))
            stray = where = "memory at 0x%x, which the recorded call never touched, was written" % (
                lo + int(np.argmax(page != 0))
            )
            break
    if prepared.ret:
        ret_type = {"double": [np.float64], "float": [np.float32]}.get(prepared.capture.signature["ret"], [])
        err, nbytes = compare(frame.ret.raw[: len(prepared.ret)], prepared.ret, ret_type)
        if nbytes:
            bad += nbytes
            worst = max(worst, err)
            where = where or "return value differs"
    ok = bad == 0 or (not stray and tolerance is not None and worst <= tolerance)
    detail = "" if bad == 0 else "%s; max relative error %.3g" % (where, worst)
    return Check(ok, worst if bad else 0.0, bad, detail)


# Each OpenMP thread of the kernel's team writes a private buffer: a thread's own caches
# are emptied only by what runs on its core.
_FLUSH_C = """
extern int omp_get_thread_num(void);
volatile char r3_flush_sink;
void r3_flush_private(double *buf, long per_thread, const char *tlb, long pages) {
#pragma omp parallel
    {
        long t = omp_get_thread_num();
        double *b = buf + t * per_thread;
        for (long i = 0; i < per_thread; i++) b[i] += 1.0;
        const volatile char *q = tlb + t * pages * 4096;
        char s = 0;
        for (long i = 0; i < pages; i++) s += q[i * 4096];
        r3_flush_sink = s;
    }
}
"""
TLB_PAGES = 4096  # more 4 KiB pages than a core's second-level TLB holds (1.5-3k on current x86)


@functools.lru_cache(maxsize=None)
def flush_ir():
    """The flush as LLVM IR, compiled by clang once per process: the worker asks for it
    before it forks a candidate, so that no candidate runs clang again."""
    from ..toolchain import find_clang

    return subprocess.run(
        [find_clang(), "-x", "c", "-fopenmp", "-O2", "-S", "-emit-llvm", "-o", "-", "-"],
        input=_FLUSH_C,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


class CacheFlush:
    """Empties caches before each timed run. In an application a kernel often starts on
    data that other kernels pushed out of a core's own caches, where replay, calling it
    again and again, finds its data where its last run left it (WARM).

    - SHARED: each thread of the kernel's team writes twice its core's private (L2)
      cache: the kernel's data is left in the shared last-level cache at most.
    - COLD: that, then twice the last-level cache from the calling thread: the data
      comes from memory.
    """

    def __init__(self, mode, threads=1):
        l2 = cache_bytes(2) or (1 << 20)
        self.per_thread = 2 * l2 // 8
        self.buffer = np.zeros(self.per_thread * max(1, threads), dtype=np.float64)
        # Only read: every page maps the kernel's zero page, so the sweep costs TLB entries, not memory.
        self.tlb = mmap.mmap(-1, TLB_PAGES * 4096 * max(1, threads), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.tlb_addr = ctypes.addressof(ctypes.c_char.from_buffer(self.tlb))
        self.shared = np.zeros(2 * (cache_bytes() or (32 << 20)) // 8, dtype=np.float64) if mode == COLD else None
        mod = llvm.parse_assembly(flush_ir())
        # An MCJIT engine owns its target machine: a fresh one, for this host.
        tm = target_machine(mod.triple, *resolve_target(Pipeline(), None), codegen=2, jit=True)
        self.engine = llvm.create_mcjit_compiler(mod, tm)
        self.engine.finalize_object()
        self._flush = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_long)(
            self.engine.get_function_address("r3_flush_private")
        )

    def __call__(self):
        self._flush(self.buffer.ctypes.data, self.per_thread, self.tlb_addr, TLB_PAGES)
        if self.shared is not None:
            self.shared += 1.0


def preemptions():
    """Involuntary context switches of this process (all its threads) so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


def time_runs(prepared, frame, compiled, repeat, flush=None, preempted=None, batch=1):
    """``repeat`` timed runs, each after the kernel's outputs are put back (and, with
    ``flush``, the caches emptied), neither of which is timed. ``preempted``: a list that
    gets, for each run, whether the process lost its CPU during the timed part. ``batch``:
    calls back to back in each run (only for a kernel with no outputs to put back,
    ``batchable``); each run's time is their total."""
    times = []
    for _ in range(repeat):
        restore(prepared, outputs_only=True)
        if flush:
            with spent("flush"):
                flush()
        switches = preemptions() if preempted is not None else 0
        times.append(frame.timed(compiled, batch))
        if preempted is not None:
            preempted.append(preemptions() != switches)
    return times


def batchable(prepared, flush=None):
    """Whether calls may follow each other with nothing put back in between: the kernel
    changes no memory that replay compares (``outputs`` is empty), and no cache flush
    must come before each call."""
    return not prepared.outputs and not flush


# Each timing sample of the paired protocol lasts at least this long. One call of a short
# kernel times the interrupts and preemptions that land in it as much as the kernel (its
# baseline/candidate ratios scatter widely).
MIN_SAMPLE_S = 1e-3
MOST_RUNS_PER_SAMPLE = 64
MOST_BATCHED_RUNS_PER_SAMPLE = 1 << 16  # calls back to back cost nothing between them
MOST_FLUSHED_RUNS_PER_SAMPLE = 8  # each run after a flush costs the flush too (twice L2, or the LLC)


def runs_per_sample(prepared, frame, compiled, min_s=MIN_SAMPLE_S, flush=None):
    """How many runs one timing sample sums so that it lasts ``min_s`` (from one run of
    ``compiled``, the faster side of a pair as a rule); fewer when each run follows a ``flush``."""
    most = (
        MOST_FLUSHED_RUNS_PER_SAMPLE
        if flush
        else MOST_BATCHED_RUNS_PER_SAMPLE
        if batchable(prepared)
        else MOST_RUNS_PER_SAMPLE
    )
    return runs_to_last(time_runs(prepared, frame, compiled, 1, flush)[0], min_s, most)


def runs_to_last(seconds, min_s, most):
    """Runs of ``seconds`` each that together last ``min_s``, at most ``most``."""
    return most if seconds <= 0 else max(1, min(most, -int(-min_s // seconds)))


# A pair during which the worker was preempted is measured again, up to this many times.
# On a machine where the search's own process shares the CPUs with the workers, a few
# milliseconds of preemption land in one side of a pair and not the other, enough to make
# one evaluation's median far off and the search's best (heat's residual2).
MOST_RESAMPLES = 3
# Past this, measuring again is futile: on loaded cores every pair of a long kernel is
# preempted (bench/evalcost.json).
RESAMPLE_FUTILE_AFTER = 4


@dataclass
class Pairs:
    ratios: List[float]  # baseline / candidate, one per pair
    candidate_s: List[float]  # the candidate's time per run in each pair
    resampled: int = 0  # pairs measured again because the worker was preempted during them


def paired_ratios(
    prepared,
    frame,
    baseline,
    candidate,
    pairs,
    libomp=None,
    threads=(None, None),
    runs=1,
    flush=None,
    sequence=None,
    seen=None,
):
    """The paired protocol: alternate baseline and candidate; ratios baseline/candidate,
    each side's sample the sum of ``runs`` runs (memory restored before each, untimed).
    ``threads``: the OpenMP threads of each (see ``thread_counts``); ``flush``: caches
    emptied before every run (``CacheFlush``); ``sequence``: a run is a pass over its
    recorded calls (``replay.sequence``). A pair during which the process was preempted
    is measured again (``MOST_RESAMPLES``), unless most tries so far were preempted
    (``seen``: [tries, preempted], kept across the calls of one evaluation): then the next
    try would be preempted too (a long run on a loaded machine is, nearly always), and
    pairs are kept as they come, their median left to absorb it."""
    out = Pairs([], [])
    seen = [0, 0] if seen is None else seen
    # a kernel with nothing to put back runs its sample's calls back to back: one timed span
    repeat, batch = (1, runs) if batchable(prepared, flush) else (runs, 1)

    def sample(compiled, preempted):
        if sequence is not None:
            return sum(sequence.timed(compiled, preempted) for _ in range(runs))
        return sum(time_runs(prepared, frame, compiled, repeat, flush, preempted, batch))

    for _ in range(pairs):
        for attempt in range(MOST_RESAMPLES + 1):
            # Only the timed parts count: a preemption during a restore or a flush costs nothing.
            preempted = []
            set_threads(libomp, threads[0])
            tb = sample(baseline, preempted)
            set_threads(libomp, threads[1])
            tc = sample(candidate, preempted)
            if not measure_again(seen, any(preempted), attempt):
                break
            out.resampled += 1
        out.ratios.append(tb / tc if tc > 0 else float("inf"))
        out.candidate_s.append(tc / runs)
    return out


def measure_again(seen, preempted, attempt):
    """Whether a pair's try ``attempt`` (from 0), ``preempted`` or not, is measured again;
    counts it in ``seen`` ([tries, preempted tries] of the evaluation so far). Not once the
    pair has had MOST_RESAMPLES more tries, nor once most of the evaluation's tries were
    preempted (from RESAMPLE_FUTILE_AFTER tries on, unless ``$R3_EVAL_CUTS`` is 0)."""
    seen[0], seen[1] = seen[0] + 1, seen[1] + bool(preempted)
    if not preempted or attempt >= MOST_RESAMPLES:
        return False
    return not (cuts() and seen[0] >= RESAMPLE_FUTILE_AFTER and seen[1] > seen[0] // 2)


def thread_counts(recorded, requested, cpus):
    """OpenMP threads of (baseline, candidate) in one evaluation: the baseline runs as the
    application did (``recorded``), the candidate with its own launch setting if it has one,
    so that a thread count is measured against the application's; neither above ``cpus``,
    the CPUs this worker may use (threads beyond them would time the scheduler)."""

    def clamp(n):
        return min(int(n), cpus) if n else None

    return clamp(recorded), clamp(requested or recorded)


def set_threads(libomp, threads):
    if libomp and threads:
        ctypes.CDLL(libomp).omp_set_num_threads(int(threads))


def spread(values):
    return median(values), min(values), max(values)
