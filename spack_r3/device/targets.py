"""GPU targets by name, their limits, and the Spack variant each one keys.

The limits are the figures theoretical occupancy needs. Sources:
- NVIDIA: CUDA C++ Programming Guide, "Compute Capabilities", table "Technical
  Specifications per Compute Capability" (registers per SM 64K, at most 255 a thread,
  1024 threads a block, resident warps and blocks per SM, shared memory per SM and per
  block), and the CUDA Occupancy Calculator / cuda_occupancy.h (register allocation unit
  256 per warp; shared memory allocation unit 256 bytes on 7.x, 128 on 8.x/9.0; 1 KiB of
  shared memory reserved by the system per block from 8.0 on).
- AMD: LLVM's AMDGPUBaseInfo.cpp (IsaInfo: getTotalNumVGPRs, getVGPRAllocGranule,
  getMaxWavesPerEU, getEUsPerCU, getMaxWorkGroupsPerCU, getTotalNumSGPRs 800 and
  getSGPRAllocGranule 16 before gfx10, getAddressableLocalMemorySize 64 KiB,
  getAddressableNumVGPRs), which the
  compiler itself uses to bound registers for a workgroup size; gfx90a/gfx942 are
  wave64 CDNA2/3 with a unified 512-entry VGPR+AGPR file, gfx1100 is wave32 RDNA3 with
  1536 VGPRs a SIMD (1.5x file) in CU mode (2 SIMDs).
"""

from dataclasses import dataclass
from typing import Optional

from ..errors import R3Error

NVIDIA, AMD = "nvidia", "amd"
TRIPLES = {NVIDIA: "nvptx64-nvidia-cuda", AMD: "amdgcn-amd-amdhsa"}


@dataclass(frozen=True)
class Limits:
    """Per-SM (NVIDIA) or per-CU (AMD) limits of one architecture."""

    warp_size: int
    max_threads_per_block: int = 1024
    # NVIDIA
    regs_per_sm: int = 65536
    reg_alloc_unit: int = 256  # registers, allocated per warp
    max_regs_per_thread: int = 255  # AMD: VGPRs a lane a wave may address (with AGPRs where unified)
    max_warps_per_sm: int = 0
    max_blocks_per_sm: int = 0
    smem_per_sm: int = 0  # bytes
    smem_per_block: int = 0  # bytes a block may use (opt-in maximum)
    smem_alloc_unit: int = 128
    smem_reserved_per_block: int = 0
    # AMD
    simds_per_cu: int = 4
    vgprs_per_simd: int = 0  # per lane
    vgpr_alloc_unit: int = 0
    sgprs_per_simd: int = 0  # 0: SGPRs do not limit waves (gfx10+)
    sgpr_alloc_unit: int = 16
    # VGPRs and AGPRs share one file (gfx90a, gfx942): LLVM reads an amdgpu-num-vgpr of N
    # as 2N of that file (GCNSubtarget::getMaxNumVGPRs), so a cap is passed halved
    unified_vgprs: bool = False
    max_waves_per_simd: int = 0
    lds_per_cu: int = 65536
    lds_per_workgroup: int = 65536


KIB = 1024


def _sm(warps, blocks, smem_kib, block_kib, alloc_unit, reserved):
    """An NVIDIA row: resident warps and blocks an SM, shared memory an SM and a block (KiB),
    its allocation unit and what the system reserves a block (bytes)."""
    return Limits(
        32,
        max_warps_per_sm=warps,
        max_blocks_per_sm=blocks,
        smem_per_sm=smem_kib * KIB,
        smem_per_block=block_kib * KIB,
        smem_alloc_unit=alloc_unit,
        smem_reserved_per_block=reserved,
    )


def _gfx(wave, simds, vgprs, vgpr_unit, sgprs, waves, wave_vgprs, unified):
    """An AMD row: wave size, SIMDs a CU, VGPRs a SIMD lane and their allocation unit, SGPRs
    a SIMD (0: they do not limit waves), waves a SIMD, VGPRs a wave may address, whether
    VGPRs and AGPRs share one file."""
    return Limits(
        wave,
        max_regs_per_thread=wave_vgprs,
        simds_per_cu=simds,
        vgprs_per_simd=vgprs,
        vgpr_alloc_unit=vgpr_unit,
        sgprs_per_simd=sgprs,
        max_waves_per_simd=waves,
        unified_vgprs=unified,
    )


LIMITS = {
    #              warps blocks smem/SM smem/block alloc reserved
    "sm_70": _sm(64, 32, 96, 96, 256, 0),
    "sm_75": _sm(32, 16, 64, 64, 256, 0),
    "sm_80": _sm(64, 32, 164, 163, 128, KIB),
    "sm_86": _sm(48, 16, 100, 99, 128, KIB),
    "sm_89": _sm(48, 24, 100, 99, 128, KIB),
    "sm_90": _sm(64, 32, 228, 227, 128, KIB),
    #                wave simds vgprs unit sgprs waves a-wave unified
    "gfx90a": _gfx(64, 4, 512, 8, 800, 8, 512, True),
    "gfx942": _gfx(64, 4, 512, 8, 800, 8, 512, True),
    "gfx1100": _gfx(32, 2, 1536, 24, 0, 16, 256, False),
}


@dataclass(frozen=True)
class GpuTarget:
    name: str  # sm_80, gfx942

    @property
    def vendor(self):
        return NVIDIA if self.name.startswith("sm_") else AMD

    @property
    def triple(self):
        return TRIPLES[self.vendor]

    @property
    def limits(self) -> Limits:
        return LIMITS[self.name]

    @property
    def spack_variant(self):
        """The Spack variant a tuned variant for this GPU is keyed to, beside the CPU
        microarchitecture (``target=``): Spack's CudaPackage ``cuda_arch=90``, ROCmPackage
        ``amdgpu_target=gfx942``."""
        if self.vendor == NVIDIA:
            return "cuda_arch=%s" % self.name[len("sm_") :]
        return "amdgpu_target=%s" % self.name

    def __str__(self):
        return self.name


def gpu_target(name):
    """The GpuTarget of ``name`` (sm_80, 80, gfx942, cuda_arch=90, amdgpu_target=gfx90a);
    R3Error with one line for a target the limits table does not know."""
    raw = (name or "").strip()
    text = raw.lower().split("=", 1)[-1] if raw.lower().startswith(("cuda_arch=", "amdgpu_target=")) else raw.lower()
    if text.isdigit():
        text = "sm_" + text
    if text not in LIMITS:
        raise R3Error("unknown GPU target '%s'; known: %s" % (raw, ", ".join(LIMITS)))
    return GpuTarget(text)


def parse_targets(text):
    """``sm_80,sm_90,gfx90a`` -> [GpuTarget]; R3Error with one line for an unknown or empty one."""
    names = [n for n in (text or "").split(",")]
    if not text or any(not n.strip() for n in names):
        raise R3Error(
            "--gpu %r: expected a comma-separated list of GPU targets (e.g. sm_80,sm_90,gfx942)" % (text or "")
        )
    out = []
    for n in names:
        t = gpu_target(n)
        if t not in out:
            out.append(t)
    return out


def variant_key(cpu_target: Optional[str], gpu: Optional[GpuTarget]):
    """The Spack spec keys of a device variant: the CPU microarchitecture and the GPU
    target, e.g. ``target=zen3 cuda_arch=90``."""
    parts = []
    if cpu_target:
        parts.append("target=%s" % cpu_target)
    if gpu is not None:
        parts.append(gpu.spack_variant)
    return " ".join(parts)
