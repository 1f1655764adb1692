"""Record OpenMP ``target`` regions: the launcher's part for an offload unit.

A unit compiled with ``-fopenmp-targets=`` is compiled unchanged (its host code and its
device image are the build's own), and once more by the device side of clang's offload
compile, before optimization (``--offload-device-only -emit-llvm -disable-llvm-passes``):
that module, with the unit's compile command, is kept as a unit folder like a host unit's
(``tus/<digest>``, ``backend: offload``), and each of its kernels (a region's device
function, ``__omp_offloading_<ids>_<function>_l<line>``) is named in
``<record dir>/offload/<kernel>`` with that folder (its first line) and the ``declare
target`` globals the region uses (a line ``global <name>`` each, ``static <name> <size>`` a
static one), which the offload record
runtime (runtime/r3offload.c) reads to tie a launch to its IR and to capture those globals'
device copies. Host functions of an offload unit
are not instrumented: their probes would time and capture the host side of a launch.

Only the first target of ``-fopenmp-targets`` is kept: on this machine the host plugin's
``x86_64-pc-linux-gnu``; the unit's compile command stays in the capture, so its device IR
can be made again for another target.
"""

import os
import re
import subprocess
import tempfile

ENTRY_PREFIX = "__omp_offloading_"
RUNTIME_GLOBALS = (".gomp_critical_user_", "__kmp", ".kmp")  # as replay.engine.RUNTIME_GLOBAL_PREFIXES


def region_key(name):
    """A region's device function name without clang's file ids (the source file's device
    and inode: another copy of the tree, a Spack stage, names it otherwise): the function
    and line, ``count_teams_l9``."""
    return re.sub(r"^__omp_offloading_[0-9a-f]+_[0-9a-f]+_", "", name)


def offload_targets(args):
    """The targets of ``-fopenmp-targets=`` in a compile line's arguments."""
    out = []
    for a in args:
        if a.startswith("-fopenmp-targets="):
            out += [t for t in a.split("=", 1)[1].split(",") if t]
    return out


def device_compile_args(line):
    """The unit's flags for its device-side compile to IR before optimization: one target."""
    from .flags import target_flags, unoptimized_args

    first = offload_targets(line.args)[0]
    args = [
        ("-fopenmp-targets=" + first) if a.startswith("-fopenmp-targets=") else a
        for a in line.without(drop_sources=True, drop_output=True, drop_deps=True)
    ]
    return args + target_flags() + unoptimized_args(line)


def kernel_infos(bitcode):
    """KernelInfo of each region's device function in a device module."""
    from .instrument import KernelInfo, ModuleAnalysis
    from .libstate import unreplayable_reason

    analysis = ModuleAnalysis(bitcode)
    entries = {
        g.name[len(".offloading.entry.") :]
        for g in analysis.module.global_variables
        if g.name.startswith(".offloading.entry.")
    }
    out = []
    for name, fn in analysis.defined.items():
        if name not in entries:
            continue
        params = [str(a.type) for a in fn.arguments]
        calls = analysis.external_calls(name)
        # OpenMP's own lock words (a reduction's critical section): replay starts them free
        globals_ = [g for g in analysis.referenced_globals(name) if not g[0].startswith(RUNTIME_GLOBALS)]
        why = unreplayable_reason(calls) or _uncapturable(globals_, analysis)
        out.append(KernelInfo(name, "void", 0, params, [0] * len(params), globals_, True, True, calls, why))
    return out


def _uncapturable(globals_, analysis):
    """Why a region's device globals cannot be captured, or None. The offload runtime finds a
    ``declare target`` variable's device copy through its host counterpart (the offload
    entry of the same name); a static one has no entry, and is found by its name in the
    device image's symbol table (the host plugin's only: see ``static_globals``), which a private
    one (no symbol) is not. A ``declare target link`` variable is reached through its
    reference pointer (``<name>_decl_tgt_ref_ptr``), a global with an entry, which the
    runtime captures with the mapped copy it points at."""
    import llvmlite.binding as llvm

    for g, _ in globals_:
        if analysis.globals[g].linkage == llvm.Linkage.private:
            return "it uses the private device global %s, which has no symbol to find its device copy by" % g
    return None


def static_globals(bitcode):
    """The static (internal) device globals of a device module: no offload entry, so the
    offload runtime looks each up as a local object of the loaded device image."""
    import llvmlite.binding as llvm

    return {g.name for g in llvm.parse_bitcode(bitcode).global_variables if g.linkage == llvm.Linkage.internal}


def device_globals(bitcode, kernel):
    """The `declare target` globals the region ``kernel`` of a device module uses: a tuned
    build of it declares them, and the rest of its device image defines them."""
    from .instrument import ModuleAnalysis

    return [g for g, _ in ModuleAnalysis(bitcode).referenced_globals(kernel) if not g.startswith(RUNTIME_GLOBALS)]


def record_device_unit(line, source, record_dir):
    """Keep ``source``'s device IR and name its kernels; a reason string on failure."""
    with tempfile.TemporaryDirectory(prefix="r3-offload-") as tmp:
        bc = os.path.join(tmp, "device.bc")
        cmd = (
            [line.compiler]
            + device_compile_args(line)
            + ["--offload-device-only", "-emit-llvm", "-c", "-Xclang", "-disable-llvm-passes", source, "-o", bc]
        )
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            return "the device side did not compile to IR: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
        bitcode = open(bc, "rb").read()
    kernels = kernel_infos(bitcode)
    if not kernels:
        return None
    from ..data import opt_level
    from .deviceunit import store_device_unit

    tu_dir = store_device_unit(
        record_dir,
        bitcode,
        source,
        [line.compiler] + line.args,
        device_compile_args(line) + ["--offload-device-only"],
        "offload",
        opt_level(line.args),
        [k.to_json() for k in kernels],
    )
    index = os.path.join(os.path.abspath(record_dir), "offload")
    os.makedirs(index, exist_ok=True)
    statics = static_globals(bitcode)
    for k in kernels:  # the unit's folder, then the device globals the runtime captures (a static's with its size)
        lines = [
            ("static %s %d\n" % (g, size)) if g in statics else ("global %s\n" % g)
            for g, size in ([] if k.unreplayable else k.globals)
        ]
        with open(os.path.join(index, k.name), "w") as f:
            f.write(tu_dir + "\n" + "".join(lines))
    return None
