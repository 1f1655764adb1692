"""Write a Minimal Executable Program: a captured kernel as a directory anyone can build.

    info = write_mep(workspace, capture_dir, out_dir)                      # the kernel as recorded
    info = write_mep(workspace, capture_dir, out_dir, variant, result)     # a tuned winner

The directory holds the kernel's source slice (``mep.slice``; the kernel's IR where no
slice can be made), ``driver.c`` (``driver.cpp`` for a C++ kernel), ``mep.h`` (the ranges
to map, the arguments, the kernel's prototype from its recorded signature), ``data/``
(pre.bin and post.bin, r3 memory images as replay reads them: put back and compared the
same way), a Makefile and a README. Nothing in it names the workspace: it is relocatable.
"""

import datetime
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import List

from .. import cxxnames, settings
from ..errors import R3Error
from ..iredit import FunctionDef, find_define, globals_to_addresses
from ..memimage import _HDR, MAGIC, KIND_HEAP
from ..compile.module import REPLAY_FREE
from ..sourcepatch import PatchError, apply_patch
from .slice import SliceError, source_slice

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "driver.c")
COMPILE_TIMEOUT_S = 120
SOURCE, IR = "source", "ir"


@dataclass
class MEPInfo:
    directory: str
    kernel: str
    mode: str  # SOURCE or IR
    language: str  # C or C++
    why_ir: str = ""  # why the slice could not be made
    flags: List[str] = field(default_factory=list)  # CFLAGS in the Makefile
    unmapped: List[str] = field(default_factory=list)  # pipeline settings with no compiler flag
    variant: bool = False  # a tuned variant's MEP (its pipeline as flags), not the kernel as built
    replay_object: bool = False  # r3/kernel.o: the variant's kernel as replay compiled it


# -- the pipeline as compiler flags ------------------------------------------------------


def pipeline_flags(pipeline, build_flags):
    """(clang flags, settings with no flag equivalent) for ``pipeline``, as its rows lower
    it (``settings.lower``: the lowering replay's Polly stage takes too); ``build_flags``:
    the build's own, whose target ``cpu=built`` keeps and whose OpenMP flags stay."""
    lowered = settings.lower(pipeline, build_flags)
    keep = [f for f in build_flags if f.startswith("-fopenmp") and f not in lowered.clang]
    return list(lowered.clang) + keep, list(lowered.unlowered)


# -- data --------------------------------------------------------------------------------


def _write_image(path, regions, zeros=True):
    """``[(addr, bytes)]`` as an r3 memory image; with ``zeros``, all-zero runs as kind 7
    (no bytes stored: the driver's check compares stored bytes only)."""
    with open(path, "wb") as f:
        f.write(MAGIC)
        for addr, data in regions:
            if zeros and not data.strip(b"\0"):
                f.write(_HDR.pack(addr, len(data), 7))
                continue
            f.write(_HDR.pack(addr, len(data), KIND_HEAP))
            f.write(data)
            f.write(b"\0" * ((8 - len(data) % 8) % 8))


# -- the driver's header -----------------------------------------------------------------


def _c_bytes(data):
    return "{" + ", ".join(str(b) for b in data) + "}" if data else "{0}"


def _param(ty, attrs, slot):
    """(C parameter type, C expression for the recorded value in ``slot``)."""
    if ty == "ptr":
        return "void *", "(void *)0x%xULL" % slot
    if ty == "double":
        return "double", "mep_f64(0x%xULL)" % slot
    if ty == "float":
        return "float", "mep_f32(0x%xU)" % (slot & 0xFFFFFFFF)
    ints = {
        "i1": ("unsigned char", "unsigned char", "unsigned char"),
        "i8": ("signed char", "unsigned char", "char"),
        "i16": ("short", "unsigned short", "short"),
        "i32": ("int", "unsigned int", "int"),
        "i64": ("long long", "unsigned long long", "long long"),
    }
    if ty in ints:
        signed, unsigned, plain = ints[ty]
        ctype = signed if "signext" in attrs else unsigned if "zeroext" in attrs else plain
        bits = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64}[ty]
        value = slot & ((1 << bits) - 1)
        return ctype, "(%s)0x%xULL" % (ctype, value)
    raise R3Error("the kernel takes a parameter of type %s, which the MEP driver cannot pass" % ty)


RET_TYPES = {
    "void": None,
    "double": "double",
    "float": "float",
    "ptr": "void *",
    "i1": "unsigned char",
    "i8": "signed char",
    "i16": "short",
    "i32": "int",
    "i64": "long long",
}


def driver_header(prepared, params_attrs, threads, schedule=None, chunk=None, openmp=False):
    capture = prepared.capture
    sig = capture.signature
    ret = sig["ret"]
    if ret not in RET_TYPES:
        raise R3Error("the kernel returns %s, which the MEP driver cannot take" % ret)
    lines = [
        "/* Written by r3 mep for %s (capture %s): what the driver maps, passes and compares. */"
        % (cxxnames.display(capture.kernel), capture.id),
        "#include <string.h>",
        "#include <stdint.h>",
        '#define MEP_KERNEL "%s"' % cxxnames.display(capture.kernel).replace('"', "'"),
        "#define MEP_THREADS %d" % (threads or 0),
        "#define MEP_ARENA_BASE 0x%xULL" % int(capture.arena["base"], 16),
        "#define MEP_ARENA_END 0x%xULL" % int(capture.arena["end"], 16),
    ]
    tol = capture.tolerance
    lines += ["#define MEP_HAS_TOLERANCE %d" % (1 if tol else 0), "#define MEP_TOLERANCE %r" % float(tol or 0)]
    import numpy as np

    lines += [
        "#define MEP_FP_DOUBLE %d" % (np.float64 in prepared.fp_types),
        "#define MEP_FP_FLOAT %d" % (np.float32 in prepared.fp_types),
    ]
    if openmp and schedule:
        kinds = {"static": 1, "dynamic": 2, "guided": 3}  # omp_sched_t
        lines += ["#define MEP_SCHEDULE ((omp_sched_t)%d)" % kinds[schedule], "#define MEP_CHUNK %d" % (chunk or 0)]
    lines.append(
        "static const uint64_t mep_ranges[][2] = {%s};"
        % ", ".join("{0x%xULL, 0x%xULL}" % (lo, hi) for lo, hi in prepared.ranges)
    )
    lines += [
        "__attribute__((unused)) static double mep_f64(uint64_t bits) { double d; memcpy(&d, &bits, 8); return d; }",
        "__attribute__((unused)) static float mep_f32(uint32_t bits) { float f; memcpy(&f, &bits, 4); return f; }",
    ]
    ctypes_, values, extra = [], [], []
    for i, ty in enumerate(sig["params"]):
        byval = sig["byval"][i] if i < len(sig["byval"]) else 0
        if byval:
            data = prepared.byval[i]
            decl = (
                "struct mep_byval_%d { unsigned char b[%d]; } __attribute__((aligned(8)));\n"
                "static const unsigned char mep_byval_%d_data[%d] = %s;\n"
                "static struct mep_byval_%d mep_byval_%d_value(void)\n{\n    struct mep_byval_%d v;\n"
                "    memcpy(&v, mep_byval_%d_data, sizeof v);\n    return v;\n}"
                % (i, byval, i, byval, _c_bytes(data), i, i, i, i)
            )
            ctypes_.append("struct mep_byval_%d" % i)
            values.append("mep_byval_%d_value()" % i)
            extra.append(decl)
            continue
        ctype, value = _param(ty, params_attrs[i] if i < len(params_attrs) else "", prepared.slots[i])
        ctypes_.append(ctype)
        values.append(value)
    lines += extra
    rtype = RET_TYPES[ret] or "void"
    lines += [
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "/* the kernel, by its symbol, as its recorded signature has it */",
        '%s mep_kernel(%s) __asm__("%s");' % (rtype, ", ".join(ctypes_) or "void", capture.kernel),
        "#ifdef __cplusplus",
        "}",
        "#endif",
    ]
    ret_bytes = prepared.ret if RET_TYPES[ret] else b""
    lines += [
        "#define MEP_RET_SIZE %d" % len(ret_bytes),
        "#define MEP_RET_FP %d" % (ret in ("double", "float")),
        "static const unsigned char mep_ret[] = %s;" % _c_bytes(ret_bytes),
        "static void mep_call(unsigned char *ret)",
        "{",
    ]
    call = "mep_kernel(%s)" % ", ".join(values)
    if RET_TYPES[ret]:
        lines += ["    %s r = %s;" % (rtype, call), "    memcpy(ret, &r, sizeof r);"]
    else:
        lines += ["    (void)ret;", "    %s;" % call]
    lines.append("}")
    return "\n".join(lines) + "\n"


def param_attrs(ir, kernel):
    """The kernel's parameter texts in its IR (``signext``, ``zeroext`` say how to pass them)."""
    lines = ir.split("\n")
    try:
        return FunctionDef(lines[find_define(lines, kernel)], kernel).params
    except (KeyError, ValueError):
        return []


# -- the kernel's IR, where no slice can be made -------------------------------------------


def kernel_ir(prepared, bitcode=None):
    """The kernel cut out of its unit in the record clang's own LLVM text, each recorded
    global replaced by its address (``inttoptr``: no symbol to define at link time)."""
    from .. import toolchain
    from ..compile.stages import KernelIR, CompileError
    from ..errors import ToolchainError

    capture, unit = prepared.capture, prepared.unit
    clang = capture.compile_command[0] if capture.compile_command else None
    version = toolchain.llvm_major(clang)
    try:
        tools = toolchain.find_llvm_tools(version, version)
    except ToolchainError as err:
        raise R3Error("the kernel's IR needs the LLVM %s tools: %s" % (version, err))
    source = (
        unit
        if bitcode is None
        else KernelIR.from_bitcode(
            capture.kernel, bitcode, unit.link_units, unit.recorded_globals, unit.clang, build_level=unit.build_level
        )
    )
    try:
        text = source.tool_ir(tools)
    except CompileError as err:
        raise R3Error("cannot write the kernel's IR: %s" % err)
    return globals_at_addresses(text, capture.globals)


def globals_at_addresses(text, recorded):
    """IR ``text`` with each of the ``recorded`` globals (capture.globals) replaced by its
    address, and its external declaration dropped."""
    return globals_to_addresses(text, {g["name"]: int(g["addr"], 16) for g in recorded})


def replay_object(prepared, variant, bitcode=None):
    """The object of the variant's kernel exactly as replay measured it and r3-apply builds
    it (``stages.optimized_module``, llvmlite's LLVM, this machine's target where the
    pipeline says host), recorded globals at their addresses."""
    from ..compile.stages import CompileError, KernelIR, optimized_module, polly_tools, resolve_target, target_machine

    capture, unit = prepared.capture, prepared.unit
    source = (
        unit
        if bitcode is None
        else KernelIR.from_bitcode(
            capture.kernel, bitcode, unit.link_units, unit.recorded_globals, unit.clang, build_level=unit.build_level
        )
    )
    moved = KernelIR(
        source.kernel,
        globals_at_addresses(source.ir, capture.globals),
        source.bitcode,
        source.link_units,
        source.recorded_globals,
        source.clang,
        source.extract,
        source.build,
        source.build_level,
    )
    try:
        if variant.pipeline.polly:  # the opt stage starts from its own LLVM's text: moved the same way
            tools = polly_tools(source.clang)
            moved._tool_ir[tools.version] = globals_at_addresses(source.tool_ir(tools), capture.globals)
        mod = optimized_module(moved, variant.pipeline, variant.launch)
        cpu, features = resolve_target(variant.pipeline, moved)
        return target_machine(mod.triple, cpu, features, variant.pipeline.codegen).emit_object(mod)
    except CompileError as err:
        raise R3Error("the variant's kernel does not compile as replay compiled it: %s" % err)


# -- the directory -------------------------------------------------------------------------


def _unit_split(flags):
    """The build's flags as (code flags for CFLAGS, OpenMP flags)."""
    omp = [f for f in flags if f.startswith("-fopenmp")]
    return [f for f in flags if f not in omp], omp


def _readme(info, capture, variant_text, record, made):
    lines = [
        "# MEP: %s" % cxxnames.display(capture.kernel),
        "",
        "A Minimal Executable Program written by `r3 mep` (spack-r3): the kernel %s alone, with "
        "the memory it read and wrote in one recorded call, runnable anywhere without the application."
        % cxxnames.display(capture.kernel),
        "",
        "- capture: %s (%s, call %d of the run; recorded %s)"
        % (capture.id, capture.kernel, capture.instance, capture.created or "?"),
        "- source: %s (%s)"
        % (
            os.path.basename(capture.source_file),
            "its slice: the kernel, its callees, their types and globals"
            if info.mode == SOURCE
            else "none here: the kernel's IR, kernel.ll (%s)" % info.why_ir,
        ),
        "- recorded by: %s" % record,
        "- written: %s" % made,
    ]
    if variant_text:
        lines.append("- variant: %s" % variant_text)
    lines += [
        "",
        "`make` builds `mep`; `make check` runs it: it maps the recorded memory at its addresses, calls the "
        "kernel with the recorded arguments%s, compares what it wrote with the recording (tolerance: %s) and "
        "prints the time (median and quartiles over timed runs, memory put back before each); it exits "
        "non-zero on a mismatch. `make CC=gcc`, `make CC=clang CFLAGS=...` choose the compiler and flags "
        "(C++: CXX). `./mep N` times N runs. A compiler that contracts a*b+c into fused multiply-adds where the recording's "
        "did not (gcc: -ffp-contract=fast in its GNU modes) computes other last bits: `make check TOLERANCE=1e-9` "
        "compares at that relative tolerance."
        % (
            " on the recorded OpenMP threads" if capture.launch.get("openmp") else "",
            "%g relative" % capture.tolerance if capture.tolerance else "exact",
        ),
    ]
    if info.mode == IR:
        lines += ["", "The kernel is LLVM IR: it is compiled by clang ($(CLANG)); the driver by $(CC)."]
    if info.replay_object:
        lines += [
            "",
            "`make check-r3` runs the variant's kernel as `r3 replay` measured it and `r3-apply` builds it "
            "(r3/kernel.o: the pipeline through llvmlite's LLVM, for the recording's machine), beside `make "
            "check`'s build of the same variant by the compiler's flags: compilers differ, and where the two "
            "times differ, the flags do not reproduce what r3 measured.",
        ]
    if info.unmapped:
        lines += [
            "",
            "Pipeline settings of the variant with no compiler flag (left out of CFLAGS): "
            + "; ".join(info.unmapped)
            + ".",
        ]
    lines += [
        "",
        "Data: data/pre.bin (memory before the call), data/post.bin (what the call left that is "
        "compared); r3 memory images (magic R3MEM1, then {addr, size, kind, bytes} records; kind 7: zeros).",
    ]
    return "\n".join(lines) + "\n"


def _makefile(info, capture, cflags, kernel_flags, omp, ir_clang, kernel_ext=None):
    cxx = info.language == "C++"
    fortran_unit = info.language == "Fortran"
    cc, ext = ("CXX", "cpp") if cxx else ("CC", "c")
    kcc = "FC" if fortran_unit else cc  # the kernel's compiler (a Fortran kernel, a C driver)
    lines = [
        "# r3 mep: %s from capture %s.  make [%s=...] [CFLAGS=...]; make check"
        % (cxxnames.display(capture.kernel), capture.id, kcc)
    ]
    if fortran_unit:  # make's own FC is f77: the record flang unless told otherwise (FC=gfortran)
        flang = os.path.basename(capture.compile_command[0]) if capture.compile_command else "flang-new"
        lines += ["ifeq ($(origin FC),default)", "FC = %s" % flang, "endif"]
    if (
        info.unmapped is not None
        and info.variant
        and capture.compile_command
        and "clang" in os.path.basename(capture.compile_command[0])
    ):
        # the variant's pipeline is clang's flags (-mllvm ..., -fvectorize): clang unless told otherwise
        clang = os.path.basename(capture.compile_command[0])
        if cxx:
            clang = clang.replace("clang", "clang++")
        lines += ["ifeq ($(origin %s),default)" % cc, "%s = %s" % (cc, clang), "endif"]
    lines += [
        "CFLAGS ?= %s" % " ".join(cflags),
        "KERNEL_FLAGS = %s" % " ".join(kernel_flags + ["-Iinclude"]),
        "OMPFLAGS = %s" % " ".join(omp),
        "DRIVER_FLAGS ?= -O2",
        "RUNS ?= 25",
        "TOLERANCE ?= %s" % ("%r" % capture.tolerance if capture.tolerance else ""),
        "LDLIBS = -lm",
    ]
    if info.mode == IR:
        lines += ["CLANG ?= %s" % ir_clang]
    if fortran_unit:  # flang links its runtime (array assignment, MATMUL) and the C driver's main
        lines.append("LINK = $(FC)")
    elif info.mode == IR:
        lines.append("LINK = $(CLANG)%s" % (" -lstdc++" if cxx else ""))
    else:
        lines.append("LINK = $(%s)" % cc)
    kernel_src = "kernel.ll" if info.mode == IR else "kernel" + (kernel_ext or "." + ext)
    kernel_cc = "$(CLANG) -Wno-override-module" if info.mode == IR else "$(%s)" % kcc
    lines += [
        "",
        "all: mep",
        "",
        "mep: kernel.o driver.o",
        "\t$(LINK) $(LDFLAGS) $(OMPFLAGS) -o $@ kernel.o driver.o $(LDLIBS)",
        "",
        "kernel.o: %s" % kernel_src,
        "\t%s $(CFLAGS) $(OMPFLAGS) %s-c -o $@ %s"
        % (kernel_cc, "" if info.mode == IR else "$(KERNEL_FLAGS) ", kernel_src),
        "",
        "driver.o: driver.%s mep.h" % ext,
        "\t$(%s) $(DRIVER_FLAGS) $(OMPFLAGS) -c -o $@ driver.%s" % (cc, ext),
        "",
        "check: mep",
        "\t./mep $(RUNS) $(TOLERANCE)",
        "",
    ]
    if info.replay_object:
        lines += [
            "# the kernel as r3 replay measured it and r3-apply builds it (r3/kernel.o, for this target)",
            "mep-r3: r3/kernel.o driver.o",
            "\t$(LINK) $(LDFLAGS) $(OMPFLAGS) -o $@ r3/kernel.o driver.o $(LDLIBS)",
            "",
            "check-r3: mep-r3",
            "\t./mep-r3 $(RUNS) $(TOLERANCE)",
            "",
        ]
    lines += [
        "clean:",
        "\trm -f mep mep-r3 kernel.o driver.o" + (" *.mod" if fortran_unit else ""),
        "",
        ".PHONY: all check %sclean" % ("check-r3 " if info.replay_object else ""),
    ]
    return "\n".join(lines) + "\n"


def write_mep(workspace, directory, out, variant=None, variant_text="", clang=None):
    """Write the MEP of the capture in ``directory`` (its ``variant``: a data.Variant, for a
    tuned winner) into ``out``, which must not exist or be empty. Returns an MEPInfo."""
    from ..capture import load_capture_dir
    from ..replay.engine import init_llvm, prepare
    from ..replay.source import unit_text
    from ..compile.stages import build_flags
    from ..search.mutators.base import language
    from ..search.remix import kernel_source
    from ..toolchain import find_clang, find_libomp

    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise R3Error("%s exists and is not an empty directory" % out)
    capture = load_capture_dir(directory)
    init_llvm(find_libomp())  # so that an OpenMP kernel's runtime calls resolve, as in the replay worker
    prepared = prepare(capture, directory)  # CaptureError (one line) for an unreplayable capture
    launch = variant.launch if variant else None
    patch = variant.source_patch if variant else None
    defines = dict(variant.source_defines) if variant else {}
    source_openmp = bool(variant and variant.source_openmp)
    text = unit_text(capture, directory)
    if patch:
        try:
            text = apply_patch(text, patch)
        except PatchError as err:
            raise R3Error("the variant's source patch does not apply: %s" % err)
    source = kernel_source(capture, directory, text=text)
    lang = language(source)
    flags = build_flags(capture.compile_command)
    # the target the recorded code was built for (r3 record --target): what it computed with (FMA)
    flags += [a for a in capture.bitcode_args if a.startswith(("-march", "-mcpu", "-mtune")) and a not in flags]
    if source_openmp and not any(f.startswith("-fopenmp") for f in flags):
        flags.append("-fopenmp")  # the rewrite's threads, in a unit built without OpenMP (search/openmp.py)
    code, omp = _unit_split(flags)
    unmapped = []
    if variant is not None and not variant.pipeline.build_compiler:
        code, unmapped = pipeline_flags(variant.pipeline, flags)
        code, _ = _unit_split(code)
    tuned = variant is not None and not variant.pipeline.build_compiler
    info = MEPInfo(out, capture.kernel, SOURCE, lang, flags=code, unmapped=unmapped, variant=tuned, replay_object=tuned)
    globals_at = {
        g["name"]: int(g["addr"], 16)
        for g in capture.globals
        if not g["name"].startswith((".gomp_critical_user_", "__kmp", ".kmp"))
    }
    compiler = clang or find_clang()
    ext = "cpp" if lang == "C++" else "c"
    fortran_unit = lang == "Fortran"
    # a Fortran kernel's unit as it is (free or fixed form by its extension), beside a C driver
    kernel_ext = os.path.splitext(capture.source_file)[1] if fortran_unit else "." + ext
    defined = ["-D%s=%s" % (k, v) for k, v in sorted(defines.items())]

    def write_fortran(tmp):
        """A Fortran kernel's procedure (in its module's specification part), compiled by
        flang (``fortranrules.procedure_unit``): the driver maps the recorded
        memory, so a unit whose kernel reaches its globals (module variables, COMMON), which
        a compile places elsewhere, is written as IR instead (SliceError)."""
        if globals_at:
            raise SliceError(
                "the kernel reaches globals (%s) at their recorded addresses" % ", ".join(sorted(globals_at))
            )
        from ..search.mutators.fortranrules import procedure_names, procedure_unit

        unit = procedure_unit(text, procedure_names(source))
        if unit is None:
            raise SliceError("the kernel's procedure is not found in %s" % os.path.basename(capture.source_file))
        with open(os.path.join(tmp, "kernel" + kernel_ext), "w", errors="surrogateescape") as f:
            f.write(
                "! r3 mep: the part of %s that %s needs (capture %s)\n"
                % (os.path.basename(capture.source_file), cxxnames.display(capture.kernel), capture.id)
                + unit
            )
        skip = ("-fopenmp", "-march", "-mcpu", "-mtune", "-O")
        return [f for f in source.parse_args if not f.startswith(skip) and f not in code] + defined

    def write_source(tmp):
        """The slice and its headers; the kernel's flags (SliceError where no slice)."""
        if fortran_unit:
            return write_fortran(tmp)
        sl = source_slice(source, globals_at)
        kernel_flags = [
            f for f in sl.flags if not f.startswith(("-fopenmp", "-march", "-mcpu", "-mtune")) and f not in code
        ] + defined
        if "@%s(" % REPLAY_FREE in prepared.ir:  # it frees recorded memory, which the driver mapped
            if lang == "C++":
                raise SliceError("the kernel frees recorded memory (operator delete)")
            kernel_flags.append("-Dfree=%s" % REPLAY_FREE)
        for path, body in sl.headers.items():
            os.makedirs(os.path.join(tmp, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(tmp, path), "w", errors="surrogateescape") as f:
                f.write(body)
        with open(os.path.join(tmp, "kernel." + ext), "w", errors="surrogateescape") as f:
            f.write(
                "/* r3 mep: the slice of %s that %s needs (capture %s) */\n"
                % (os.path.basename(capture.source_file), cxxnames.display(capture.kernel), capture.id)
                + sl.text
            )
        return kernel_flags

    def write_ir(tmp):
        ir = kernel_ir(prepared, _variant_bitcode(capture, directory, patch, defines, source_openmp))
        with open(os.path.join(tmp, "kernel.ll"), "w") as f:
            f.write(ir)
        return []

    # what compiles kernel.ll: the record clang (flang's IR too: flang takes no -W option)
    ir_compiler = os.path.basename(capture.compile_command[0]) if capture.compile_command else "clang"
    if fortran_unit:
        ir_compiler = os.path.basename(compiler)

    def write_rest(tmp, kernel_flags):
        shutil.copyfile(DRIVER, os.path.join(tmp, "driver." + ext))
        threads = (
            (launch.threads if launch and launch.threads else capture.launch.get("threads"))
            if capture.launch.get("openmp") or source_openmp
            else None
        )
        with open(os.path.join(tmp, "mep.h"), "w") as f:
            f.write(
                driver_header(
                    prepared,
                    param_attrs(prepared.ir, capture.kernel),
                    threads,
                    launch.schedule if launch else None,
                    launch.chunk if launch else None,
                    bool(omp),
                )
            )
        with open(os.path.join(tmp, "Makefile"), "w") as f:
            f.write(
                _makefile(
                    info,
                    capture,
                    code,
                    kernel_flags,
                    omp,
                    ir_compiler,
                    kernel_ext,
                )
            )
        with open(os.path.join(tmp, "README.md"), "w") as f:
            f.write(
                _readme(
                    info,
                    capture,
                    variant_text,
                    _record_command(capture),
                    datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                )
            )

    flang = capture.compile_command[0] if fortran_unit else None
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".r3-mep-", dir=parent)
    try:
        try:
            write_rest(tmp, write_source(tmp))
            why = _trial_build(tmp, compiler, flang)  # the record clang builds it, or it is no slice
            if why:
                raise SliceError(why)
        except SliceError as err:
            info.mode, info.why_ir = IR, str(err)
            for name in os.listdir(tmp):
                path = os.path.join(tmp, name)
                shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
            write_rest(tmp, write_ir(tmp))
            why = _trial_build(tmp, compiler, flang)
            if why:
                raise R3Error("the MEP of %s does not build: %s" % (cxxnames.display(capture.kernel), why))
        if info.variant:
            obj = replay_object(prepared, variant, _variant_bitcode(capture, directory, patch, defines, source_openmp))
            os.makedirs(os.path.join(tmp, "r3"))
            with open(os.path.join(tmp, "r3", "kernel.o"), "wb") as f:
                f.write(obj)
        os.makedirs(os.path.join(tmp, "data"))
        _write_image(os.path.join(tmp, "data", "pre.bin"), prepared.pre)
        _write_image(os.path.join(tmp, "data", "post.bin"), prepared.post, zeros=False)
        if os.path.isdir(out):
            os.rmdir(out)
        os.rename(tmp, out)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return info


def _variant_bitcode(capture, directory, patch, defines, openmp=False):
    """The unit's bitcode with the variant's patch and knobs (``openmp``: -fopenmp added), or
    None (the recorded one)."""
    if not (patch or defines):
        return None
    from ..replay.source import variant_bitcode
    from ..compile.stages import CompileError

    try:
        return variant_bitcode(capture, directory, patch, defines, openmp=openmp)
    except CompileError as err:
        raise R3Error("the variant does not compile: %s" % err)


def _trial_build(directory, clang, flang=None):
    """None when ``make`` builds the MEP in ``directory`` with ``clang`` (and ``flang``, for
    a Fortran kernel) (left clean), else the first error line."""
    cxx = os.path.join(os.path.dirname(clang), os.path.basename(clang).replace("clang", "clang++"))
    cxx = cxx if os.path.exists(cxx) else clang
    try:
        proc = subprocess.run(
            ["make", "-s", "CC=" + clang, "CXX=" + cxx] + (["FC=" + flang] if flang else []) + ["mep"],
            cwd=directory,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=COMPILE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return "it did not build within %ss" % COMPILE_TIMEOUT_S
    finally:
        subprocess.run(["make", "-s", "clean"], cwd=directory, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if proc.returncode == 0:
        return None
    lines = proc.stdout.splitlines()
    errors = [l for l in lines if "error" in l or "undefined reference" in l]
    return (errors or lines or ["make failed"])[0].replace(directory + os.sep, "")


def _record_command(capture):
    """The ``r3 record`` line that made the capture, from its run's record.json."""
    import json

    run = os.path.dirname((capture.app or {}).get("run") or "")
    try:
        with open(os.path.join(run, "record.json")) as f:
            request = json.load(f)["request"]
    except (OSError, ValueError, KeyError, TypeError):
        return "(the run's record.json is gone)"
    parts = ["r3 record"]
    if request.get("source"):
        parts.append("--source %s" % request["source"])
    if request.get("build"):
        parts.append("--build '%s'" % request["build"])
    if request.get("run"):
        parts.append("--run '%s'" % request["run"])
    if request.get("instances", 1) != 1:
        parts.append("--instances %d" % request["instances"])
    return " ".join(parts)
