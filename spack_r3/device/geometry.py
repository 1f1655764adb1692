"""Launch geometry of a recorded CUDA launch in the search space: the block's threads
(``thread_limit``) and, for a grid-stride kernel, the grid's blocks (``num_teams``).

A kernel that reads the grid's size (``gridDim``: NVPTX's ``nctaid``) strides over its work
and computes the same for any grid: its grid is searched. Any other kernel covers its
work with grid x block threads, so a new block size keeps that many threads
(``launch_grid``: the grid rounded up) and its grid is not searched. Block sizes are
powers of two from a warp up to the kernel's launch bounds (``__launch_bounds__``:
``maxntidx`` in its ``nvvm.annotations``, ``nvvm.maxntid`` as an attribute), else 1024.
The first choice of each, None, is the recorded value (the baseline's). Every candidate
is screened by ptxas -v and its occupancy (``hook.Screener``: on the recorded arch, and
on each ``--gpu`` target) before any GPU time. The register cap (``max_registers``:
``.maxnreg`` in the PTX, ``-maxrregcount`` for ptxas) is searched too: as built, or
32, 64, 128, 255 within what the recorded arch allows a thread; fewer registers can
mean more resident warps, or spills (which the screen rejects).
"""

import os
import re

from ..iredit import function_span, global_ref, string_attributes

WARP = 32
MOST_THREADS = 1024
GRID_FACTORS = (0.25, 0.5, 1, 2, 4)
REGISTER_CAPS = (32, 64, 128, 255)


def grid_stride(ir_text, kernel):
    """Whether ``kernel``'s definition reads the grid's size."""
    body = _body(ir_text, kernel)
    return bool(re.search(r"@llvm\.nvvm\.read\.ptx\.sreg\.nctaid\.|@llvm\.amdgcn\.dispatch\.ptr|gridDim", body))


def launch_bound(ir_text, kernel):
    """The kernel's most threads a block (its launch bounds), or None."""
    m = re.search(r'!\{%s, !"maxntidx", i32 (\d+)' % re.escape("ptr " + global_ref(kernel)), ir_text)
    if m:
        return int(m.group(1))
    m = re.match(r"\d+", string_attributes(ir_text, kernel).get("nvvm.maxntid", ""))
    if m:
        return int(m.group(0))
    return None


def block_choices(bound=None):
    """Powers of two from a warp up to ``bound`` (None: 1024)."""
    most = min(bound or MOST_THREADS, MOST_THREADS)
    out, b = [], WARP
    while b <= most:
        out.append(b)
        b *= 2
    return tuple(out) or (most,)


def grid_choices(recorded):
    """The recorded grid scaled down and up (at least one block)."""
    return tuple(sorted({max(1, int(recorded * f)) for f in GRID_FACTORS}))


def register_caps(arch):
    """The register caps searched for a kernel recorded on ``arch``: REGISTER_CAPS up to
    what the arch allows a thread (255 where its limits are unknown)."""
    from ..errors import R3Error
    from .targets import parse_targets

    most = 255
    try:
        most = parse_targets(arch)[0].limits.max_regs_per_thread if arch else most
    except R3Error:
        pass
    return tuple(c for c in REGISTER_CAPS if c <= most)


def params(capture, ir_text):
    """space.Param of the launch geometry searched for a captured CUDA launch; each one's
    first choice None: as recorded (the baseline's)."""
    from ..search.space import Param

    launch = capture.launch or {}
    block = (launch.get("block_dim") or [launch.get("block") or 1])[0]
    out = [
        Param(
            "thread_limit",
            "categorical",
            "threads a block, x (default: as recorded, %d)" % block,
            choices=(None,) + block_choices(launch_bound(ir_text, capture.kernel)),
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
    a CUDA launch's, read from its captured device module; none for any other backend."""
    if (capture.launch or {}).get("backend") != "cuda":
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
