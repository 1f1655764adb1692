"""Launch geometry, a kernel's resources on one target, and theoretical occupancy.

Theoretical occupancy: the resident warps (waves) a launch of ``threads`` per block can
keep on one SM (CU), over the most it can hold; the formulas are the CUDA Occupancy
Calculator's (NVIDIA) and LLVM AMDGPUBaseInfo's (AMD), with the limits of
``targets.LIMITS``. A launch that no SM/CU can hold (a block over the kernel's launch
bounds, more registers or shared memory than one block may have) is not launchable,
with the reason.
"""

from dataclasses import asdict, dataclass
from typing import Optional

from .targets import NVIDIA


def _up(value, unit):
    return -(-value // unit) * unit


def _ceil(a, b):
    return -(-a // b)


@dataclass
class Geometry:
    """How a kernel is launched: threads a block (OpenMP: thread_limit; HIP: workgroup
    size), dynamic shared memory (bytes), and a register cap (``-maxrregcount`` for
    ptxas, ``amdgpu-num-vgpr`` for AMDGPU; None: the compiler's choice)."""

    threads: Optional[int] = None  # None: the kernel's launch bounds, at most DEFAULT_THREADS
    dynamic_shared: int = 0
    max_registers: Optional[int] = None

    def to_json(self):
        return asdict(self)

    def threads_for(self, res):
        """Threads a block at this geometry for a kernel of resources ``res``."""
        if self.threads is not None:
            return self.threads
        return min(DEFAULT_THREADS, res.max_threads or DEFAULT_THREADS)

    @classmethod
    def from_launch(cls, launch, max_registers=None):
        """The geometry of a data.Launch (an OpenMP region's ``thread_limit``) or its JSON."""
        get = launch.get if isinstance(launch, dict) else (lambda k: getattr(launch, k, None))
        threads = get("thread_limit") or get("block") or None
        return cls(
            threads=int(threads) if threads else None,
            dynamic_shared=int(get("dynamic_shared") or 0),
            max_registers=max_registers or get("max_registers") or None,
        )


DEFAULT_THREADS = 256  # a block when nothing says: LLVM's OpenMP default on AMDGPU, a common CUDA choice


@dataclass
class Resources:
    """What the code of one kernel uses on one target, as its tools report it."""

    kernel: str
    registers: int = 0  # NVIDIA: registers a thread; AMD: VGPRs (arch + AGPRs)
    sgprs: int = 0  # AMD
    agprs: int = 0  # AMD (gfx90a+)
    spill_stores: int = 0  # bytes (NVIDIA) or spilled registers (AMD: VGPRs + SGPRs)
    spill_loads: int = 0
    stack: int = 0  # bytes a thread: stack frame (NVIDIA) or private segment (AMD)
    shared: int = 0  # static shared memory / LDS a block (bytes)
    max_threads: Optional[int] = None  # launch bounds (.maxntid, max_flat_workgroup_size)
    wave_size: Optional[int] = None
    dynamic_stack: bool = False

    @property
    def spills(self):
        return self.spill_stores > 0 or self.spill_loads > 0

    def to_json(self):
        d = asdict(self)
        d["spills"] = self.spills
        return d


@dataclass
class Occupancy:
    launchable: bool
    blocks: int = 0  # resident blocks (workgroups) per SM (CU)
    warps: int = 0  # resident warps (waves) per SM (CU)
    max_warps: int = 0
    limiter: str = ""  # what bounds the blocks: warps, blocks, registers, sgprs, shared
    reason: str = ""  # why not launchable

    @property
    def fraction(self):
        return self.warps / self.max_warps if self.max_warps else 0.0

    def to_json(self):
        d = asdict(self)
        d["fraction"] = round(self.fraction, 4)
        return d


def occupancy(res, target, geometry):
    """Theoretical occupancy of ``res`` (Resources) on ``target`` (GpuTarget) launched at
    ``geometry`` (Geometry)."""
    lim = target.limits
    threads = geometry.threads_for(res)
    bound = min(lim.max_threads_per_block, res.max_threads or lim.max_threads_per_block)
    if threads < 1:
        return Occupancy(False, reason="a block of %d threads" % threads)
    if threads > bound:
        what = "the kernel's launch bounds" if bound < lim.max_threads_per_block else target.name
        return Occupancy(False, reason="a block of %d threads is over %s (%d)" % (threads, what, bound))
    if target.vendor == NVIDIA:
        return _nvidia(res, lim, geometry)
    return _amd(res, lim, geometry)


def _pick(limits):
    """(value, name) of the smallest of the named limits (the first on a tie)."""
    name = min(limits, key=lambda k: limits[k])
    return limits[name], name


def _nvidia(res, lim, g):
    threads = g.threads_for(res)
    warps = _ceil(threads, lim.warp_size)
    limits = {"warps": lim.max_warps_per_sm // warps, "blocks": lim.max_blocks_per_sm}
    if res.registers:
        per_warp = _up(res.registers * lim.warp_size, lim.reg_alloc_unit)
        if per_warp * warps > lim.regs_per_sm:
            return Occupancy(
                False,
                reason="%d registers x %d threads need more than the %d registers of an SM"
                % (res.registers, threads, lim.regs_per_sm),
            )
        limits["registers"] = (lim.regs_per_sm // per_warp) // warps
    shared = res.shared + g.dynamic_shared
    if shared > lim.smem_per_block:
        return Occupancy(False, reason="%d bytes of shared memory a block, at most %d" % (shared, lim.smem_per_block))
    alloc = _up(shared + lim.smem_reserved_per_block, lim.smem_alloc_unit)
    if alloc:
        limits["shared"] = lim.smem_per_sm // alloc
    blocks, limiter = _pick(limits)
    return Occupancy(
        blocks > 0,
        blocks,
        blocks * warps,
        lim.max_warps_per_sm,
        limiter,
        "" if blocks else "no SM can hold a block (%s)" % limiter,
    )


def _amd(res, lim, g):
    wave = res.wave_size or lim.warp_size
    waves = _ceil(g.threads_for(res), wave)  # waves a workgroup
    slots = {"waves": lim.max_waves_per_simd}
    vgprs = max(res.registers, 1)
    if vgprs > lim.vgprs_per_simd:
        return Occupancy(False, reason="%d VGPRs, a SIMD has %d" % (vgprs, lim.vgprs_per_simd))
    slots["registers"] = lim.vgprs_per_simd // _up(vgprs, lim.vgpr_alloc_unit)
    # a workgroup's waves are resident together, spread over the CU's SIMDs
    per_simd = _ceil(waves, lim.simds_per_cu)
    if per_simd * _up(vgprs, lim.vgpr_alloc_unit) > lim.vgprs_per_simd:
        return Occupancy(
            False,
            reason="%d VGPRs x %d waves a SIMD need more than the %d VGPRs of a SIMD"
            % (vgprs, per_simd, lim.vgprs_per_simd),
        )
    if lim.sgprs_per_simd and res.sgprs:
        slots["sgprs"] = lim.sgprs_per_simd // _up(res.sgprs, lim.sgpr_alloc_unit)
    waves_per_simd, limiter = _pick(slots)
    # a workgroup's waves spread over the CU's SIMDs
    limits = {
        limiter: waves_per_simd * lim.simds_per_cu // waves,
        # LLVM getMaxWorkGroupsPerCU: 40 single-wave workgroups, else 16 (barriers)
        "blocks": 40 if waves == 1 else min(40 // waves, 16),
    }
    shared = res.shared + g.dynamic_shared
    if shared > lim.lds_per_workgroup:
        return Occupancy(False, reason="%d bytes of LDS a workgroup, at most %d" % (shared, lim.lds_per_workgroup))
    if shared:
        limits["shared"] = lim.lds_per_cu // shared
    blocks, limiter = _pick(limits)
    max_waves = lim.max_waves_per_simd * lim.simds_per_cu
    return Occupancy(
        blocks > 0,
        blocks,
        min(blocks * waves, max_waves),
        max_waves,
        limiter,
        "" if blocks else "no CU can hold a workgroup of %d waves (%s)" % (waves, limiter),
    )
