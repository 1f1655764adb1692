"""A device unit's folder in a recording: what record/offload.py and record/cuda.py keep of
a unit's device side, as a host unit's folder (``tus/<digest>``) holds it: the module
(``module.bc``), a copy of its source, and ``tu.json`` (its compile command, the flags
that made the module, its backend and kernels)."""

import hashlib
import json
import os
import shutil
import tempfile


def store_device_unit(record_dir, bitcode, source, compile_command, bitcode_args, backend, opt_level, kernels, **extra):
    """The unit folder of ``bitcode`` (a device module) under ``record_dir``, written once:
    staged and renamed into place, so a unit compiled twice at once is kept whole.
    ``kernels``: their KernelInfo JSON; ``extra``: fields of the backend's own (``gpu_arch``)."""
    import llvmlite.binding as llvm

    digest = hashlib.sha256(bitcode).hexdigest()[:16]
    tu_dir = os.path.join(os.path.abspath(record_dir), "tus", digest)
    if os.path.exists(os.path.join(tu_dir, "tu.json")):
        return tu_dir
    os.makedirs(os.path.dirname(tu_dir), exist_ok=True)
    stage = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(tu_dir))
    with open(os.path.join(stage, "module.bc"), "wb") as f:
        f.write(bitcode)
    src = os.path.abspath(source)
    if os.path.exists(src):
        shutil.copyfile(src, os.path.join(stage, "source" + os.path.splitext(src)[1]))
    meta = {
        "source_file": src,
        "compile_command": list(compile_command),
        "compile_dir": os.getcwd(),
        "bitcode_args": list(bitcode_args),
        "triple": llvm.parse_bitcode(bitcode).triple,
        "backend": backend,
        **extra,
        "opt_level": opt_level,
        "kernels": kernels,
        "exports": {},  # a device function is no host unit's callee
    }
    with open(os.path.join(stage, "tu.json"), "w") as f:
        json.dump(meta, f, indent=1)
    try:
        os.rename(stage, tu_dir)
    except OSError:  # another compile of the same unit won the race
        shutil.rmtree(stage, ignore_errors=True)
    return tu_dir
