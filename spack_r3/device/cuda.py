"""Replay of a CUDA kernel through the driver API (``cuda-python``'s cuda.bindings.driver),
the way Mneme replays device kernels: device memory reserved and mapped at the recorded
device addresses (cuMemAddressReserve at the address, cuMemCreate, cuMemMap,
cuMemSetAccess), so pointers inside device data stay valid; the code (PTX or a cubin)
loaded with cuModuleLoadData; the launch with its grid, block and dynamic shared memory;
its time from device events; device memory read back to compare with the recording.

Written against the real API and never run here: no machine this project builds and
tests on has a GPU. Its tests are marked ``gpu`` and skip with "no CUDA device" where
cuInit finds none. Nothing here is GPU-verified until they ran on one.
"""

import ctypes
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from ..errors import R3Error


class CudaUnavailable(R3Error):
    """No cuda-python, no driver, or no device: one line."""


class CudaError(R3Error):
    """A driver call failed: the call and the driver's error name."""


def driver():
    """cuda.bindings.driver, initialized; CudaUnavailable with one line where it cannot be."""
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        raise CudaUnavailable("no CUDA device: cuda-python is not installed (pip install cuda-python)")
    try:
        (err,) = cu.cuInit(0)
    except Exception as exc:  # the driver library itself is missing (no NVIDIA driver)
        raise CudaUnavailable("no CUDA device: %s" % (str(exc).splitlines() or [type(exc).__name__])[0])
    if err != cu.CUresult.CUDA_SUCCESS:
        raise CudaUnavailable("no CUDA device: cuInit: %s" % _name(err))
    return cu


def _name(err):
    return getattr(err, "name", str(err))


def _check(cu, result, what):
    err, rest = result[0], result[1:]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise CudaError("%s: %s" % (what, _name(err)))
    return rest[0] if len(rest) == 1 else (rest or None)


@dataclass
class Mapping:
    addr: int
    size: int
    handle: object


class CudaDevice:
    """One device's primary context, and the device memory mapped at fixed addresses."""

    def __init__(self, ordinal=0):
        self.cu = cu = driver()
        self.device = _check(cu, cu.cuDeviceGet(ordinal), "cuDeviceGet")
        self.context = _check(cu, cu.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        _check(cu, cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        attr = cu.CUdevice_attribute
        major = _check(
            cu,
            cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device),
            "cuDeviceGetAttribute",
        )
        minor = _check(
            cu,
            cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device),
            "cuDeviceGetAttribute",
        )
        self.arch = "sm_%d%d" % (major, minor)
        self.mappings: List[Mapping] = []

    def _prop(self):
        cu = self.cu
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = int(self.device)
        return prop

    def granularity(self):
        cu = self.cu
        return int(
            _check(
                cu,
                cu.cuMemGetAllocationGranularity(
                    self._prop(), cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
                ),
                "cuMemGetAllocationGranularity",
            )
        )

    def free_address(self, size):
        """A device virtual address where ``size`` bytes can be mapped now (reserved, then
        given back): what a recording's addresses look like."""
        cu = self.cu
        size = self._rounded(size)
        ptr = _check(cu, cu.cuMemAddressReserve(size, 0, 0, 0), "cuMemAddressReserve")
        _check(cu, cu.cuMemAddressFree(ptr, size), "cuMemAddressFree")
        return int(ptr)

    def _rounded(self, size):
        g = self.granularity()
        return -(-size // g) * g

    def map_at(self, addr, size):
        """``size`` bytes of device memory at device address ``addr`` (rounded out to the
        allocation granularity); CudaError when the address is taken."""
        cu = self.cu
        g = self.granularity()
        base = addr - addr % g
        length = self._rounded(addr + size - base)
        ptr = _check(cu, cu.cuMemAddressReserve(length, 0, base, 0), "cuMemAddressReserve")
        if int(ptr) != base:
            cu.cuMemAddressFree(ptr, length)
            raise CudaError("device address 0x%x is taken: the driver offered 0x%x" % (base, int(ptr)))
        handle = _check(cu, cu.cuMemCreate(length, self._prop(), 0), "cuMemCreate")
        _check(cu, cu.cuMemMap(ptr, length, 0, handle, 0), "cuMemMap")
        access = cu.CUmemAccessDesc()
        access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        access.location.id = int(self.device)
        access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        _check(cu, cu.cuMemSetAccess(ptr, length, [access], 1), "cuMemSetAccess")
        self.mappings.append(Mapping(base, length, handle))
        return addr

    def write(self, addr, data):
        _check(self.cu, self.cu.cuMemcpyHtoD(addr, bytes(data), len(data)), "cuMemcpyHtoD")

    def read(self, addr, size):
        buf = bytearray(size)
        _check(self.cu, self.cu.cuMemcpyDtoH(buf, addr, size), "cuMemcpyDtoH")
        return bytes(buf)

    def module(self, image):
        """A PTX text or cubin (bytes) loaded."""
        cu = self.cu
        if not image.endswith(b"\0") and image.lstrip().startswith((b"//", b".version")):
            image += b"\0"  # PTX is read as a C string
        return _check(cu, cu.cuModuleLoadData(image), "cuModuleLoadData")

    def function(self, image, name, module=None):
        """The kernel ``name`` of a PTX text or cubin (bytes), or of a loaded ``module``."""
        cu = self.cu
        module = module if module is not None else self.module(image)
        return _check(cu, cu.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction %s" % name)

    def global_of(self, module, name):
        """(device address, bytes) of the ``__device__`` / ``__constant__`` variable ``name``
        of a loaded module (each module holds its own)."""
        cu = self.cu
        dptr, size = _check(cu, cu.cuModuleGetGlobal(module, name.encode()), "cuModuleGetGlobal %s" % name)
        return int(dptr), int(size)

    def launch(
        self,
        fn,
        grid: Tuple[int, int, int],
        block: Tuple[int, int, int],
        args: Sequence[Tuple[object, type]],
        shared=0,
        stream=0,
    ):
        """One launch; ``args``: (value, ctypes type) per kernel parameter."""
        cu = self.cu
        values = tuple(a[0] for a in args)
        types = tuple(a[1] for a in args)
        _check(cu, cu.cuLaunchKernel(fn, *grid, *block, shared, stream, (values, types), 0), "cuLaunchKernel")

    def launch_params(self, fn, grid, block, shared, params):
        """One launch on the default stream; ``params``: the address of a ``void *`` array
        (kernelParams), as ``cudareplay.Session`` holds it (HipDevice has the same)."""
        cu = self.cu
        _check(cu, cu.cuLaunchKernel(fn, *grid, *block, shared, 0, params, 0), "cuLaunchKernel")

    def time(self, fn, grid, block, args, shared=0, repeat=5):
        """Seconds of each of ``repeat`` launches, from device events around each."""
        return self.time_call(lambda: self.launch(fn, grid, block, args, shared), repeat)

    def time_call(self, launch, repeat=1):
        """Seconds of each of ``repeat`` calls of ``launch()`` (one launch on the default
        stream), from device events around each."""
        cu = self.cu
        start = _check(cu, cu.cuEventCreate(0), "cuEventCreate")
        stop = _check(cu, cu.cuEventCreate(0), "cuEventCreate")
        times = []
        for _ in range(repeat):
            _check(cu, cu.cuEventRecord(start, 0), "cuEventRecord")
            launch()
            _check(cu, cu.cuEventRecord(stop, 0), "cuEventRecord")
            _check(cu, cu.cuEventSynchronize(stop), "cuEventSynchronize")
            times.append(float(_check(cu, cu.cuEventElapsedTime(start, stop), "cuEventElapsedTime")) / 1e3)
        cu.cuEventDestroy(start)
        cu.cuEventDestroy(stop)
        return times

    def synchronize(self):
        _check(self.cu, self.cu.cuCtxSynchronize(), "cuCtxSynchronize")

    def close(self):
        cu = self.cu
        for m in reversed(self.mappings):
            cu.cuMemUnmap(m.addr, m.size)
            cu.cuMemRelease(m.handle)
            cu.cuMemAddressFree(m.addr, m.size)
        self.mappings = []
        cu.cuDevicePrimaryCtxRelease(self.device)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


POINTER = ctypes.c_void_p
