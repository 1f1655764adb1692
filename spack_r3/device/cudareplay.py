"""A recorded CUDA launch (a capture of backend ``cuda``, record/runtime/r3cuda.c), replayed
on a CUDA device and screened statically on GPU targets.

Replay (``replay``): the capture's device allocations mapped at their recorded device
addresses (``cuda.CudaDevice.map_at``, as Mneme does, so pointers inside device data stay
valid) and filled from pre.bin; the kernel's PTX made from the captured device IR under the
candidate pipeline (``codegen``: llvmlite's NVPTX, checked by ptxas) for the device's arch
(the captured module where it was recorded for that arch, else the unit compiled again
for it); the launch with the recorded grid, block, dynamic shared memory and argument bytes
(the variant's ``num_teams`` / ``thread_limit``: the grid's and the block's x); memory read
back and compared with post.bin; then timed launches (device events), memory restored
before each.

Written against the real driver API and never run here: no machine this project builds
and tests on has a GPU; where cuInit finds none, ``replay`` is one line
(``no CUDA device: ...``). Nothing here is GPU-verified until its ``gpu`` tests ran on one.

Static screening (``screen_capture``) needs no GPU: the capture's unit compiled for each
target, its code's registers, spills and shared memory (ptxas -v, AMDGPU metadata) and the
occupancy at the recorded block size (``hook.Screener``, as ``r3 tune --gpu`` uses it).
"""

import ctypes
import os
from dataclasses import dataclass, field
from typing import List, Tuple

from ..errors import R3Error
from ..memimage import KIND_HEAP, read_regions, region_bytes
from .geometry import grid_stride


@dataclass
class CudaReplay:
    arch: str
    verified: bool
    mismatches: List[Tuple[int, int]] = field(default_factory=list)  # (address, bytes) that differ
    times: List[float] = field(default_factory=list)  # seconds a launch, device events


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


def device_code(capture, capture_dir, target, pipeline=None, max_registers=None):
    """The kernel's code for ``target`` (codegen.DeviceCode) under ``pipeline``: from the
    captured device IR where it was recorded for that arch, else from its unit compiled for it."""
    from ..data import Variant
    from .codegen import generate
    from .deviceir import DeviceIR, kernels_of
    from .hook import tuned_unit

    if (capture.launch or {}).get("arch") == target.name:
        with open(os.path.join(capture_dir, "module.bc"), "rb") as f:
            bitcode = f.read()
        ir = DeviceIR(target, "cuda", bitcode, kernels_of(bitcode))
    else:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="r3-cuda-") as tmp:
            ir = tuned_unit(capture, capture_dir, Variant(), tmp).ir(target)
    return generate(ir, pipeline, max_registers)


def replay(capture, capture_dir, pipeline=None, launch=None, repeat=5, ordinal=0):
    """CudaReplay of one capture on CUDA device ``ordinal``; R3Error with one line (no
    device: ``no CUDA device: ...``)."""
    from .cuda import CudaDevice
    from .targets import parse_targets

    if (capture.launch or {}).get("backend") != "cuda":
        raise R3Error("capture %s is no CUDA launch" % capture.id)
    if capture.unreplayable:
        raise R3Error("capture %s: %s cannot replay: %s" % (capture.id, capture.kernel, capture.unreplayable))
    pre_path, post_path = os.path.join(capture_dir, "pre.bin"), os.path.join(capture_dir, "post.bin")
    pre = [(r.addr, region_bytes(pre_path, r)) for r in read_regions(pre_path) if r.kind == KIND_HEAP]
    post = [(r.addr, region_bytes(post_path, r)) for r in read_regions(post_path) if r.kind == KIND_HEAP]
    with CudaDevice(ordinal) as dev:
        target = parse_targets(dev.arch)[0]
        code = device_code(capture, capture_dir, target, pipeline)
        fn = dev.function(code.code, capture.kernel)
        for lo, hi in spans([(addr, len(data)) for addr, data in pre], dev.granularity()):
            dev.map_at(lo, hi - lo)
        for addr, data in pre:
            dev.write(addr, data)
        with open(os.path.join(capture_dir, "module.bc"), "rb") as f:
            import llvmlite.binding as llvm

            text = str(llvm.parse_bitcode(f.read()))
        grid, block = geometry(capture, launch, grid_stride(text, capture.kernel))
        shared = int((capture.launch or {}).get("dynamic_shared") or 0)
        params, keep = kernel_params(argument_bytes(capture))
        cu = dev.cu
        from .cuda import _check

        def once():
            _check(cu, cu.cuLaunchKernel(fn, *grid, *block, shared, 0, params, 0), "cuLaunchKernel")

        once()
        dev.synchronize()
        mismatches = [(addr, len(data)) for addr, data in post if dev.read(addr, len(data)) != data]
        times = []
        for _ in range(repeat):
            for addr, data in pre:
                dev.write(addr, data)
            times += dev.time_call(once)
        del keep
        return CudaReplay(dev.arch, not mismatches, mismatches, times)


def screen_capture(capture, capture_dir, gpus, variant=None, max_registers=None):
    """[screen.Verdict] of the captured kernel on each of ``gpus`` (no GPU needed)."""
    from ..data import Variant
    from .hook import Screener

    return Screener(capture, capture_dir, gpus, max_registers).verdicts(variant or Variant())
