"""Replay of a HIP kernel on an AMD GPU through HIP's driver-like module API (``hip-python``'s
``hip.hip``), the twin of ``cuda.CudaDevice`` (same methods, so ``cudareplay.Session`` and
``cudareplay.evaluate`` run either): device memory reserved and mapped at the recorded
device addresses (hipMemAddressReserve at the address, hipMemCreate, hipMemMap,
hipMemSetAccess), the kernel's code object linked into a loadable one (``ld.lld -shared``:
codegen emits a relocatable object) and loaded with hipModuleLoadData, launched with
hipModuleLaunchKernel, timed with HIP events. A candidate's launch geometry comes as a CUDA
one's does: ``Session.geometry`` (its ``num_teams`` / ``thread_limit``) gives ``launch_params``
its grid and block, and its ``max_registers`` is in the code object (``amdgpu-num-vgpr``).

Written against hip-python's API (its calls return (hipError_t, value...) as
cuda-python's do) and never run here: no machine this project builds and tests on has an
AMD GPU, nor hip-python. Where either is missing, a request is one line:
``no HIP device: ...``. Nothing here is GPU-verified until its ``gpu`` tests ran on one.
"""

import os
import subprocess
import tempfile
from typing import List

from .cuda import CudaError, CudaUnavailable, Mapping


class HipUnavailable(CudaUnavailable):
    """No hip-python, no HIP runtime or no device: one line (a CudaUnavailable, so callers
    of either device treat it alike)."""


class HipError(CudaError):
    """A HIP call failed: the call and HIP's error name (caught as a CudaError: a crash)."""


def driver():
    """hip.hip, initialized; HipUnavailable with one line where it cannot be."""
    try:
        from hip import hip
    except ImportError:
        raise HipUnavailable("no HIP device: hip-python is not installed (pip install hip-python)")
    except Exception as exc:  # the HIP runtime library itself is missing
        raise HipUnavailable("no HIP device: %s" % (str(exc).splitlines() or [type(exc).__name__])[0])
    (err,) = hip.hipInit(0)
    if err != hip.hipError_t.hipSuccess:
        raise HipUnavailable("no HIP device: hipInit: %s" % _name(err))
    return hip


def _name(err):
    return getattr(err, "name", str(err))


def _check(hip, result, what):
    result = result if isinstance(result, tuple) else (result,)
    err, rest = result[0], result[1:]
    if err != hip.hipError_t.hipSuccess:
        raise HipError("%s: %s" % (what, _name(err)))
    return rest[0] if len(rest) == 1 else (rest or None)


def linked_code_object(obj):
    """A code object HIP can load (ET_DYN) from codegen's relocatable one: ``ld.lld -shared``,
    as clang's own device link does; HipError with one line without lld or on its error."""
    from . import tools

    try:
        lld = tools.llvm_tool("ld.lld")
    except Exception:
        raise HipError("cannot link the code object: ld.lld not found (Debian: apt-get install lld-19)")
    with tempfile.TemporaryDirectory(prefix="r3-hip-") as tmp:
        src, out = os.path.join(tmp, "kernel.o"), os.path.join(tmp, "kernel.hsaco")
        with open(src, "wb") as f:
            f.write(obj)
        proc = subprocess.run([lld, "-shared", src, "-o", out], capture_output=True, text=True)
        if proc.returncode != 0:
            raise HipError("ld.lld: %s" % ((proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[0]))
        with open(out, "rb") as f:
            return f.read()


class HipDevice:
    """One AMD device, and the device memory mapped at fixed addresses (``cuda.CudaDevice``'s
    methods, for cudareplay.Session)."""

    def __init__(self, ordinal=0):
        self.cu = hip = driver()  # (named as CudaDevice's: what Session reads the API from)
        _check(hip, hip.hipSetDevice(ordinal), "hipSetDevice")
        self.device = ordinal
        props = hip.hipDeviceProp_t()
        _check(hip, hip.hipGetDeviceProperties(props, ordinal), "hipGetDeviceProperties")
        name = props.gcnArchName
        name = name.decode() if isinstance(name, bytes) else str(name)
        self.arch = name.split(":")[0]  # gfx90a:sramecc+:xnack-: the target, its features cut
        self.mappings: List[Mapping] = []

    def _prop(self):
        hip = self.cu
        prop = hip.hipMemAllocationProp()
        prop.type = hip.hipMemAllocationType.hipMemAllocationTypePinned
        prop.location.type = hip.hipMemLocationType.hipMemLocationTypeDevice
        prop.location.id = self.device
        return prop

    def granularity(self):
        hip = self.cu
        flag = hip.hipMemAllocationGranularity_flags.hipMemAllocationGranularityMinimum
        return int(
            _check(hip, hip.hipMemGetAllocationGranularity(self._prop(), flag), "hipMemGetAllocationGranularity")
        )

    def map_at(self, addr, size):
        """``size`` bytes of device memory at device address ``addr`` (rounded out to the
        allocation granularity); HipError when the address is taken."""
        hip = self.cu
        g = self.granularity()
        base = addr - addr % g
        length = -(-(addr + size - base) // g) * g
        ptr = _check(hip, hip.hipMemAddressReserve(length, 0, base, 0), "hipMemAddressReserve")
        if int(ptr) != base:
            hip.hipMemAddressFree(ptr, length)
            raise HipError("device address 0x%x is taken: the runtime offered 0x%x" % (base, int(ptr)))
        handle = _check(hip, hip.hipMemCreate(length, self._prop(), 0), "hipMemCreate")
        _check(hip, hip.hipMemMap(ptr, length, 0, handle, 0), "hipMemMap")
        access = hip.hipMemAccessDesc()
        access.location.type = hip.hipMemLocationType.hipMemLocationTypeDevice
        access.location.id = self.device
        access.flags = hip.hipMemAccessFlags.hipMemAccessFlagsProtReadWrite
        _check(hip, hip.hipMemSetAccess(ptr, length, access, 1), "hipMemSetAccess")
        self.mappings.append(Mapping(base, length, handle))
        return addr

    def write(self, addr, data):
        _check(self.cu, self.cu.hipMemcpyHtoD(addr, bytes(data), len(data)), "hipMemcpyHtoD")

    def read(self, addr, size):
        buf = bytearray(size)
        _check(self.cu, self.cu.hipMemcpyDtoH(buf, addr, size), "hipMemcpyDtoH")
        return bytes(buf)

    def module(self, image):
        """A code object (bytes: codegen's relocatable one, linked here) loaded."""
        if image[16:18] == b"\x01\x00":  # ELF e_type ET_REL: not loadable until linked
            image = linked_code_object(image)
        return _check(self.cu, self.cu.hipModuleLoadData(image), "hipModuleLoadData")

    def function(self, image, name, module=None):
        hip = self.cu
        module = module if module is not None else self.module(image)
        return _check(hip, hip.hipModuleGetFunction(module, name.encode()), "hipModuleGetFunction %s" % name)

    def global_of(self, module, name):
        """(device address, bytes) of a ``__device__`` / ``__constant__`` variable of a loaded module."""
        hip = self.cu
        dptr, size = _check(hip, hip.hipModuleGetGlobal(module, name.encode()), "hipModuleGetGlobal %s" % name)
        return int(dptr), int(size)

    def launch_params(self, fn, grid, block, shared, params):
        """One launch on the null stream; ``params``: the address of a ``void *`` array (kernelParams)."""
        hip = self.cu
        _check(hip, hip.hipModuleLaunchKernel(fn, *grid, *block, shared, None, params, None), "hipModuleLaunchKernel")

    def time_call(self, launch, repeat=1):
        """Seconds of each of ``repeat`` calls of ``launch()``, from HIP events around each."""
        hip = self.cu
        start = _check(hip, hip.hipEventCreate(), "hipEventCreate")
        stop = _check(hip, hip.hipEventCreate(), "hipEventCreate")
        times = []
        for _ in range(repeat):
            _check(hip, hip.hipEventRecord(start, None), "hipEventRecord")
            launch()
            _check(hip, hip.hipEventRecord(stop, None), "hipEventRecord")
            _check(hip, hip.hipEventSynchronize(stop), "hipEventSynchronize")
            times.append(float(_check(hip, hip.hipEventElapsedTime(start, stop), "hipEventElapsedTime")) / 1e3)
        hip.hipEventDestroy(start)
        hip.hipEventDestroy(stop)
        return times

    def synchronize(self):
        _check(self.cu, self.cu.hipDeviceSynchronize(), "hipDeviceSynchronize")

    def close(self):
        hip = self.cu
        for m in reversed(self.mappings):
            hip.hipMemUnmap(m.addr, m.size)
            hip.hipMemRelease(m.handle)
            hip.hipMemAddressFree(m.addr, m.size)
        self.mappings = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
