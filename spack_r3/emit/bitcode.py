"""The bitcode of a unit r3-apply builds: what its tuned kernels are cut from (the host
units of ``apply.py`` and the offload units of ``offload.py``)."""

import os

from ..toolchain import before_llvm_passes, ir_input_flags


def unit_bitcode(compiler, text, tmp, run):
    """The bitcode ``compiler`` (the build's clang or flang) makes of a unit's edited IR ``text``, in
    ``tmp``; ``run(argv, what)`` runs it (raising the launcher's error with one line)."""
    path = os.path.join(tmp, "shared.ll")
    with open(path, "w") as f:
        f.write(text)
    bc = os.path.join(tmp, "shared.bc")
    run(
        [compiler, "-c", "-emit-llvm"] + before_llvm_passes(compiler) + ir_input_flags(compiler) + [path, "-o", bc],
        "the unit's bitcode",
    )
    with open(bc, "rb") as f:
        return f.read()
