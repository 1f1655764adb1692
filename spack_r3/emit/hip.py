"""The HIP part of r3-apply's build of a GPU unit (emit/cuda.py has the rest, shared with
CUDA): a HIP unit's device image from the code object replay measured.

clang embeds a HIP unit's device code as an offload bundle (``.hip_fatbin``): per arch, a
code object linked by ``ld.lld -shared`` from the device compile's object, bundled by
``clang-offload-bundler`` beside an empty host entry; ``-fcuda-include-gpubinary`` embeds a
bundle in the host side as it embeds a cubin for CUDA (a device-only compile's output is the
bundle itself). r3's image is made the same way from ``device.codegen``'s code object of the
recorded module under the winner's pipeline and VGPR cap (``amdgpu-num-vgpr``, halved where
VGPRs and AGPRs share one file: ``codegen.num_vgpr``), linked as replay links it
(``device.hip.linked_code_object``).

clang has no flag for the VGPR cap (no ``-Xcuda-ptxas`` twin): a HIP unit with a cap is
always built from r3's code object, under the build's pipeline as replay measured it where
the winner kept the build's.
"""

import os
import platform
import subprocess

from ..record.cuda import HIP

BUNDLE_ALIGN = 4096  # as clang-19's own HIP bundle step


def bundle_targets(arch):
    """clang-offload-bundler's targets of a one-arch HIP bundle, as clang-19 writes them: the
    (empty) host entry first, then the code object of ``arch``."""
    return ["host-%s-unknown-linux" % platform.machine(), "hipv4-amdgcn-amd-amdhsa--%s" % arch]


def fat_binary(compiler, bitcode, arch, pipeline, cap, tmp, error):
    """The offload bundle of the code object replay makes of the module under ``pipeline``
    for ``arch``, capped at ``cap`` VGPRs: its path."""
    from ..device import tools
    from ..device.codegen import CodegenError, generate
    from ..device.deviceir import DeviceIR, kernels_of
    from ..device.hip import linked_code_object
    from ..device.targets import parse_targets
    from ..errors import R3Error

    try:
        (target,) = parse_targets(arch)
        code = generate(DeviceIR(target, HIP, bitcode, kernels_of(bitcode)), pipeline, cap)
        linked = linked_code_object(code.code)  # (HipError: no ld.lld, one line)
        bundler = tools.llvm_tool("clang-offload-bundler")
    except (CodegenError, R3Error) as err:
        raise error(str(err))
    co, out = os.path.join(tmp, "device.hsaco"), os.path.join(tmp, "device.hipfb")
    with open(co, "wb") as f:
        f.write(linked)
    argv = [bundler, "-type=o", "-bundle-align=%d" % BUNDLE_ALIGN, "-targets=" + ",".join(bundle_targets(arch))]
    proc = subprocess.run(argv + ["-input=/dev/null", "-input=" + co, "-output=" + out], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [l for l in proc.stderr.splitlines() if l.strip()] or ["exit status %d" % proc.returncode]
        raise error("clang-offload-bundler cannot bundle r3's code object: %s" % lines[0].strip())
    return out
