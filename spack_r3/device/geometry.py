"""Launch geometry of a recorded CUDA launch in the search space: the block's threads
(``thread_limit``) and, for a grid-stride kernel, the grid's blocks (``num_teams``).

A kernel that reads the grid's size (``gridDim``: NVPTX's ``nctaid``) strides over its work
and computes the same for any grid: its grid is searched. Any other kernel covers its
work with grid x block threads, so a new block size keeps that many threads
(``launch_grid``: the grid rounded up) and its grid is not searched. Block sizes are
powers of two from a warp up to the kernel's launch bounds (``__launch_bounds__``:
``maxntidx`` in its ``nvvm.annotations``, ``nvvm.maxntid`` as an attribute), else 1024.
Every candidate is screened by ptxas -v (``hook.Screener``) before any GPU time.
"""

import re

from ..iredit import function_span, global_ref, string_attributes

WARP = 32
MOST_THREADS = 1024
GRID_FACTORS = (0.25, 0.5, 1, 2, 4)


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


def params(capture, ir_text):
    """space.Param of the launch geometry searched for a captured CUDA launch."""
    from ..search.space import Param

    launch = capture.launch or {}
    block = (launch.get("block_dim") or [launch.get("block") or 1])[0]
    out = [
        Param(
            "thread_limit",
            "categorical",
            "threads a block, x (recorded: %d)" % block,
            choices=block_choices(launch_bound(ir_text, capture.kernel)),
        )
    ]
    if grid_stride(ir_text, capture.kernel):
        grid = (launch.get("grid") or [1])[0]
        out.append(
            Param(
                "num_teams",
                "categorical",
                "blocks of the grid, x, of a grid-stride kernel (recorded: %d)" % grid,
                choices=grid_choices(grid),
            )
        )
    return out


def launch_grid(recorded_grid, recorded_block, block, stride):
    """The grid's x for a block of ``block`` threads: a grid-stride kernel's as recorded, any
    other's rounded up to cover the recorded grid x block threads."""
    if stride or block == recorded_block:
        return recorded_grid
    return -(-recorded_grid * recorded_block // block)


def _body(text, kernel):
    span = function_span(text, kernel)
    return text[span[0] : span[1]] if span else ""
