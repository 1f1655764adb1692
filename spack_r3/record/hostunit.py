"""A host unit recorded: compiled to bitcode before LLVM's passes (kept for replay, with
its compile line), its kernels instrumented in its textual IR, and that IR compiled to the
object the build asked for (the host backend's record; ``backends/host.py``)."""

import hashlib
import json
import os
import shutil
import subprocess
import tempfile

from .. import fortran
from ..toolchain import before_llvm_passes, ir_input_flags
from .compileline import bitcode_args, ir_codegen_args, run, warn
from .flags import target_flags, unoptimized_args


def record_unit(line, source, obj, record_dir, wanted):
    """Compile one source with probes into ``obj``. Returns a reason string on failure."""
    from .instrument import ModuleAnalysis, instrument_text

    with tempfile.TemporaryDirectory(prefix="r3-record-") as tmp:
        bc = os.path.join(tmp, "module.bc")
        base = line.without(drop_sources=True, drop_output=True)
        deps_target = []
        if any(a in ("-MD", "-MMD") for a in base) and not any(a in ("-MT", "-MQ") for a in base):
            deps_target = ["-MT", obj]
        flang = fortran.is_flang(line.compiler)
        cmd_bc = (
            [line.compiler]
            + base
            + target_flags()
            + deps_target
            + unoptimized_args(line)
            + ["-emit-llvm", "-c"]
            + before_llvm_passes(line.compiler)
            + [source, "-o", bc]
        )
        # flang's -opt-bisect-limit names every pass it skips on stderr: not shown
        if run(cmd_bc, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if flang else subprocess.PIPE) != 0:
            return "the compiler could not emit LLVM bitcode (is it clang or flang?)"
        bitcode = open(bc, "rb").read()
        analysis = ModuleAnalysis(bitcode)
        kernels, skipped = analysis.select(wanted)
        for name, reason in skipped:
            warn("%s: %s not recorded: %s" % (source, name, reason))
        digest = hashlib.sha256(bitcode).hexdigest()[:16]
        tu_dir = os.path.join(record_dir, "tus", digest)
        _store_unit(tu_dir, bitcode, line, source, kernels, analysis)
        ll = os.path.join(tmp, "module.ll")
        if run(_print_ir(line.compiler, bc, ll), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) != 0:
            return "the compiler could not print its IR"
        instrumented = os.path.join(tmp, "instrumented.ll")
        with open(ll) as f:
            text = f.read()
        with open(instrumented, "w") as f:
            f.write(instrument_text(text, kernels, tu_dir))
        cmd_obj = (
            [line.compiler]
            + ir_codegen_args(line)
            + target_flags()
            + ir_input_flags(line.compiler)
            + ["-c", instrumented, "-o", obj]
        )
        proc = subprocess.run(cmd_obj, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            return "instrumented IR did not compile: " + (proc.stderr.strip().splitlines() or ["?"])[0]
    return None


def _print_ir(compiler, bc, ll):
    """The command that prints bitcode ``bc`` as text: clang's own, or for flang the
    ``llvm-dis`` of its LLVM (flang prints no IR it did not compile)."""
    if not fortran.is_flang(compiler):
        return [compiler, "-S", "-emit-llvm", "-Xclang", "-disable-llvm-passes", bc, "-o", ll]
    from ..toolchain import find_llvm_tools

    version = fortran.flang_major(compiler)
    return [find_llvm_tools(version, version).dis, bc, "-o", ll]


def _store_unit(tu_dir, bitcode, line, source, kernels, analysis):
    if os.path.exists(os.path.join(tu_dir, "tu.json")):
        return
    os.makedirs(os.path.dirname(tu_dir), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(tu_dir))
    with open(os.path.join(tmp, "module.bc"), "wb") as f:
        f.write(bitcode)
    src = os.path.abspath(source)
    if os.path.exists(src):
        shutil.copyfile(src, os.path.join(tmp, "source" + os.path.splitext(src)[1]))
    meta = {
        "source_file": src,
        "compile_command": [line.compiler] + line.args,
        "compile_dir": os.getcwd(),
        "bitcode_args": bitcode_args(line),
        "triple": analysis.module.triple,
        "kernels": [k.to_json() for k in kernels],
        "exports": analysis.exports(),
        "export_globals": analysis.export_globals(),
    }
    with open(os.path.join(tmp, "tu.json"), "w") as f:
        json.dump(meta, f, indent=1)
    try:
        os.rename(tmp, tu_dir)
    except OSError:  # another compile of the same unit won the race
        shutil.rmtree(tmp, ignore_errors=True)
