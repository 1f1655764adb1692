"""A recorded CUDA launch (a capture of backend ``cuda``, record/runtime/r3cuda.c), replayed
on a CUDA device and screened statically on GPU targets.

Replay (``replay``): the capture's device allocations mapped at their recorded device
addresses (``cuda.CudaDevice.map_at``, as Mneme does, so pointers inside device data stay
valid) and filled from pre.bin; the kernel's PTX made from the captured device IR under the
candidate pipeline (``codegen``: llvmlite's NVPTX, checked by ptxas) for the device's arch
(the captured module where it was recorded for that arch, else the unit compiled again
for it); the launch with the recorded grid, block, dynamic shared memory and argument bytes
(the variant's ``num_teams`` / ``thread_limit``: the grid's and the block's x; its
``max_registers``: the PTX's ``.maxnreg``); memory read
back and compared with post.bin (byte for byte, or within the capture's tolerance:
``checked``); then timed launches (device events), memory restored
before each. A device variable lives in the loaded module, not at its recorded address:
its recorded bytes are written into the module's copy, and pointers to it in device
memory or the arguments are moved there before the launch and read back as recorded
after it (``relocate.py``; each word moved is named in the diagnostics). ``evaluate``:
one candidate as the replay servers report it (an Evaluation, paired with the kernel as
built where asked), which ``device/cudaworker.py`` runs in a child for each request a
replay server sends it.

A HIP launch (backend ``hip``, record/runtime/r3hip.c) replays the same way through HIP's
module API (``hip.HipDevice``: the same methods; its code object from codegen's AMDGPU
target, linked by ld.lld): ``device_of``.

Written against the real driver API (and hip-python's) and never run here: no machine this
project builds and tests on has a GPU; where cuInit (hipInit) finds none, ``replay`` is one
line (``no CUDA device: ...``, ``no HIP device: ...``). Nothing here is GPU-verified until its ``gpu`` tests ran on one.

Static screening (``screen_capture``) needs no GPU: the capture's unit compiled for each
target, its code's registers, spills and shared memory (ptxas -v, AMDGPU metadata) and the
occupancy at the recorded block size (``hook.Screener``, as ``r3 tune --gpu`` uses it).
"""

import ctypes
import os
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ..errors import R3Error
from ..memimage import KIND_GLOBAL, KIND_HEAP, read_regions, region_bytes
from .geometry import grid_stride
from .relocate import Relocated, Variable, reading_back, relocate_launch


@dataclass
class CudaReplay:
    arch: str
    verified: bool
    mismatches: List[Tuple[int, int]] = field(default_factory=list)  # (address, bytes) that differ
    times: List[float] = field(default_factory=list)  # seconds a launch, device events
    relocations: str = ""  # pointers into device variables moved to the module's copies (relocate.Relocated.note)


def geometry(capture, launch=None, stride=True):
    """(grid, block) of the recorded launch, the variant's ``num_teams`` / ``thread_limit``
    (``data.Launch``) replacing the grid's and the block's x; a kernel that is no grid-stride
    kernel (``stride`` False) keeps its threads: its grid follows its block
    (``geometry.launch_grid``)."""
    from .geometry import launch_grid

    rec = capture.launch or {}
    grid = list(rec.get("grid") or (1, 1, 1))
    block = list(rec.get("block_dim") or (rec.get("block") or 1, 1, 1))
    if launch is not None and getattr(launch, "thread_limit", None):
        grid[0] = launch_grid(grid[0], block[0], int(launch.thread_limit), stride)
        block[0] = int(launch.thread_limit)
    if launch is not None and getattr(launch, "num_teams", None):
        grid[0] = int(launch.num_teams)
    return tuple(grid), tuple(block)


def spans(sections, granularity):
    """The [lo, hi) ranges, aligned to the driver's mapping granularity, that hold the
    (address, size) ``sections``: allocations that share a granule (cudaMalloc packs small
    ones into the same 2 MiB) are mapped once."""
    out = []
    for addr, size in sorted(sections):
        lo = addr - addr % granularity
        hi = -(-(addr + max(size, 1)) // granularity) * granularity
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def argument_bytes(capture):
    """Each kernel parameter's bytes as recorded: up to 8 bytes from its value, a struct
    passed by value from its bytes (r3cuda.c's meta.json)."""
    sizes = (capture.launch or {}).get("param_sizes") or []
    byval = capture.byval_data or [None] * len(capture.args)
    out = []
    for i, value in enumerate(capture.args):
        if byval[i]:
            out.append(bytes.fromhex(byval[i]))
        else:
            size = sizes[i] if i < len(sizes) else 8
            out.append(int(value, 16).to_bytes(8, "little")[:size])
    return out


def kernel_params(arguments):
    """A ``void **`` of the arguments (cuLaunchKernel's kernelParams) and what keeps it alive."""
    buffers = [ctypes.create_string_buffer(a, max(len(a), 1)) for a in arguments]
    array = (ctypes.c_void_p * max(len(buffers), 1))(*[ctypes.addressof(b) for b in buffers])
    return ctypes.addressof(array), (buffers, array)


def device_code(capture, capture_dir, target, pipeline=None, max_registers=None, variant=None):
    """The kernel's code for ``target`` (codegen.DeviceCode) under ``pipeline``: from the
    captured device IR where it was recorded for that arch and ``variant`` (a source
    variant) changes no source, else from its unit compiled for it (the variant's patch and
    knobs applied)."""
    from ..data import Variant
    from .codegen import generate
    from .deviceir import DeviceIR, kernels_of
    from .hook import tuned_unit

    variant = variant or Variant()
    same_source = not variant.source_patch and not variant.source_defines
    if same_source and (capture.launch or {}).get("arch") == target.name:
        with open(os.path.join(capture_dir, "module.bc"), "rb") as f:
            bitcode = f.read()
        ir = DeviceIR(target, (capture.launch or {}).get("backend", "cuda"), bitcode, kernels_of(bitcode))
    else:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="r3-cuda-") as tmp:
            ir = tuned_unit(capture, capture_dir, variant, tmp).ir(target)
    return generate(ir, pipeline, max_registers)


def check_replayable(capture):
    """R3Error with one line where ``capture`` is no CUDA or HIP launch replay can run."""
    if (capture.launch or {}).get("backend") not in ("cuda", "hip"):
        raise R3Error("capture %s is no CUDA or HIP launch" % capture.id)
    if capture.unreplayable:
        raise R3Error("capture %s: %s cannot replay: %s" % (capture.id, capture.kernel, capture.unreplayable))


@dataclass
class Kernel:
    """A kernel's code loaded on the device: its function, its module's copy of each
    device variable the capture holds: (address there, bytes before, bytes after), and
    what a launch of it is restored and launched with, pointers into those variables
    moved to this module's copies (``relocate.relocate_launch``): each module holds its
    variables at addresses of its own."""

    fn: object
    globals: List[Tuple[int, bytes, bytes]] = field(default_factory=list)
    variables: List[Variable] = field(default_factory=list)
    launch: Optional[Relocated] = None
    params: int = 0  # kernelParams: the address of a void * array of launch.arguments
    keep: object = None  # what keeps params alive


@dataclass
class Recording:
    """A capture's launch as recorded, read from its folder (no device needed): the
    allocations before and after [(device address, bytes)], each device variable
    (name, recorded address, bytes before, bytes after), the argument bytes."""

    pre: List[Tuple[int, bytes]]
    post: List[Tuple[int, bytes]]
    variables: List[Tuple[str, int, bytes, Optional[bytes]]]
    arguments: List[bytes]

    @classmethod
    def read(cls, capture, capture_dir):
        pre_path, post_path = os.path.join(capture_dir, "pre.bin"), os.path.join(capture_dir, "post.bin")
        pre_regions, post_regions = read_regions(pre_path), read_regions(post_path)
        names = {int(g["addr"], 16): g["name"] for g in capture.globals}
        post_globals = {r.addr: region_bytes(post_path, r) for r in post_regions if r.kind == KIND_GLOBAL}
        return cls(
            [(r.addr, region_bytes(pre_path, r)) for r in pre_regions if r.kind == KIND_HEAP],
            [(r.addr, region_bytes(post_path, r)) for r in post_regions if r.kind == KIND_HEAP],
            [
                (names[r.addr], r.addr, region_bytes(pre_path, r), post_globals.get(r.addr))
                for r in pre_regions
                if r.kind == KIND_GLOBAL and r.addr in names
            ],
            argument_bytes(capture),
        )

    def kernel(self, fn, loaded):
        """The Kernel of function ``fn`` whose module holds each variable at ``loaded[name]``
        = (device address, bytes): its recorded bytes written there, pointers to it in the
        allocations, the variables and the arguments moved there."""
        kernel = Kernel(fn)
        for name, recorded, pre, post in self.variables:
            addr, size = loaded[name]
            if size != len(pre):
                raise R3Error("device variable %s: %d bytes in this code, %d recorded" % (name, size, len(pre)))
            kernel.globals.append((addr, pre, post))
            kernel.variables.append(Variable(name, recorded, size, addr))
        memory = self.pre + [(addr, pre) for addr, pre, _ in kernel.globals]
        kernel.launch = relocate_launch(memory, self.arguments, kernel.variables)
        kernel.params, kernel.keep = kernel_params(kernel.launch.arguments)
        return kernel

    def expected(self, kernel):
        """[(address, bytes)] the device should hold after a launch of ``kernel``: post.bin's."""
        return self.post + [(addr, post) for addr, _, post in kernel.globals if post is not None]

    def read_back(self, read, kernel):
        """``read(address, size)`` of the device after a launch of ``kernel``, the pointers
        moved into its module read as recorded (relocate.translate_back)."""
        return reading_back(read, self.expected(kernel), kernel.variables)


class Session:
    """One capture on one device: its memory mapped at the recorded device addresses,
    ``load`` of a kernel's code, ``restore`` (pre.bin written back: the allocations, and
    the device variables into the kernel's module, which holds its own at addresses of
    its own; pointers to them moved there), ``launch`` at a geometry, ``differs`` (the
    (address, bytes) of post.bin the device memory does not hold, moved pointers read
    back as recorded)."""

    def __init__(self, dev, capture, capture_dir):
        self.recording = Recording.read(capture, capture_dir)
        self.dev, self.capture = dev, capture
        for lo, hi in spans([(addr, len(data)) for addr, data in self.recording.pre], dev.granularity()):
            dev.map_at(lo, hi - lo)
        with open(os.path.join(capture_dir, "module.bc"), "rb") as f:
            import llvmlite.binding as llvm

            text = str(llvm.parse_bitcode(f.read()))
        self.stride = grid_stride(text, capture.kernel)
        self.fp_types = fp_types(text)
        self.shared = int((capture.launch or {}).get("dynamic_shared") or 0)

    def load(self, image):
        """The Kernel of a PTX text or cubin: its function, its module's device variables,
        its launch's memory and arguments with pointers to them moved to its module's copies."""
        module = self.dev.module(image)
        fn = self.dev.function(image, self.capture.kernel, module)
        return self.recording.kernel(
            fn, {name: self.dev.global_of(module, name) for name, *_ in self.recording.variables}
        )

    def restore(self, kernel):
        for addr, data in kernel.launch.memory:
            self.dev.write(addr, data)

    def launch(self, kernel, grid, block):
        self.dev.launch_params(kernel.fn, grid, block, self.shared, kernel.params)

    def expected(self, kernel):
        return self.recording.expected(kernel)

    def differs(self, kernel):
        read = self.recording.read_back(self.dev.read, kernel)
        return [(addr, len(data)) for addr, data in self.expected(kernel) if read(addr, len(data)) != data]

    def check(self, kernel, tolerance=None):
        """compare.Check of the device memory after a launch against the recording."""
        read = self.recording.read_back(self.dev.read, kernel)
        return checked(self.expected(kernel), read, self.fp_types, tolerance)

    def geometry(self, launch=None):
        return geometry(self.capture, launch, self.stride)


def fp_types(ir_text):
    """The floating-point types the device module stores (replay.compare.fp_types): how
    differing device memory is read to measure its error."""
    from ..replay.compare import fp_types as stored

    return stored(ir_text)


def checked(expected, read, types, tolerance=None):
    """compare.Check of device memory against the recording: each (address, bytes) of
    ``expected`` read back with ``read(address, size)``; differing bytes read as each of
    ``types`` (compare.compare: the worst reading counts). Verified when nothing differs, or
    where ``tolerance`` (relative, the capture's or the user's; None or 0: byte for byte)
    bounds the worst error, as the host engine holds a host kernel to it."""
    from ..replay.compare import Check, compare

    worst, bad, where = 0.0, 0, ""
    for addr, want in expected:
        err, nbytes = compare(read(addr, len(want)), want, types)
        if nbytes:
            bad += nbytes
            if err > worst or not where:
                where = "device memory at 0x%x (%d bytes) differs" % (addr, len(want))
            worst = max(worst, err)
    ok = bad == 0 or (bool(tolerance) and worst <= tolerance)
    return Check(ok, worst if bad else 0.0, bad, "%s; max relative error %.3g" % (where, worst) if bad else "")


def replay(capture, capture_dir, pipeline=None, launch=None, repeat=5, ordinal=0, tolerance=None):
    """CudaReplay of one capture on CUDA (HIP) device ``ordinal``; R3Error with one line (no
    device: ``no CUDA device: ...``, ``no HIP device: ...``)."""
    from .targets import parse_targets

    check_replayable(capture)
    with device_of(capture)(ordinal) as dev:
        target = parse_targets(dev.arch)[0]
        code = device_code(capture, capture_dir, target, pipeline, getattr(launch, "max_registers", None))
        s = Session(dev, capture, capture_dir)
        kernel = s.load(code.code)
        grid, block = s.geometry(launch)
        s.restore(kernel)
        s.launch(kernel, grid, block)
        dev.synchronize()
        check = s.check(kernel, tolerance)
        mismatches = s.differs(kernel) if check.mismatched_bytes else []
        times = []
        for _ in range(repeat):
            s.restore(kernel)
            times += dev.time_call(lambda: s.launch(kernel, grid, block))
        return CudaReplay(dev.arch, check.verified, mismatches, times, kernel.launch.note())


def evaluate(capture, capture_dir, variant, repeat=5, pairs=0, ordinal=0, tolerance=None):
    """The Evaluation (data.Evaluation, as JSON) of ``variant`` of a captured CUDA launch, as
    the replay servers report a host candidate's: its code compiled for the device's arch
    (a codegen error: ``compile-error``), launched once on the recorded memory and compared
    with post.bin (``wrong-output``: byte for byte, or within ``tolerance``, relative, as
    ``checked`` reads it), then ``repeat`` timed launches, or ``pairs``
    paired with the kernel as built (``pipeline.as_built``, compiled here) in alternating
    order, memory restored before each; times from device events. R3Error (one line) for a
    capture it cannot replay or no device; a failing driver call while the candidate runs
    (an illegal address) is a ``crash``."""
    import hashlib
    import statistics
    import time

    from ..data import COMPILE_ERROR, CRASH, OK, WRONG_OUTPUT, Evaluation
    from ..compile.pipeline import as_built
    from .codegen import CodegenError
    from .cuda import CudaError
    from .targets import parse_targets

    check_replayable(capture)
    ev = Evaluation(capture=capture.id, variant=variant.to_json(), repeat=repeat)
    with device_of(capture)(ordinal) as dev:
        target = parse_targets(dev.arch)[0]
        t0 = time.perf_counter()
        try:
            code = device_code(capture, capture_dir, target, variant.pipeline, variant.launch.max_registers, variant)
        except (CodegenError, ValueError) as err:
            ev.status, ev.diagnostics = COMPILE_ERROR, str(err)
            return ev.to_json()
        ev.compile_s = ev.stages["compile"] = time.perf_counter() - t0
        s = Session(dev, capture, capture_dir)
        grid, block = s.geometry(variant.launch)
        ev.code = hashlib.sha256(code.code + repr((grid, block)).encode()).hexdigest()[:16]
        try:
            fn = s.load(code.code)
            ev.compiled = True
            s.restore(fn)
            s.launch(fn, grid, block)
            dev.synchronize()
            check = s.check(fn, tolerance)
            ev.verify_runs = 1
            ev.max_rel_error, ev.mismatched_bytes = check.max_rel_error, check.mismatched_bytes
            moved = fn.launch.note()  # a false positive (a data word moved) shows here beside a wrong output
            if not check.verified:
                ev.status, ev.diagnostics = WRONG_OUTPUT, "; ".join(filter(None, (check.detail, moved)))
                return ev.to_json()
            ev.diagnostics = moved
            ev.verified = True

            def timed(f, g, b):
                s.restore(f)
                return dev.time_call(lambda: s.launch(f, g, b))[0]

            if pairs:
                base = device_code(capture, capture_dir, target, as_built(capture))
                base_fn = s.load(base.code)
                base_grid, base_block = s.geometry()
                mine, theirs = [], []
                for i in range(pairs):  # alternating order: neither side always runs second
                    if i % 2:
                        mine.append(timed(fn, grid, block))
                        theirs.append(timed(base_fn, base_grid, base_block))
                    else:
                        theirs.append(timed(base_fn, base_grid, base_block))
                        mine.append(timed(fn, grid, block))
                ev.pairs = pairs
                ev.ratios = [b / a for a, b in zip(mine, theirs) if a > 0]
                ev.speedup = statistics.median(ev.ratios) if ev.ratios else None
                ev.speedup_min, ev.speedup_max = (min(ev.ratios), max(ev.ratios)) if ev.ratios else (None, None)
                ev.baseline_median_s = statistics.median(theirs)
                times = mine
            else:
                times = [timed(fn, grid, block) for _ in range(max(repeat, 1))]
            s.restore(fn)  # as recorded again: the next candidate's check starts from it
        except CudaError as err:
            ev.status, ev.diagnostics = CRASH, str(err)
            return ev.to_json()
        ev.time_median_s, ev.time_min_s, ev.time_max_s = statistics.median(times), min(times), max(times)
        ev.status = OK
        return ev.to_json()


def device_of(capture):
    """The device class that replays ``capture``: cuda.CudaDevice (driver API), or for a HIP
    launch hip.HipDevice (HIP's module API; the same methods)."""
    if (capture.launch or {}).get("backend") == "hip":
        from .hip import HipDevice

        return HipDevice
    from .cuda import CudaDevice

    return CudaDevice


def driver_of(capture):
    """The initialized API of ``capture``'s device (cuda.driver, hip.driver): one line
    (``no CUDA device: ...``, ``no HIP device: ...``) where there is none."""
    if (capture.launch or {}).get("backend") == "hip":
        from .hip import driver

        return driver()
    from .cuda import driver

    return driver()


def screen_capture(capture, capture_dir, gpus, variant=None, max_registers=None):
    """[screen.Verdict] of the captured kernel on each of ``gpus`` (no GPU needed)."""
    from ..data import Variant
    from .hook import Screener

    return Screener(capture, capture_dir, gpus, max_registers).verdicts(variant or Variant())
