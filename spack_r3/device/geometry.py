"""Launch geometry of a recorded CUDA or HIP launch in the search space: the block's
threads (``thread_limit``) and, for a grid-stride kernel, the grid's blocks (``num_teams``).

A kernel that reads the grid's size strides over its work and computes the same for any
grid: its grid is searched. CUDA: ``gridDim`` (NVPTX's ``nctaid``). HIP, in the device IR
clang-19 writes before any pass: HIP's headers read ``gridDim`` through
``__HIP_Coordinates<__HIP_GridDim>`` and ROCm's ``__ockl_get_num_groups`` (``gridDim.x *
blockDim.x`` through ``__ockl_get_global_size``); clang's ``__builtin_amdgcn_grid_size_x``
loads the dispatch packet's grid size (offsets 12, 16, 20 of ``llvm.amdgcn.dispatch.ptr``;
the workgroup size is at 4, 6, 8 there, or in the implicit arguments). Any other kernel
covers its work with grid x block threads, so a new block size keeps that many threads
(``launch_grid``: the grid rounded up) and its grid is not searched. Block sizes are
powers of two from a warp (a wavefront: 64 on gfx9, 32 on gfx1100, as ``targets.LIMITS``
says for the recorded arch) up to the kernel's launch bounds (CUDA's ``__launch_bounds__``:
``maxntidx`` in its ``nvvm.annotations``, ``nvvm.maxntid`` as an attribute; HIP's:
``amdgpu-flat-work-group-size``, 1,1024 where the source says none), else 1024. The
first choice of each, None, is the recorded value (the baseline's). Every candidate is
screened by ptxas -v or the code object's metadata and its occupancy
(``hook.Screener``: on the recorded arch, and on each ``--gpu`` target) before any GPU
time. The register cap (``max_registers``: ``.maxnreg`` in the PTX, ``-maxrregcount``
for ptxas; VGPRs a lane for AMDGPU, ``amdgpu-num-vgpr``) is searched too: as built, or
32, 64, 128, 255 (AMD: 256) within what the recorded arch allows a thread; fewer
registers can mean more resident warps, or spills (which the screen rejects).
"""

import os
import re

from ..iredit import function_span, global_ref, string_attributes

WARP = 32
MOST_THREADS = 1024
GRID_FACTORS = (0.25, 0.5, 1, 2, 4)
REGISTER_CAPS = (32, 64, 128, 255)
VGPR_CAPS = (32, 64, 128, 256)  # AMDGPU: VGPRs a lane, allocated in granules of 8 (gfx9)
GEOMETRY_BACKENDS = ("cuda", "hip")

# What reads the grid's size in a kernel's device IR (module docstring)
_GRID_READS = re.compile(
    r"@llvm\.nvvm\.read\.ptx\.sreg\.nctaid\.|gridDim|__HIP_GridDim|@__ockl_get_num_groups|@__ockl_get_global_size"
)
_DISPATCH_PTR = re.compile(r"(%[\w.]+) = call [^\n]*@llvm\.amdgcn\.dispatch\.ptr\(\)")
GRID_SIZE_OFFSETS = (12, 16, 20)  # hsa_kernel_dispatch_packet_t's grid_size_x, y, z


def grid_stride(ir_text, kernel):
    """Whether ``kernel``'s definition reads the grid's size."""
    body = _body(ir_text, kernel)
    if _GRID_READS.search(body):
        return True
    for m in _DISPATCH_PTR.finditer(body):
        gep = r"getelementptr (?:inbounds )?i8, ptr addrspace\(4\) %s, i(?:32|64) (\d+)\b" % re.escape(m.group(1))
        if any(int(g.group(1)) in GRID_SIZE_OFFSETS for g in re.finditer(gep, body)):
            return True
    return False


def launch_bound(ir_text, kernel):
    """The kernel's most threads a block (its launch bounds), or None."""
    m = re.search(r'!\{%s, !"maxntidx", i32 (\d+)' % re.escape("ptr " + global_ref(kernel)), ir_text)
    if m:
        return int(m.group(1))
    attributes = string_attributes(ir_text, kernel)
    m = re.match(r"\d+", attributes.get("nvvm.maxntid", ""))
    if m:
        return int(m.group(0))
    # AMDGPU: "min,max" (HIP's __launch_bounds__(N) is amdgpu_flat_work_group_size(1, N))
    m = re.match(r"\d+,(\d+)$", attributes.get("amdgpu-flat-work-group-size", ""))
    if m:
        return int(m.group(1))
    return None


def block_choices(bound=None, warp=WARP):
    """Powers of two from a warp (``warp`` threads) up to ``bound`` (None: 1024)."""
    most = min(bound or MOST_THREADS, MOST_THREADS)
    out, b = [], warp
    while b <= most:
        out.append(b)
        b *= 2
    return tuple(out) or (most,)


def grid_choices(recorded):
    """The recorded grid scaled down and up (at least one block)."""
    return tuple(sorted({max(1, int(recorded * f)) for f in GRID_FACTORS}))


def recorded_target(arch):
    """The GpuTarget of a recorded arch, or None where the limits table does not know it."""
    from ..errors import R3Error
    from .targets import parse_targets

    try:
        return parse_targets(arch)[0] if arch else None
    except R3Error:
        return None


def register_caps(arch):
    """The register caps searched for a kernel recorded on ``arch``: REGISTER_CAPS (an AMD
    arch: VGPR_CAPS) up to what the arch allows a thread (all of them where its limits are
    unknown)."""
    from .targets import AMD

    target = recorded_target(arch)
    if target is None:
        return VGPR_CAPS if str(arch or "").startswith("gfx") else REGISTER_CAPS
    caps = VGPR_CAPS if target.vendor == AMD else REGISTER_CAPS
    return tuple(c for c in caps if c <= target.limits.max_regs_per_thread)


def wave_size(arch):
    """Threads a warp (wavefront) on ``arch`` (WARP where the limits table does not know it)."""
    target = recorded_target(arch)
    return target.limits.warp_size if target else WARP


def params(capture, ir_text):
    """space.Param of the launch geometry searched for a captured CUDA or HIP launch; each
    one's first choice None: as recorded (the baseline's)."""
    from ..search.space import Param

    launch = capture.launch or {}
    block = (launch.get("block_dim") or [launch.get("block") or 1])[0]
    out = [
        Param(
            "thread_limit",
            "categorical",
            "threads a block, x (default: as recorded, %d)" % block,
            choices=(None,) + block_choices(launch_bound(ir_text, capture.kernel), wave_size(launch.get("arch"))),
        )
    ]
    if grid_stride(ir_text, capture.kernel):
        grid = (launch.get("grid") or [1])[0]
        out.append(
            Param(
                "num_teams",
                "categorical",
                "blocks of the grid, x, of a grid-stride kernel (default: as recorded, %d)" % grid,
                choices=(None,) + grid_choices(grid),
            )
        )
    out.append(
        Param(
            "max_registers",
            "categorical",
            "registers a thread at most (.maxnreg; default: as the compiler chooses)",
            choices=(None,) + register_caps(launch.get("arch")),
        )
    )
    return out


def space_params(capture, capture_dir):
    """The geometry ``params`` a search adds for a capture (search.space.KernelFacts.geometry):
    a CUDA or HIP launch's, read from its captured device module; none for any other backend."""
    if (capture.launch or {}).get("backend") not in GEOMETRY_BACKENDS:
        return ()
    import llvmlite.binding as llvm

    with open(os.path.join(capture_dir, "module.bc"), "rb") as f:
        text = str(llvm.parse_bitcode(f.read()))
    return tuple(params(capture, text))


def launch_grid(recorded_grid, recorded_block, block, stride):
    """The grid's x for a block of ``block`` threads: a grid-stride kernel's as recorded, any
    other's rounded up to cover the recorded grid x block threads."""
    if stride or block == recorded_block:
        return recorded_grid
    return -(-recorded_grid * recorded_block // block)


def _body(text, kernel):
    span = function_span(text, kernel)
    return text[span[0] : span[1]] if span else ""
