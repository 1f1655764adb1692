"""Keep tuned device kernels working on another GPU, without that GPU: for each tuned
device kernel of the workspace, whether its tuned variant still compiles for the target
(--gpu), its registers, spills, shared memory and theoretical occupancy there, and
which kernels need tuning again (they spill, cannot launch at their geometry, do not
compile, or lose occupancy against --from).

With --source FILE it works on one source file and its kernels instead of a workspace:
the resource table of each kernel for each target, before any device workspace exists.
"""

import json
import os
import shlex
import tempfile

from ..errors import R3Error
from ..device.table import render, rows, short
from .common import add_json, check_most

description = "report tuned device kernels' resources and occupancy on other GPUs (no GPU needed)"


def setup_parser(subparser):
    subparser.add_argument(
        "--gpu",
        required=True,
        metavar="TARGETS",
        help="GPU targets, comma-separated: sm_70, sm_75, sm_80, sm_86, sm_89, sm_90, gfx90a, gfx942, gfx1100",
    )
    subparser.add_argument(
        "--from",
        dest="from_gpu",
        default=None,
        metavar="TARGET",
        help="the GPU the workspace was tuned for: a kernel whose occupancy drops against it needs tuning again",
    )
    subparser.add_argument(
        "--source",
        default=None,
        metavar="FILE",
        help="a source file with device code (OpenMP target regions, CUDA or HIP kernels) "
        "instead of the workspace's tuned kernels",
    )
    subparser.add_argument(
        "--compile",
        default=None,
        metavar="COMMAND",
        help="with --source: the unit's compile command (flags such as -I, -D, -nocudainc; default: clang -O2)",
    )
    subparser.add_argument(
        "--kernel",
        default=None,
        metavar="NAME",
        help="only this kernel (its symbol, C++ name, or the function an OpenMP region is in)",
    )
    subparser.add_argument(
        "--pipeline",
        default=None,
        metavar="SPEC",
        help="with --source: the pipeline to generate code with (default O3)",
    )
    subparser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="threads a block (default: the recorded thread_limit, else the kernel's launch bounds up to 256)",
    )
    subparser.add_argument(
        "--max-registers",
        type=int,
        default=None,
        metavar="N",
        help="cap registers a thread (ptxas -maxrregcount, AMDGPU amdgpu-num-vgpr)",
    )
    add_json(subparser)


def retarget(args):
    from ..device.geometry import MOST_THREADS
    from ..device.occupancy import Geometry
    from ..device.targets import gpu_target, parse_targets

    targets = parse_targets(args.gpu)
    origin = gpu_target(args.from_gpu) if args.from_gpu else None
    if args.threads is not None and args.threads < 1:
        raise R3Error("--threads must be at least 1")
    check_most(args, {"threads": (MOST_THREADS, " (threads a GPU block may have)")})
    if args.max_registers is not None and not 16 <= args.max_registers <= 255:
        raise R3Error("--max-registers must be in 16..255")
    if args.source:
        return _source_mode(args, targets, origin, Geometry(args.threads, 0, args.max_registers))
    if args.compile or args.pipeline:
        raise R3Error("--compile and --pipeline go with --source (a workspace's kernels use their own)")
    return _workspace_mode(args, targets, origin)


def _source_mode(args, targets, origin, geometry):
    from ..device.screen import DeviceUnit, screen
    from ..compile.pipeline import parse

    if not os.path.isfile(args.source):
        raise R3Error("--source %s: no such file" % args.source)
    command = shlex.split(args.compile) if args.compile else []
    if command and command[0].startswith("-"):
        command = ["clang"] + command
    unit = DeviceUnit(args.source, tuple(command))
    pipeline = parse(args.pipeline or "O3")
    verdicts = screen(unit, pipeline, geometry, targets, args.kernel)
    baseline = _baseline(unit, pipeline, geometry, origin, args.kernel)
    if args.json:
        print(json.dumps({"source": args.source, "verdicts": [v.to_json() for v in verdicts]}, indent=1))
    else:
        print(render(rows(verdicts, baseline=baseline)))
    return 0


def _baseline(unit, pipeline, geometry, origin, kernel):
    """{kernel: occupancy fraction} on the GPU tuned for (--from), or None."""
    if origin is None:
        return None
    from ..device.screen import screen

    return {
        v.kernel: v.occupancy.fraction
        for v in screen(unit, pipeline, geometry, [origin], kernel)
        if v.ok and v.occupancy
    }


def _workspace_mode(args, targets, origin):
    from ..capture import list_captures
    from ..data import Variant
    from ..device.hook import geometry_of, is_device, tuned_unit
    from ..device.screen import screen
    from ..search.results import load_result
    from ..workspace import Workspace

    ws = Workspace(args.workspace)
    captures = [c for c in list_captures(ws) if not args.kernel or c.kernel == args.kernel]
    if not captures:
        raise R3Error("no captures in %s%s" % (ws.root, " for kernel %s" % args.kernel if args.kernel else ""))
    device = [c for c in captures if is_device(c)]
    host = sorted({c.kernel for c in captures} - {c.kernel for c in device})
    if host:
        print("not device kernels (host captures; retarget is for device kernels): %s" % ", ".join(host))
    table_rows, out, seen = [], [], set()
    for c in device:
        if c.kernel in seen:
            continue
        seen.add(c.kernel)
        result = load_result(ws, c.id, strict=True)
        variant = result.variant if result else Variant()
        with tempfile.TemporaryDirectory(prefix="r3-retarget-") as tmp:
            unit = tuned_unit(c, ws.capture_dir(c.id), variant, tmp)
            geometry = geometry_of(c, variant, args.max_registers)
            if args.threads:
                geometry.threads = args.threads
            verdicts = screen(unit, variant.pipeline, geometry, targets, c.kernel)
            baseline = _baseline(unit, variant.pipeline, geometry, origin, c.kernel)
        label = short(c.kernel) + ("" if result else " (untuned)")
        table_rows += rows(verdicts, label, baseline and {v.kernel: baseline.get(v.kernel) for v in verdicts})
        out.append(
            {"kernel": c.kernel, "capture": c.id, "tuned": bool(result), "verdicts": [v.to_json() for v in verdicts]}
        )
    if args.json:
        print(json.dumps({"workspace": ws.root, "kernels": out, "host_kernels": host}, indent=1))
    elif table_rows:
        print(render(table_rows))
    elif not host:
        print("no device kernels in %s" % ws.root)
    return 0
