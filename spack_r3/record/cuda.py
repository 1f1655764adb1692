"""Record CUDA and HIP kernels: the launcher's part for a unit compiled by clang.

A CUDA unit (``.cu``, ``-x cuda``) or HIP unit (``.hip``, ``-x hip``) is compiled unchanged
(its host code and device image are the build's own), and once more per GPU arch it names
by the device side of clang's compile, before optimization (``--cuda-device-only`` /
``--offload-device-only`` with ``-emit-llvm -Xclang -disable-llvm-passes``): each arch's
module, with the unit's compile command, is kept as a unit folder like a host unit's
(``tus/<digest>``, ``backend: cuda`` or ``hip``, ``gpu_arch``). Each of its kernels is
named in ``<record dir>/cuda/<kernel>`` for the launch recorder (runtime/r3cuda.c, which
reads no JSON): its first line the byte size of each kernel parameter (its slot in
``cudaLaunchKernel``'s argument array, from the device IR's parameter layout), then one
line ``<arch> <unit folder>`` a GPU arch, then a line ``global <name>`` for each
``__device__`` / ``__constant__`` variable the kernel uses (captured by name).

A build's host code calls the CUDA or HIP runtime; r3cuda.c (r3hip.c: the same recorder,
runtime/gpurec.h) interposes its launch and allocation functions, linked into the
executable (a link against the shared runtime, ``-lcudart``; ``-lamdhip64`` or
``--hip-link``) or preloaded (``LD_PRELOAD``, ``preload_library``).
"""

import os
import subprocess
import tempfile

from ..data import opt_level
from .flags import GPU_EXTS, unit_kind

CUDA, HIP = "cuda", "hip"
DEFAULT_ARCH = {CUDA: "sm_52", HIP: "gfx906"}  # clang-19's defaults without an arch option
_ARCH_PREFIXES = ("--cuda-gpu-arch=", "--offload-arch=")


def gpu_sources(args):
    """The line's CUDA/HIP sources (``-x cuda`` makes any source one)."""
    forced = unit_kind(args) if any(a in ("-x", "-xcuda", "-xhip") for a in args) else None
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-x", "-I", "-D", "-U", "-include", "-isystem", "-MF", "-MT", "-MQ", "-Xclang", "-L"):
            skip = True
            continue
        if a.startswith("-"):
            continue
        ext = os.path.splitext(a)[1]
        if ext in GPU_EXTS or (forced and ext in (".c", ".cc", ".cpp", ".cxx", ".C")):
            out.append(a)
    return out


def gpu_archs(args, kind):
    """The GPU archs the line compiles for, in its order (none named: clang's default)."""
    out = []
    for a in args:
        for p in _ARCH_PREFIXES:
            if a.startswith(p):
                out += [x for x in a[len(p) :].split(",") if x and x not in out]
    return out or [DEFAULT_ARCH[kind]]


_VALUE = ("-o", "-x", "-I", "-D", "-U", "-include", "-isystem", "-iquote", "-idirafter", "-MF", "-MT", "-MQ")
_VALUE += ("-Xclang", "-Xlinker", "-L", "-mllvm", "-target", "-arch")
_DROP = ("-c", "-MD", "-MMD", "-MP", "-xcuda", "-xhip", "--cuda-host-only", "--cuda-device-only", "--offload-host-only")
_DROP += ("--offload-device-only",)
_SOURCE_EXTS = tuple(GPU_EXTS) + (".c", ".cc", ".cpp", ".cxx", ".C")


def device_compile_args(args, kind, arch):
    """The unit's flags for one arch's device-only compile to IR before optimization: its own
    minus sources, outputs, dependency files and its other archs."""
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a in ("-o", "-MF", "-MT", "-MQ", "-x"):
            i += 2
            continue
        if a == "-Xclang" and args[i + 1 : i + 2] == ["-fcuda-include-gpubinary"]:
            i += 4  # the host side's device image (-Xclang -fcuda-include-gpubinary -Xclang FILE)
            continue
        if a in _VALUE:
            out += args[i : i + 2]
            i += 2
            continue
        i += 1
        if a in _DROP or a.startswith(_ARCH_PREFIXES):
            continue
        if not a.startswith("-") and a.endswith(_SOURCE_EXTS):
            continue
        out.append(a)
    if opt_level(args) == "0":  # -O0 marks every function optnone: no pipeline could optimize them
        out.append("-O2")
    arch_flag = ("--cuda-gpu-arch=" if kind == CUDA else "--offload-arch=") + arch
    only = "--cuda-device-only" if kind == CUDA else "--offload-device-only"
    return out + [arch_flag, only, "-x", kind]


def kernel_infos(bitcode):
    """(KernelInfo, [slot bytes]) of each kernel (``__global__`` function) of a device module."""
    from ..device.deviceir import kernels_of
    from .instrument import KernelInfo, ModuleAnalysis

    analysis = ModuleAnalysis(bitcode)
    out = []
    for name in kernels_of(bitcode):
        info = analysis.kernel(name)
        if isinstance(info, str):  # a parameter no slot holds: still named, never captured
            fn = analysis.defined[name]
            info = KernelInfo(name, "void", 0, [str(a.type) for a in fn.arguments], [0] * len(fn.arguments))
            info.unreplayable = "its parameters cannot be captured (%s)" % analysis.kernel(name)
        if info.globals and not info.unreplayable:
            info.unreplayable = _uncapturable(info.globals, analysis)
        sizes = [
            b or analysis.target_data.get_abi_size(a.type)
            for a, b in zip(analysis.defined[name].arguments, info.byval_sizes)
        ]
        out.append((info, sizes))
    return out


def _uncapturable(globals_, analysis):
    """Why a kernel's ``__device__`` / ``__constant__`` variables cannot be captured, or None.
    r3cuda.c finds one by the name the module constructor registers it under
    (``__cudaRegisterVar``) and copies it with ``cudaMemcpyFromSymbol``; a variable of
    internal linkage (``static``, a string constant) has no name to find it by."""
    import llvmlite.binding as llvm

    for g, _ in globals_:
        if analysis.globals[g].linkage in (llvm.Linkage.internal, llvm.Linkage.private):
            return "it uses the device global %s, which has no name the runtime registers" % g
    return None


def record_device_units(compiler, args, source, record_dir):
    """Keep ``source``'s device IR for each GPU arch of the line and name its kernels for
    r3cuda.c; a reason string on failure, else None."""
    kind = unit_kind(args) or GPU_EXTS.get(os.path.splitext(source)[1], CUDA)
    archs = gpu_archs(args, kind)
    units = {}  # kernel -> [(arch, unit folder)]
    sizes, globals_ = {}, {}
    for arch in archs:
        with tempfile.TemporaryDirectory(prefix="r3-cuda-") as tmp:
            bc = os.path.join(tmp, "device.bc")
            flags = device_compile_args(args, kind, arch)
            cmd = [compiler] + flags + ["-emit-llvm", "-c", "-Xclang", "-disable-llvm-passes", source, "-o", bc]
            proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if proc.returncode != 0:
                lines = (
                    [l for l in proc.stderr.splitlines() if "error" in l] or proc.stderr.strip().splitlines() or ["?"]
                )
                return "the device side for %s did not compile to IR: %s" % (arch, lines[0])
            with open(bc, "rb") as f:
                bitcode = f.read()
        kernels = kernel_infos(bitcode)
        if not kernels:
            continue
        tu_dir = _store_unit(record_dir, bitcode, compiler, args, source, kind, arch, flags, kernels)
        for info, slot in kernels:
            units.setdefault(info.name, []).append((arch, tu_dir))
            sizes[info.name] = slot
            globals_[info.name] = [] if info.unreplayable else [g for g, _ in info.globals]
    index = os.path.join(os.path.abspath(record_dir), "cuda")
    os.makedirs(index, exist_ok=True)
    for name, where in units.items():
        text = " ".join(str(s) for s in sizes[name]) + "\n" + "".join("%s %s\n" % w for w in where)
        text += "".join("global %s\n" % g for g in globals_[name])  # the device globals r3cuda.c captures
        tmp = os.path.join(index, ".tmp-%s-%d" % (name, os.getpid()))
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(index, name))
    return None


def _store_unit(record_dir, bitcode, compiler, args, source, kind, arch, flags, kernels):
    from .deviceunit import store_device_unit

    return store_device_unit(
        record_dir,
        bitcode,
        source,
        [compiler] + list(args),
        flags,
        kind,
        opt_level(args),
        [k.to_json() for k, _ in kernels],
        gpu_arch=arch,
    )


def links_cudart(args):
    """A link against the shared CUDA runtime (``-lcudart``, ``-l:libcudart.so...``): one
    r3cuda.o can interpose. A static one (``-lcudart_static``) defines the same symbols in
    the executable: linking r3cuda.o beside it would clash, so it is left alone."""
    return any(a == "-lcudart" or a.startswith("-l:libcudart.so") or a == "--cudart=shared" for a in args)


def links_amdhip(args):
    """A link against the HIP runtime (``-lamdhip64``, or clang's ``--hip-link``, which adds it)."""
    return any(a in ("-lamdhip64", "--hip-link") or a.startswith("-l:libamdhip64.so") for a in args)


def link_args(clang, args, kind=None):
    """What a link of a CUDA or HIP executable adds: the launch recorder of its runtime
    (r3cuda.o, r3hip.o), whose definitions win over libcudart.so's / libamdhip64.so's (as
    r3offload.o's do over libomptarget's); nothing for other links. ``kind``: that
    runtime's only (cuda, hip)."""
    from .runtime import runtime_object

    if "-c" in args:
        return []
    for name, links, source in ((CUDA, links_cudart, RUNTIME_SOURCE), (HIP, links_amdhip, HIP_RUNTIME_SOURCE)):
        if kind in (None, name) and links(args):
            return [runtime_object(clang, source), "-ldl", "-lpthread"]
    return []


def launch(compiler, args, record_dir, warn):
    """The launcher for a line with CUDA/HIP sources: run unchanged, then keep each source's
    device IR (a failure is one warning: recording never breaks a build)."""
    from .flags import clang_for_runtime

    extra = link_args(clang_for_runtime(compiler), args)  # (r3cuda.c is C: clang, not clang++)
    rc = subprocess.run([compiler] + list(args) + extra).returncode
    if rc != 0:
        return rc
    for source in gpu_sources(args):
        try:
            reason = record_device_units(compiler, args, source, record_dir)
        except Exception as err:  # recording must never break a build
            reason = "%s: %s" % (type(err).__name__, err)
        if reason:
            warn("%s: kernels not recorded (%s)" % (source, reason))
    return 0


RUNTIME_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime", "r3cuda.c")
HIP_RUNTIME_SOURCE = os.path.join(os.path.dirname(RUNTIME_SOURCE), "r3hip.c")  # (both: runtime/gpurec.h)


def preload_library(clang, source=RUNTIME_SOURCE):
    """r3cuda.so (or r3hip.so for ``HIP_RUNTIME_SOURCE``; built once per clang, cached beside
    the record runtime): the launch recorder for ``LD_PRELOAD`` into an application that links
    its GPU runtime dynamically."""
    from .runtime import _run, runtime_object

    obj = runtime_object(clang, source)
    lib = os.path.join(os.path.dirname(obj), os.path.splitext(os.path.basename(source))[0] + ".so")
    if not os.path.isfile(lib):
        tmp = lib + ".tmp-%d" % os.getpid()
        _run(clang, [clang, "-shared", obj, "-o", tmp, "-ldl", "-lpthread"])
        os.replace(tmp, lib)
    return lib
