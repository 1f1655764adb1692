"""r3-apply's build of an OpenMP offload unit: the tuned device functions in its device image.

clang builds an offload unit as a host object carrying a packaged device object
(``clang-offload-packager``), which ``clang-linker-wrapper`` links into the image
libomptarget loads. A planned offload unit is built the same way by hand:

1. the device side to IR before optimization (``record.offload.device_compile_args``, as
   record kept it);
2. each tuned region's device function cut out and optimized exactly as replay measured it
   (``compile.stages.optimized_module``: the pipeline and the launch geometry), an object of
   its own; the rest of the device module, the tuned functions declared only, compiled at the
   build's optimization level; the two linked (``ld -r``) into the device object;
3. that object packaged for the first offload target and embedded in the unit's host-side
   compile (``--offload-host-only -fembed-offload-object``).

Timed builds need no probes in an offload unit: the launches are timed by the offload record
runtime (record/runtime/r3offload.c), which a timed link brings in.
"""

import os
import shutil
import tempfile

from ..iredit import declare_only, global_ref, split_module
from ..record.offload import static_globals, device_compile_args, device_globals, offload_targets, region_key

_ENTRY = ".offloading.entry."  # the global clang gives each target region (its offload entry)


def packager(compiler):
    """clang-offload-packager of the compiler's own LLVM."""
    real = os.path.realpath(shutil.which(compiler) or compiler)
    beside = os.path.join(os.path.dirname(real), "clang-offload-packager")
    return beside if os.access(beside, os.X_OK) else (shutil.which("clang-offload-packager") or beside)


def build_unit(line, source, obj, unit, run, apply_error):
    """Build ``obj`` from the offload unit ``source`` with the plan's ``unit`` tuned.
    ``run(argv, what)`` runs a tool (raising ``apply_error`` with one line)."""
    from ..iredit import init_native
    from ..compile.stages import CompileError, KernelIR, optimized_module, resolve_target, target_machine
    from .bitcode import unit_bitcode

    init_native()
    compiler = line.compiler
    defines = ["-D%s=%s" % (k, v) for k, v in sorted(unit.defines.items())]
    kernels = [k.symbol for k in unit.kernels]
    target = offload_targets(line.args)[0]
    with tempfile.TemporaryDirectory(prefix="r3-apply-offload-") as tmp:
        dev_ll = os.path.join(tmp, "device.ll")
        run(
            [compiler]
            + device_compile_args(line)
            + defines
            + ["--offload-device-only", "-S", "-emit-llvm", "-Xclang", "-disable-llvm-passes", source, "-o", dev_ll],
            "the unit's device IR",
        )
        with open(dev_ll) as f:
            text = f.read()  # clang's own text: the rest is compiled by it (llvmlite prints a newer IR)
        bitcode = unit_bitcode(compiler, text, tmp, run)
        # the plan's regions by function and line: this copy of the source has its own file ids
        entries = [n[len(_ENTRY) :] for kind, n, _ in split_module(text) if kind == "global" and n.startswith(_ENTRY)]
        here = {region_key(n): n for n in entries}
        missing = [k for k in kernels if region_key(k) not in here]
        if missing:
            raise apply_error(
                "%s has no target region %s (the source changed since tuning?)"
                % (source, ", ".join(region_key(k) for k in missing))
            )
        kernels = [here[region_key(k)] for k in kernels]
        # a static device global a tuned region uses: the rest defines it, hidden, for the
        # region's object to reach, and the linked device object makes it local again
        statics = sorted(static_globals(bitcode) & {g for k in kernels for g in device_globals(bitcode, k)})
        parts = [os.path.join(tmp, "rest.o")]
        rest = os.path.join(tmp, "rest.ll")
        with open(rest, "w") as f:
            f.write(_hidden(declare_only(text, kernels), statics))
        level = [a for a in line.args if a.startswith("-O")][-1:] or ["-O0"]
        run(
            [compiler] + level + ["-fPIC", "-Wno-override-module", "-c", "-x", "ir", rest, "-o", parts[0]],
            "the device module without its tuned regions",
        )
        for k, name in zip(unit.kernels, kernels):
            pipeline, launch = k.pipeline, k.launch
            try:
                # its `declare target` globals are the image's (rest.o's), not copies of its own
                shared = device_globals(bitcode, name)
                source_ir = KernelIR.from_bitcode(name, bitcode, recorded_globals=shared, clang=compiler, build=True)
                mod = optimized_module(source_ir, pipeline, launch)
            except CompileError as err:
                raise apply_error("%s: %s" % (k.symbol, err))
            except Exception as err:  # extraction: what replay would refuse
                raise apply_error("%s: %s" % (k.symbol, str(err).splitlines()[0] if str(err) else type(err).__name__))
            cpu, features = resolve_target(pipeline, source_ir)
            tm = target_machine(mod.triple, cpu, features, pipeline.codegen)
            parts.append(os.path.join(tmp, "region-%d.o" % len(parts)))
            with open(parts[-1], "wb") as f:
                f.write(tm.emit_object(mod))
        device = os.path.join(tmp, "device.o")
        run([shutil.which("ld") or "ld", "-r"] + parts + ["-o", device], "linking the tuned device object")
        if statics:
            objcopy = shutil.which("objcopy") or "objcopy"
            run([objcopy] + ["--localize-symbol=" + g for g in statics] + [device], "the static device globals")
        package = os.path.join(tmp, "device.pkg")
        run(
            [packager(compiler), "-o", package, "--image=file=%s,triple=%s,kind=openmp" % (device, target)],
            "packaging the device object",
        )
        run(
            [compiler]
            + line.without(drop_sources=True, drop_output=True)
            + defines
            + ["--offload-host-only", "-Xclang", "-fembed-offload-object=" + package, "-c", source, "-o", obj],
            "the unit's host side with the tuned device image",
        )


def _hidden(text, names):
    """``text`` with the internal globals ``names`` defined with hidden visibility instead."""
    heads = tuple("%s = internal " % global_ref(n) for n in names)
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(heads):
            name, rest = line.split(" = internal ", 1)
            lines[i] = "%s = hidden %s" % (name, rest)
    return "\n".join(lines)
