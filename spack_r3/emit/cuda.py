"""r3-apply's build of a CUDA unit (``.cu``) or HIP unit (``.hip``): its kernels' code and
launches as replay measured them. This module is both vendors' build; what differs is a
``Vendor`` (CUDA's device image below, HIP's in emit/hip.py, each vendor's launch shim).

A planned CUDA unit carries up to three things of its winners (``PlannedKernel``):

- **a register cap** (``Launch.max_registers``): ptxas caps every kernel of a unit, so one
  cap a unit. With the build's own pipeline, clang compiles the unit as the build does and
  passes the cap to ptxas (``-Xcuda-ptxas --maxrregcount=N``).
- **a pipeline of r3's**: the unit's device image is built from the device code r3
  measured. The device side is compiled to IR before optimization by the command record
  kept it with (``record.cuda.device_compile_args``: the unit's own flags, one arch), which
  gives the recorded bitcode again where the source is the one recorded (its digest in the
  plan's facts is checked); that module is optimized and made PTX by ``device.codegen``
  exactly as replay does (every kernel of the module under the winner's pipeline, the cap
  as ``.maxnreg``), assembled by ptxas for the plan's GPU, and the cubin embedded as the
  unit's GPU binary (``--cuda-host-only -fcuda-include-gpubinary``; a device-only compile's
  output is the cubin itself). One device image a unit: kernels of one unit planned with
  different pipelines are refused.
- **a block and grid** (``thread_limit``, ``num_teams``): the launch is the application's
  own code, so it changes where it happens, at run time. Each planned kernel's geometry,
  and whether it reads ``gridDim`` (``device.geometry.grid_stride``, the rule replay
  applies to the same IR), is compiled into the unit's object as an entry of the section
  ``r3_launch_plan``; the launch shim ``record/runtime/r3launch.c``, which r3-apply links
  into each executable that links the shared CUDA runtime, finds the entries of every
  unit there and gives each planned launch its geometry (``launch_args``).

A HIP unit is built the same way (the same device IR, pipeline and plan section), with
HIP's parts: its device image is the offload bundle of the code object replay makes
(``emit/hip.py``; its VGPR cap, ``amdgpu-num-vgpr``, is in the code object, so a capped
unit is always built from r3's code object), and its launch shim ``r3hiplaunch.c``
(``r3launch.h`` named for HIP's runtime) is linked where an executable links
libamdhip64.so.

What cannot be built so is one line (r3-apply's ApplyError).
"""

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Callable, Tuple

from ..record.cuda import CUDA, HIP, device_compile_args, gpu_archs, links_amdhip, links_cudart
from ..record.flags import GPU_EXTS, unit_kind
from .hip import fat_binary

SECTION = "r3_launch_plan"  # r3launch.h's __start_/__stop_ symbols name it
_RUNTIME = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "record", "runtime")
SHIM_SOURCE = os.path.join(_RUNTIME, "r3launch.c")
HIP_SHIM_SOURCE = os.path.join(_RUNTIME, "r3hiplaunch.c")  # (both: r3launch.h)
_INCLUDE_BINARY = "-fcuda-include-gpubinary"


@dataclass(frozen=True)
class Vendor:
    """What the +r3 build of a CUDA unit and of a HIP unit do differently."""

    kind: str  # record.cuda's CUDA or HIP
    name: str  # in messages
    image: str  # a device image, in messages
    host_only: str  # the flag of a host-side compile
    device_only: Tuple[str, ...]  # the flags of a device-only compile (clang takes either for HIP)
    build_image: Callable  # (compiler, bitcode, arch, pipeline, cap, tmp, error) -> the image's path
    cap_in_image: bool  # a register cap needs r3's image (clang has no flag for it)
    links_runtime: Callable  # (link args) -> whether the link takes the shared runtime
    shim: str  # the launch shim's source


def _geometry(kernel):
    return kernel.launch.thread_limit or kernel.launch.num_teams


def unit_pipeline(unit, error, name="CUDA"):
    """The one pipeline of r3's the unit's device image is built with, or None (the build's)."""
    from ..compile.pipeline import format_spec

    specs = {format_spec(k.pipeline) if not k.pipeline.build_compiler else "as built" for k in unit.kernels}
    if len(specs) > 1:
        raise error(
            "the plan asks different pipelines of one %s unit (%s): its kernels share one device image"
            % (name, ", ".join(sorted(specs)))
        )
    mine = [k.pipeline for k in unit.kernels if not k.pipeline.build_compiler]
    return mine[0] if mine else None


def unit_cap(unit, error, name="CUDA"):
    """The unit's register cap (ptxas caps every kernel of it; HIP's is one code object's), or None."""
    caps = {k.launch.max_registers for k in unit.kernels}
    if len(caps) > 1:
        raise error("the plan asks different register caps of one %s unit (%s)" % (name, ", ".join(map(str, caps))))
    return caps.pop() if caps else None


def register_flags(unit, error):
    """clang's flags that give a CUDA unit built by its own pipeline its register cap."""
    cap = unit_cap(unit, error)
    return ["-Xcuda-ptxas", "--maxrregcount=%d" % cap] if cap else []


def build_unit(line, source, obj, unit, plan, run, error):
    """Build ``obj`` from the CUDA or HIP unit ``source`` as the plan's ``unit`` says.
    ``run(argv, what)`` runs a tool (raising ``error`` with one line)."""
    vendor = VENDORS[unit_kind(line.args) or GPU_EXTS.get(os.path.splitext(source)[1], CUDA)]
    _check_source(source, unit, plan, error)
    pipeline, cap = unit_pipeline(unit, error, vendor.name), unit_cap(unit, error, vendor.name)
    if pipeline is None and cap and vendor.cap_in_image:  # the build's pipeline as replay measured it
        pipeline = unit.kernels[0].pipeline
    device_only = any(a in vendor.device_only for a in line.args)
    geometry = [k for k in unit.kernels if _geometry(k)] if not device_only else []
    archs = gpu_archs(line.args, vendor.kind)
    arch = plan.gpu or archs[0]
    if pipeline is not None and archs != [arch]:
        raise error(
            "a %s unit built with r3's pipeline has %s, for %s; this compile is for %s"
            % (vendor.name, vendor.image, arch, ", ".join(archs))
        )
    with tempfile.TemporaryDirectory(prefix="r3-apply-cuda-") as tmp:
        bitcode = None
        if pipeline is not None or geometry:
            bitcode = _device_bitcode(line.compiler, line.args, source, vendor.kind, arch, unit, tmp, run)
            _check_kernels(source, unit, bitcode, error)
        if pipeline is None:
            built = obj if not geometry else os.path.join(tmp, "unit.o")
            args = _own_args(line, source, keep_binary=True) + register_flags(unit, error)  # (HIP: no cap here)
            run([line.compiler] + args + [source, "-o", built], "the %s unit" % vendor.name)
        else:
            image = vendor.build_image(line.compiler, bitcode, arch, pipeline, cap, tmp, error)
            if device_only:
                shutil.copyfile(image, obj)
                return
            built = obj if not geometry else os.path.join(tmp, "unit.o")
            hosts = ("--cuda-host-only", "--offload-host-only")
            host = [a for a in _own_args(line, source) if a not in hosts] + [vendor.host_only]
            run(
                [line.compiler] + host + ["-Xclang", _INCLUDE_BINARY, "-Xclang", image, source, "-o", built],
                "the %s unit's host side with r3's device image" % vendor.name,
            )
        if geometry:
            table = _plan_object(line.compiler, geometry, bitcode, tmp, run)
            run(
                [shutil.which("ld") or "ld", "-r", built, table, "-o", obj],
                "linking the %s unit's launch plan" % vendor.name,
            )


def _own_args(line, source, keep_binary=False):
    """The compile's arguments less its sources, output, dependency files and (unless
    ``keep_binary``) the GPU binary it embeds."""
    args = line.without(drop_sources=True, drop_output=True, drop_deps=True, drop_compile_only=False)
    out, i = [], 0
    while i < len(args):
        if not keep_binary and args[i] == "-Xclang" and args[i + 1 : i + 2] == [_INCLUDE_BINARY]:
            i += 4  # -Xclang -fcuda-include-gpubinary -Xclang FILE: r3's image replaces the build's
            continue
        if args[i] != source:
            out.append(args[i])
        i += 1
    return out


def _check_source(source, unit, plan, error):
    """The source compiled is the one recorded (its digest in the plan's facts), where the
    plan has no patch for it (a patched source is Spack's patch of the recorded one)."""
    want = (plan.facts.get("sources") or {}).get(unit.source)
    if not want or unit.patch:
        return
    with open(source, "rb") as f:
        if hashlib.sha256(f.read()).hexdigest() != want:
            raise error("%s changed since tuning: r3 measured the device code of another source" % source)


def _device_bitcode(compiler, line_args, source, kind, arch, unit, tmp, run):
    """The unit's device module for ``arch`` before optimization, by record's command."""
    bc = os.path.join(tmp, "device.bc")
    defines = ["-D%s=%s" % (k, v) for k, v in sorted(unit.defines.items())]
    flags = device_compile_args(list(line_args), kind, arch)
    run(
        [compiler] + flags + defines + ["-emit-llvm", "-c", "-Xclang", "-disable-llvm-passes", source, "-o", bc],
        "the unit's device IR",
    )
    with open(bc, "rb") as f:
        return f.read()


def _check_kernels(source, unit, bitcode, error):
    from ..device.deviceir import kernels_of

    have = set(kernels_of(bitcode))
    missing = [k.symbol for k in unit.kernels if k.symbol not in have]
    if missing:
        raise error("%s does not define %s (the source changed since tuning?)" % (source, ", ".join(missing)))


def _cubin(compiler, bitcode, arch, pipeline, cap, tmp, error):
    """ptxas's cubin for ``arch`` of the PTX replay makes of the module under ``pipeline``."""
    import subprocess

    from ..device import tools
    from ..device.codegen import CodegenError, generate
    from ..device.deviceir import DeviceIR, kernels_of
    from ..device.targets import parse_targets
    from ..errors import R3Error

    try:
        (target,) = parse_targets(arch)
        # as device_code builds a capture's: the module's kernels, no clang of the build's
        code = generate(DeviceIR(target, CUDA, bitcode, kernels_of(bitcode)), pipeline, cap)
    except (CodegenError, R3Error) as err:
        raise error(str(err))
    ptx, cubin = os.path.join(tmp, "device.ptx"), os.path.join(tmp, "device.cubin")
    with open(ptx, "wb") as f:
        f.write(code.code)
    argv = [tools.find_ptxas(), "-arch=%s" % arch, "-O3"]
    argv += ["-maxrregcount=%d" % cap] if cap else []
    proc = subprocess.run(argv + [ptx, "-o", cubin], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [l for l in proc.stderr.splitlines() if l.strip()] or ["exit status %d" % proc.returncode]
        raise error("ptxas -arch=%s rejects r3's PTX: %s" % (arch, lines[0].strip()))
    return cubin


def _plan_object(compiler, kernels, bitcode, tmp, run):
    """An object holding each kernel's planned geometry in the section r3launch.c reads."""
    import llvmlite.binding as llvm

    from ..device.geometry import grid_stride

    text = str(llvm.parse_bitcode(bitcode))
    entries = [
        "  {%s, %d, %d, %d},"  # (a JSON string of a mangled name is a C string literal)
        % (json.dumps(k.symbol), k.launch.thread_limit or 0, k.launch.num_teams or 0, int(grid_stride(text, k.symbol)))
        for k in kernels
    ]
    path = os.path.join(tmp, "r3-launch-plan.c")
    with open(path, "w") as f:
        f.write(
            "struct r3_planned_launch { const char *kernel; unsigned int thread_limit, num_teams; int stride; };\n"
            '__attribute__((used, retain, section("%s"), aligned(8)))\n'
            "static const struct r3_planned_launch plan[] = {\n%s\n};\n" % (SECTION, "\n".join(entries))
        )
    out = path[:-2] + ".o"
    run([compiler, "-x", "c", "-O1", "-fPIC", "-w", "-c", path, "-o", out], "the GPU unit's launch plan")
    return out


def plans_geometry(plan, kind=CUDA):
    """Whether a CUDA (``kind``: HIP) kernel of ``plan`` launches with a planned block or grid."""
    return any(
        GPU_EXTS.get(os.path.splitext(u.source)[1]) == kind and any(_geometry(k) for k in u.kernels) for u in plan.units
    )


def launch_args(clang, plan, line, kind):
    """What a link adds for the plan's launch geometry: the ``kind`` vendor's launch shim
    (cuda, hip), where it links an executable against that shared runtime (a static one
    cannot be interposed)."""
    from ..record.runtime import runtime_object

    if line.shared:
        return []
    vendor = VENDORS[kind]
    if plans_geometry(plan, vendor.kind) and vendor.links_runtime(line.args):
        return [runtime_object(clang, vendor.shim), "-ldl", "-lpthread"]
    return []


CUDA_VENDOR = Vendor(
    CUDA, "CUDA", "one cubin", "--cuda-host-only", ("--cuda-device-only",), _cubin, False, links_cudart, SHIM_SOURCE
)
HIP_VENDOR = Vendor(
    HIP,
    "HIP",
    "one code object",
    "--offload-host-only",
    ("--offload-device-only", "--cuda-device-only"),
    fat_binary,
    True,
    links_amdhip,
    HIP_SHIM_SOURCE,
)
VENDORS = {v.kind: v for v in (CUDA_VENDOR, HIP_VENDOR)}
