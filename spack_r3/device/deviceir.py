"""A unit's device IR for one GPU target, from its source and compile command.

clang compiles the device side only, before any LLVM pass (``-Xclang
-disable-llvm-passes``), so a candidate's pipeline is what optimizes it:
- OpenMP offload units: ``-fopenmp -fopenmp-targets=<triple> --offload-arch=<gpu>
  --offload-device-only -nogpulib``, then LLVM's OpenMP device runtime for that GPU
  (libomp-19-dev's libomptarget-nvptx-sm_XX.bc / libomptarget-amdgpu-gfxNNN.bc) linked in
  with ``llvm-link --only-needed --internalize``, as clang's own ``-mlink-builtin-bitcode``
  does: without it every runtime call is external and the resources are the worst case
  (measured: 64 VGPRs and a dynamic stack on gfx942 for a saxpy region, 12 VGPRs linked).
- CUDA / HIP units: ``-x cuda --cuda-device-only --cuda-gpu-arch=sm_XX`` for NVIDIA,
  ``-x hip --offload-device-only --offload-arch=gfxNNN`` for AMD (a CUDA unit for an AMD
  target compiles as HIP, as hipcc would), with the device math libraries linked as the
  build's clang links them: CUDA's libdevice from the CUDA installation clang finds (which
  also tells it the CUDA version: without it, ``-nocudalib``, clang-19 expects the launch
  API of CUDA 9 and real headers fail on ``<<<>>>``), ROCm's ocml/ockl
  (``--rocm-device-lib-path``, ``tools.find_rocm_device_libs``). Where clang finds no
  libdevice, ``-nocudalib`` and r3 links the wheel's libdevice itself; where no ROCm device
  libraries are installed, ``-nogpulib``. A math call left unresolved either way is named
  in ``DeviceIR.unresolved``: the screen never judges code by figures that are not the real
  code's. The unit's own flags (include paths, macros, language standard, ``--cuda-path``,
  ``--rocm-path``, ``-nocudainc``) are kept; host target flags (-march, ...) and outputs are
  dropped.
"""

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Optional, Tuple

from .. import toolchain
from ..record.flags import GPU_EXTS
from ..errors import R3Error
from ..iredit import GLOBAL_NAME, reachable, ref_name
from . import tools
from .targets import NVIDIA

OPENMP, CUDA, HIP = "openmp", "cuda", "hip"
COMPILE_TIMEOUT_S = 120
_WITH_VALUE_KEEP = ("-I", "-D", "-U", "-include", "-isystem", "-iquote", "-idirafter")
_WITH_VALUE_DROP = (
    "-o",
    "-MF",
    "-MT",
    "-MQ",
    "-x",
    "-Xopenmp-target",
    "-Xarch_host",
    "-Xarch_device",
    "-target",
    "-arch",
    "-Xlinker",
    "-L",
    "-l",
)
_DROP_PREFIXES = (
    "-m",
    "-fopenmp-targets",
    "--offload-arch",
    "--cuda-gpu-arch",
    "-Xopenmp-target=",
    "--target",
    "-fsanitize",
    "-fprofile",
    "-fcoverage",
    "-flto",
    "-fno-lto",
    "-g",
    "-M",
    "-fdebug",
    "-c",
    "--offload",
    "--cuda-device-only",
    "--cuda-host-only",
    "-nogpulib",
    "-nocudalib",
    "-emit-llvm",
    "-S",
    "-E",
    "-Wl,",
)
_KERNEL_DEF = re.compile(r"^define [^@\n]*\b(?:ptx_kernel|amdgpu_kernel)\b[^@\n]*(%s)\(" % GLOBAL_NAME, re.M)


class DeviceIRError(R3Error):
    """A unit that does not compile for a GPU target (one line: clang's first error)."""


@dataclass
class DeviceIR:
    """One unit's device module for one target, before optimization."""

    target: object  # GpuTarget
    kind: str  # openmp, cuda or hip
    bitcode: bytes
    kernels: Tuple[str, ...]  # entry kernels (mangled names)
    clang: Optional[str] = None
    # Device library functions it calls that no library defined here (__ocml_sin_f64: no
    # ROCm device libraries): its registers and stack are not those of the real code
    unresolved: Tuple[str, ...] = ()

    def unresolved_in(self, kernel):
        """Those of ``unresolved`` that ``kernel`` may call (HIP's own __assert_fail calls
        ockl's printf functions, which a kernel without an assert never reaches)."""
        if not self.unresolved:
            return ()
        import llvmlite.binding as llvm

        text = str(llvm.parse_bitcode(self.bitcode))
        return tuple(n for n in self.unresolved if n in reachable(text, kernel))


def unit_kind(source, command=()):
    """openmp, cuda or hip: the unit's offload model, from its compile command and source."""
    args = list(command or ())
    for i, a in enumerate(args):
        if a == "-x" and i + 1 < len(args) and args[i + 1] in (CUDA, HIP):
            return args[i + 1]
    ext = os.path.splitext(source)[1]
    if ext in GPU_EXTS:
        return GPU_EXTS[ext]
    if any(a.startswith("-fopenmp") for a in args):
        return OPENMP
    try:
        with open(source, errors="replace") as f:
            text = f.read()
    except OSError as err:
        raise DeviceIRError("cannot read %s: %s" % (source, err.strerror))
    if re.search(r"#\s*pragma\s+omp\s+target\b", text):
        return OPENMP
    if "__global__" in text:
        return CUDA
    raise DeviceIRError("%s has no device code: no OpenMP target region, CUDA or HIP kernel" % source)


def unit_flags(source, command):
    """The unit's flags that shape its device code: preprocessor, language, optimization,
    CUDA/ROCm paths; never its outputs, host target or offload targets."""
    args = list(command or ())[1:]
    names = {source, os.path.basename(source), os.path.abspath(source)}
    keep, i = [], 0
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if a in _WITH_VALUE_KEEP and nxt is not None:
            keep += [a, nxt]
            i += 2
            continue
        if a in _WITH_VALUE_DROP:
            i += 2
            continue
        if a in ("-Xclang", "-mllvm") and nxt is not None:
            if nxt != "-disable-llvm-passes":
                keep += [a, nxt]
            i += 2
            continue
        i += 1
        if a in names or (not a.startswith("-") and os.path.abspath(a) == os.path.abspath(source)):
            continue
        if not a.startswith("-") or a.startswith(_DROP_PREFIXES):
            continue
        keep.append(a)
    if not any(re.match(r"-O[1-3sz]$|-Ofast$", a) for a in keep):
        keep = [a for a in keep if not a.startswith("-O")] + ["-O2"]  # -O0 marks everything optnone
    return keep


# Device math libraries' functions (CUDA's libdevice, ROCm's ocml, ockl and oclc)
_LIBRARY_CALL = re.compile(r"^declare [^@\n]*@(__nv_\w+|__ocml_\w+|__ockl_\w+|__oclc_\w+)\(", re.M)
# What clang says when it finds no device library for the arch: CUDA's (then r3 links the
# wheel's libdevice), or ROCm's (Debian's ROCm 5.2 libraries know no gfx942: unresolved)
_NO_LIBRARY = ("cannot find libdevice", "cannot find CUDA installation", "cannot find ROCm device library")


def _device_flags(kind, target, flags, libraries=True):
    """clang's flags for ``target``'s device side; ``libraries``: clang links the device
    math libraries itself (else -nocudalib / -nogpulib)."""
    arch = target.name
    if kind == OPENMP:
        return [
            "-fopenmp",
            "-fopenmp-targets=%s" % target.triple,
            "--offload-arch=%s" % arch,
            "--offload-device-only",
            "-nogpulib",
        ]
    if target.vendor == NVIDIA:
        out = ["-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=%s" % arch, "-Wno-unknown-cuda-version"]
        return out + ([] if libraries else ["-nocudalib"])
    out = ["-x", "hip", "--offload-device-only", "--offload-arch=%s" % arch]
    named = any(f.startswith(("--rocm-path", "--rocm-device-lib-path", "--hip-device-lib")) for f in flags)
    found = None if named else tools.find_rocm_device_libs()
    if libraries and (named or found):
        return out + ([] if named else ["--rocm-device-lib-path=%s" % found])
    return out + ["-nogpulib"]


def device_ir(source, command, target, cwd=None, clang=None):
    """DeviceIR of ``source`` compiled by ``command`` (argv, or None: ``clang -O2``) for
    ``target`` (GpuTarget). Raises DeviceIRError with one line."""
    kind = unit_kind(source, command)
    clang = clang or toolchain.find_clang()
    flags = unit_flags(source, command)
    # -nocudainc and -nogpuinc say the same (no CUDA / ROCm headers): each target gets its own
    no_headers = "-nocudainc" in flags or "-nogpuinc" in flags
    flags = [f for f in flags if f not in ("-nocudainc", "-nogpuinc")]
    if no_headers and kind != OPENMP:
        flags.append("-nocudainc" if target.vendor == NVIDIA else "-nogpuinc")
    with tempfile.TemporaryDirectory(prefix="r3-device-") as tmp:
        out = os.path.join(tmp, "device.bc")
        where, what = cwd or os.path.dirname(os.path.abspath(source)), "%s for %s" % (os.path.basename(source), target)

        def compile_device(libraries):
            argv = [clang] + flags + _device_flags(kind, target, flags, libraries)
            _run(
                argv + ["-emit-llvm", "-Xclang", "-disable-llvm-passes", "-c", os.path.abspath(source), "-o", out],
                where,
                what,
            )

        try:
            compile_device(True)
        except DeviceIRError as err:
            if kind == OPENMP or not any(m in str(err) for m in _NO_LIBRARY):
                raise
            compile_device(False)  # none for this arch: the wheel's libdevice below, or unresolved
        libs = []
        if kind == OPENMP:
            rtl = tools.device_runtime(clang, target)
            if rtl is None:
                raise DeviceIRError(
                    "LLVM's OpenMP device runtime for %s is not installed (libomp-19-dev ships "
                    "libomptarget-nvptx-sm_XX.bc and libomptarget-amdgpu-gfxNNN.bc)" % target
                )
            libs.append(rtl)
        if target.vendor == NVIDIA and any(n.startswith("__nv_") for n in _library_calls(out)):
            libdevice = tools.find_libdevice()
            if libdevice:
                libs.append(libdevice)
        if libs:
            linked = os.path.join(tmp, "linked.bc")
            _run(
                [tools.llvm_tool("llvm-link"), "--only-needed", "--internalize", out] + libs + ["-o", linked],
                tmp,
                "linking the device libraries for %s" % target,
            )
            out = linked
        unresolved = _library_calls(out)
        with open(out, "rb") as f:
            bitcode = f.read()
    return DeviceIR(target, kind, bitcode, kernels_of(bitcode), clang, unresolved)


def _library_calls(path):
    """The device library functions the bitcode at ``path`` declares and does not define."""
    proc = subprocess.run([tools.llvm_tool("llvm-dis"), path, "-o", "-"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise DeviceIRError(
            "llvm-dis cannot read the device bitcode: %s" % (proc.stderr.strip().splitlines() or ["?"])[-1]
        )
    return tuple(sorted(set(_LIBRARY_CALL.findall(proc.stdout))))


def kernels_of(bitcode):
    """Entry kernels of a device module (as LLVM 22 reads it: clang-19's nvvm.annotations
    kernels become ptx_kernel functions)."""
    import llvmlite.binding as llvm

    text = str(llvm.parse_bitcode(bitcode))
    return tuple(ref_name(m) for m in _KERNEL_DEF.findall(text))


def _run(argv, cwd, what):
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise DeviceIRError("%s took longer than %ds" % (what, COMPILE_TIMEOUT_S))
    except OSError as err:
        raise DeviceIRError("%s: %s cannot run: %s" % (what, argv[0], err.strerror))
    if proc.returncode != 0:
        lines = [l.strip() for l in proc.stderr.splitlines() if l.strip()]
        errors = [l for l in lines if "error" in l] or lines
        raise DeviceIRError("%s does not compile: %s" % (what, errors[0] if errors else "exit %d" % proc.returncode))
