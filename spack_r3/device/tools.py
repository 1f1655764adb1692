"""The tools device code generation needs, found on this machine: ptxas (the
``nvidia-cuda-nvcc-cu12`` wheel's first), LLVM 19's llvm-link and llvm-readelf, and
the OpenMP device runtimes and libdevice."""

import glob
import importlib.util
import os
import shutil
import subprocess
import sys

from ..errors import ToolchainError

LLVM_VERSIONS = (19, 20, 21, 22)  # the record clang's LLVM first


def _wheel_dir(package):
    """Directory of a namespace package such as nvidia.cuda_nvcc, or None."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def find_ptxas():
    """ptxas: ``$R3_PTXAS``, the nvidia-cuda-nvcc-cu12 wheel's, PATH, /usr/local/cuda."""
    explicit = os.environ.get("R3_PTXAS")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise ToolchainError("R3_PTXAS=%s is not an executable" % explicit)
        return explicit
    wheel = _wheel_dir("nvidia.cuda_nvcc")
    candidates = [os.path.join(wheel, "bin", "ptxas")] if wheel else []
    candidates += [
        os.path.join(os.path.dirname(sys.executable), "ptxas"),
        shutil.which("ptxas") or "",
        "/usr/local/cuda/bin/ptxas",
    ]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    raise ToolchainError("ptxas not found: pip install nvidia-cuda-nvcc-cu12 (scripts/setup.sh does), or set R3_PTXAS")


def find_libdevice():
    """libdevice.10.bc (CUDA's math library for NVPTX), or None."""
    wheel = _wheel_dir("nvidia.cuda_nvcc")
    for d in ([os.path.join(wheel, "nvvm", "libdevice")] if wheel else []) + ["/usr/local/cuda/nvvm/libdevice"]:
        path = os.path.join(d, "libdevice.10.bc")
        if os.path.exists(path):
            return path
    return None


def find_rocm_device_libs():
    """The folder of ROCm's device libraries (ocml.bc, ockl.bc, oclc_*.bc): what clang links
    into AMD GPU code as the build would (``--rocm-device-lib-path``), or None.
    ``$R3_ROCM_DEVICE_LIBS`` names it (empty: none, to screen without them)."""
    if "R3_ROCM_DEVICE_LIBS" in os.environ:
        given = os.environ["R3_ROCM_DEVICE_LIBS"]
        return given if given and os.path.exists(os.path.join(given, "ocml.bc")) else None
    candidates = glob.glob("/opt/rocm*/amdgcn/bitcode") + glob.glob("/usr/lib/*/amdgcn/bitcode")
    candidates += ["/usr/lib/amdgcn/bitcode"]
    for d in candidates:
        if os.path.exists(os.path.join(d, "ocml.bc")):
            return d
    return None


def llvm_tool(name):
    """``llvm-link``, ``llvm-readelf``, ``llvm-dis``: of LLVM 19 (the record clang's) or newer."""
    for v in LLVM_VERSIONS:
        path = shutil.which("%s-%d" % (name, v)) or (
            "/usr/lib/llvm-%d/bin/%s" % (v, name) if os.path.exists("/usr/lib/llvm-%d/bin/%s" % (v, name)) else None
        )
        if path:
            return path
    path = shutil.which(name)
    if path:
        return path
    raise ToolchainError("%s not found (Debian: apt-get install llvm-19)" % name)


def device_runtime(clang, target):
    """LLVM's OpenMP device runtime bitcode for ``target`` (libomp-19-dev ships
    libomptarget-nvptx-sm_XX.bc and libomptarget-amdgpu-gfxNNN.bc), or None."""
    out = subprocess.run([clang, "-print-resource-dir"], capture_output=True, text=True)
    resource = out.stdout.strip()
    libdirs = [os.path.normpath(os.path.join(resource, "..", "..")), os.path.join(resource, "lib")]
    name = ("libomptarget-nvptx-%s.bc" if target.vendor == "nvidia" else "libomptarget-amdgpu-%s.bc") % target.name
    for d in libdirs:
        hits = glob.glob(os.path.join(d, name)) + glob.glob(os.path.join(d, "*", name))
        if hits:
            return hits[0]
    return None
