"""``r3-apply``: the compiler launcher that builds tuned units through replay's stages.

    r3-apply COMPILER ARGS...          (with R3_APPLY_PLAN=<plan.json>)

A compile of a unit that the plan names is built in two parts, linked into the object
the build asked for (``ld -r``):

- the tuned kernels, each cut out of the unit and optimized exactly as replay measured
  it: ``compile.stages.optimized_module`` of the same bitcode (the unit compiled with the
  flags record used, the variant's source defines added), emitted for this machine;
- the rest of the unit, with each tuned kernel turned into a declaration, compiled as
  the build would have compiled it (its own optimization and code generation flags).

The unit's writable ``static`` globals (and a ``static`` kernel) are first given hidden
external names, so both parts share one copy. Every other command (other units, links,
preprocessing) runs unchanged. Source patches are not applied here: Spack applies them
(``patch()`` in the emitted package) before the build, so the unit compiled is already
the patched one.

Timed builds (the application check's): with ``R3_APPLY_PROBES=1`` each planned kernel
keeps record's probe wrapper in front of it and links record's runtime, so a run with
``R3_RECORD_DIR`` set (and ``R3_CAPTURE=none``) writes each kernel's time inside the
application; ``R3_APPLY_UNTUNED=1`` builds the same wrappers around the untuned kernels,
the baseline those times are compared with.

A unit the plan marks ``openmp`` (a rewrite added OpenMP threads to a unit its build
compiles without -fopenmp: ``search.openmp``) is compiled with -fopenmp added, that unit
alone; each link then gets LLVM's OpenMP runtime (``openmp_link_args``: as needed, so a
link without the unit's object does not depend on it), since the build's links have no
-fopenmp. A compile-and-link line gets it on its link only: its other sources stay as built.

A kernel specialized on recorded arguments (``Pipeline.specialize``) is built as replay
measured it: its clone behind a guard, the original for other arguments. The unit then
links a destructor that appends each guard's calls and matches to ``$R3_SPEC_LOG`` when
set (``compile/specialize.py``), which the application check reads.

Each tuned unit also links the target check (``targetcheck``): a binary whose tuned kernels
were compiled for a CPU's features refuses, with one line, to run where the CPU lacks them.

A unit that the plan names but that does not build this way fails the build with one
line (``R3_APPLY_FALLBACK=1`` keeps the untuned object instead, with a warning): a
``+r3`` build is what was measured, or nothing.
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

from .. import backends
from ..errors import ToolchainError
from ..iredit import (
    declare_only,
    defines_function,
    function_prefix,
    global_variables,
    make_hidden,
    push_num_threads,
    rename_globals,
)
from ..record.runtime import RUNTIME_FILES
from . import targetcheck
from .bitcode import unit_bitcode
from .plan import Plan, load_plan

PLAN_ENV = "R3_APPLY_PLAN"
PROBES_ENV = "R3_APPLY_PROBES"
UNTUNED_ENV = "R3_APPLY_UNTUNED"
TIMED_PREFIX = "__r3_timed."  # a timed build's kernel body, behind its probe wrapper


# What shapes the objects r3-apply writes, beside the plan: replay's stages (the same
# function replay measured with), the IR edits, the probes and runtime of timed builds.
_BUILD_SOURCES = (
    "emit/apply.py",
    "emit/bitcode.py",
    "emit/targetcheck.py",
    "compile/stages.py",
    "compile/module.py",
    "compile/pipeline.py",
    "settings.py",
    "data.py",  # (each setting's row: its lowering, the Polly stage's options)
    "compile/specialize.py",
    "iredit.py",
    "record/instrument.py",
    "emit/offload.py",
    "emit/cuda.py",
    "emit/hip.py",
    "record/cuda.py",
    "device/hip.py",
    "device/codegen.py",
    "device/deviceir.py",
    "device/geometry.py",
    "record/runtime/r3launch.c",
    "record/runtime/r3hiplaunch.c",
    "record/offload.py",
    *("backends/%s.py" % m for m in ("__init__", "base", "host", "offload", "cuda", "hip")),
    "record/compileline.py",
    "record/flags.py",
    "record/runtime/r3offload.c",
    *("record/runtime/" + f for f in RUNTIME_FILES),
)


def toolchain_digest():
    """A short hash of the spack-r3 code that builds a tuned or timed unit: an emitted
    package carries it, so a newer r3 that builds differently makes Spack build again."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for rel in _BUILD_SOURCES:
        with open(os.path.join(root, rel), "rb") as f:
            h.update(rel.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def warn(msg):
    print("r3-apply: " + msg, file=sys.stderr)


class ApplyError(Exception):
    """One line: why a planned unit could not be built as tuned."""


def _run(argv, what, **kw):
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", **kw)
    if proc.returncode != 0:
        lines = [l for l in (proc.stderr + proc.stdout).splitlines() if l.strip()]
        # ld says where on one line and what on the next ("multiple definition of ...")
        errors = (
            [l for l in lines if "error" in l.lower() or "multiple definition" in l or "undefined reference" in l]
            or lines
            or ["exit status %d" % proc.returncode]
        )
        raise ApplyError("%s failed: %s" % (what, errors[0].strip()))
    return proc.stdout


def shared_names(text, kernels, tag):
    """The unit's text with its writable internal globals, and the ``kernels`` that are
    internal, renamed ``<name>.r3.<tag>`` with hidden visibility; returns (text, {old: new}
    for the kernels, [every writable global]). The kernel module and the rest of the unit
    then name one copy of each. (Text: clang-19 compiles the result.)"""
    renames, writable = {}, []
    for name, words, is_writable in global_variables(text):
        if not is_writable or name.startswith("llvm."):
            continue
        if "internal" in words or "private" in words:
            renames[name] = "%s.r3.%s" % (name, tag)
        writable.append(name)
    for k in kernels:
        if {"internal", "private"} & set(function_prefix(text, k) or ()):
            renames[k] = "%s.r3.%s" % (k, tag)
    if renames:
        text = make_hidden(rename_globals(text, renames), renames.values())
    return text, {k: renames.get(k, k) for k in kernels}, [renames.get(w, w) for w in writable]


def build_unit(line, source, obj, unit, probes=False, tuned=True, plan=None):
    """Build ``obj`` from ``source`` as the plan's ``unit`` (``plan.PlannedUnit``) says (raises ApplyError):
    tuned (or, with ``tuned=False``, as the build would have), with probe wrappers when
    ``probes``. ``plan``: the whole plan (a CUDA unit's GPU and its source's digest)."""
    from ..record.flags import unoptimized_args
    from ..record.compileline import ir_codegen_args
    from ..toolchain import before_llvm_passes, ir_input_flags
    from ..compile.stages import CompileError, KernelIR, optimized_module, resolve_target, target_machine
    from ..iredit import init_native

    backend = backends.of_compile(line.args)
    # a device unit: its backend builds it tuned (untuned: as the build would; it is timed by
    # its launches, r3offload.c / r3cuda.c linked in, so no probes to add)
    if backend is not backends.HOST:
        if tuned:
            backend.build_unit(line, source, obj, unit, plan or Plan("unknown"), _run, ApplyError)
        return
    init_native()
    compiler = line.compiler
    tag = hashlib.sha256(os.path.abspath(source).encode()).hexdigest()[:8]
    defines = ["-D%s=%s" % (k, v) for k, v in sorted(unit.defines.items())] if tuned else []
    # the threads a rewrite added: this unit alone compiles with -fopenmp (each link gets the runtime)
    openmp = ["-fopenmp"] if tuned and unit.openmp else []
    kernels = [k.symbol for k in unit.kernels]
    with tempfile.TemporaryDirectory(prefix="r3-apply-") as tmp:
        ll = os.path.join(tmp, "unit.ll")
        _run(
            [compiler]
            + line.without(drop_sources=True, drop_output=True, drop_deps=True)
            + unoptimized_args(line)
            + openmp
            + defines
            + ["-S", "-emit-llvm"]
            + before_llvm_passes(compiler)
            + [source, "-o", ll],
            "the unit's IR",
        )
        with open(ll) as f:
            original = f.read()
        if tuned:
            text, names, writable = shared_names(original, kernels, tag)
        else:  # one part: nothing to share
            text, names, writable = original, {k: k for k in kernels}, []
        lines = text.split("\n")
        missing = [k for k in kernels if not any(defines_function(l, names[k]) for l in lines)]
        if missing:
            raise ApplyError("%s does not define %s (the source changed since tuning?)" % (source, ", ".join(missing)))
        bitcode = unit_bitcode(compiler, text, tmp, _run)
        if probes:
            text = _with_probes(text, bitcode, [names[k] for k in kernels])
        rest = os.path.join(tmp, "rest.ll")
        with open(rest, "w") as f:
            if tuned:
                f.write(declare_only(text, [(TIMED_PREFIX if probes else "") + names[k] for k in kernels]))
            else:
                f.write(text)
        parts = [os.path.join(tmp, "rest.o")]
        _run(
            [compiler] + ir_codegen_args(line) + ir_input_flags(compiler) + ["-c", rest, "-o", parts[0]],
            "the unit without its kernels" if tuned else "the unit with probes",
        )
        built_for = {}  # (cpu, features) -> a kernel compiled for it: what the target check asks of the CPU
        for k in unit.kernels if tuned else []:
            pipeline, launch = k.pipeline, k.launch
            try:
                source_ir = KernelIR.from_bitcode(
                    names[k.symbol],
                    bitcode,
                    recorded_globals=writable,
                    clang=compiler,
                    build=True,
                    build_level=line.opt_level,
                )
                mod = optimized_module(source_ir, pipeline, launch)
            except CompileError as err:
                raise ApplyError("%s: %s" % (k.symbol, err))
            except Exception as err:  # extraction: what replay would refuse
                raise ApplyError("%s: %s" % (k.symbol, str(err).splitlines()[0] if str(err) else type(err).__name__))
            if launch.threads:
                mod = _with_threads(mod, launch.threads)
            if probes:  # the body behind the wrapper that rest.o now defines
                mod.get_function(names[k.symbol]).name = TIMED_PREFIX + names[k.symbol]
            cpu, features = resolve_target(pipeline, source_ir)
            built_for.setdefault((cpu, features), mod.triple)
            tm = target_machine(mod.triple, cpu, features, pipeline.codegen)
            parts.append(os.path.join(tmp, "kernel-%d.o" % len(parts)))
            with open(parts[-1], "wb") as f:
                f.write(tm.emit_object(mod))
        guarded = [names[k.symbol] for k in unit.kernels if tuned and k.pipeline.specialize]
        if guarded:  # specialized kernels' guards report how often they matched (specialize.reporter_c)
            parts.append(_guard_reporter(compiler, guarded, tmp))
        if built_for:
            check = _target_check(compiler, built_for, tmp)
            parts += [check] if check else []
        if len(parts) == 1:
            shutil.copyfile(parts[0], obj)
            return
        linker = shutil.which("ld") or "ld"
        _run([linker, "-r"] + parts + ["-o", obj], "linking the tuned object")


def _target_check(compiler, built_for, tmp):
    """The object that refuses to run the tuned kernels on a CPU without the features they
    were compiled with (``targetcheck``), or None where there is nothing to check."""
    from ..record.flags import clang_for_runtime

    compiler = clang_for_runtime(compiler)
    names, cpus = [], []
    for (cpu, features), triple in built_for.items():
        if not targetcheck.applies(triple):
            continue
        try:
            found = targetcheck.required_features(compiler, cpu, features)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as err:
            raise ApplyError("the target check of %s: %s" % (cpu, err))
        names += [n for n in found if n not in names]
        cpus += [cpu] if cpu not in cpus else []
    if not names:
        return None
    return targetcheck.check_object(compiler, "/".join(cpus), names, tmp, _run)


def _guard_reporter(compiler, kernels, tmp):
    """An object whose destructor appends the guard counts of ``kernels`` to ``$R3_SPEC_LOG``."""
    from ..compile.specialize import reporter_c

    from ..record.flags import clang_for_runtime

    compiler = clang_for_runtime(compiler)  # C, whatever language the unit is
    path = os.path.join(tmp, "r3-guards.c")
    with open(path, "w") as f:
        f.write(reporter_c(kernels))
    _run([compiler, "-O1", "-fPIC", "-w", "-c", "-x", "c", path, "-o", path[:-2] + ".o"], "the guard counters")
    return path[:-2] + ".o"


def planned_symbol(name):
    """The plan's name of a kernel that a tuned build renamed (a ``static`` kernel gets a
    shared name ``<name>.r3.<tag>``): what a timed run's profile calls it. An offload
    region is its function and line (``record.offload.region_key``): each copy of the
    source (the record's, a Spack stage) names it with that copy's own file ids."""
    from ..record.offload import region_key

    return region_key(re.sub(r"\.r3\.[0-9a-f]{8}$", "", name))


def _with_probes(text, bitcode, kernels):
    """``text`` with record's probe wrapper in front of each of ``kernels``, whose bodies
    become ``TIMED_PREFIX + name``."""
    from ..record.instrument import ModuleAnalysis, instrument_text

    analysis = ModuleAnalysis(bitcode)
    infos = []
    for name in kernels:
        info = analysis.kernel(name)
        if isinstance(info, str):
            raise ApplyError("%s cannot be timed: %s" % (name, info))
        infos.append(info)
    return instrument_text(text, infos, "", orig_prefix=TIMED_PREFIX)


def _with_threads(mod, threads):
    """The kernel's parallel regions run on ``threads`` threads (what ``num_threads(N)``
    compiles to), so one kernel's thread count does not leak into the rest of the run."""
    import llvmlite.binding as llvm

    text, forks = push_num_threads(str(mod), threads)
    if not forks:
        return mod
    out = llvm.parse_assembly(text)
    out.verify()
    return out


def launch(argv):
    from ..record.compileline import CompileLine

    if not argv:
        print("usage: r3-apply COMPILER ARGS...  (with %s=<plan.json>)" % PLAN_ENV, file=sys.stderr)
        return 2
    plan_path = os.environ.get(PLAN_ENV)
    line = CompileLine(argv)
    if not plan_path or line.passthrough or line.language_forced:
        return subprocess.run(argv).returncode
    plan = load_plan(plan_path)
    probes = os.environ.get(PROBES_ENV) == "1"
    tuned = os.environ.get(UNTUNED_ENV) != "1"
    planned = [s for s in line.sources if plan.unit_for(os.path.abspath(s))]
    if line.compile_only and not line.sources and not backends.of_compile(line.args).host_engine:
        from ..record.cuda import gpu_sources  # (.cu, .hip: no host sources of CompileLine's)

        planned = [s for s in gpu_sources(line.args) if plan.unit_for(os.path.abspath(s))]
        line.sources = planned if len(planned) == 1 else line.sources
    if line.compile_only:
        if len(line.sources) != 1 or not planned:  # (several sources with -c: never seen with a plan)
            return subprocess.run(argv).returncode
        obj = line.output or os.path.splitext(os.path.basename(planned[0]))[0] + ".o"
        return _compile(line, argv, planned[0], obj, plan, probes, tuned)
    # A link, possibly compiling planned sources on the way: each planned one built as above.
    from ..record.flags import clang_for_runtime
    from ..record.compileline import link_compiling

    clang = clang_for_runtime(line.compiler)
    try:
        # what times each backend's kernels (probes), then what its tuned kernels need at the
        # link (a CUDA or HIP kernel's planned block and grid: a launch shim)
        extra = (
            [a for b in backends.REGISTRY for a in b.timed_link_args(clang, line)] if probes and not line.shared else []
        )
        extra += [a for b in backends.REGISTRY for a in b.build_link_args(clang, plan, line)] if tuned else []
        if tuned and any(u.openmp for u in plan.units) and not {"-r", "-nostdlib"} & set(line.args):
            extra += openmp_link_args(line.compiler)
    except ToolchainError as err:
        warn(str(err))
        return 1
    return link_compiling(
        line, planned, lambda argv, src, obj: _compile(CompileLine(argv), argv, src, obj, plan, probes, tuned), extra
    )


def openmp_link_args(compiler):
    """What a link needs for a planned unit compiled with -fopenmp added: LLVM's OpenMP
    runtime of the build's clang, found at run time where it was at the link (rpath), and
    only where the link uses it (``--as-needed``). Not -fopenmp: a compile-and-link line
    would compile its other sources with it too."""
    from ..record.flags import clang_for_runtime
    from ..toolchain import find_libomp

    lib = find_libomp(clang_for_runtime(compiler))
    if not lib:
        raise ToolchainError(
            "the plan has a unit compiled with -fopenmp, and LLVM's OpenMP runtime (libomp.so) of %s is not "
            "installed (Debian: apt-get install libomp-19-dev)" % compiler
        )
    lib = os.path.realpath(lib)
    return ["-Wl,--push-state,--as-needed", lib, "-Wl,--pop-state", "-Wl,-rpath," + os.path.dirname(lib)]


def _compile(line, argv, source, obj, plan, probes, tuned):
    """The build's own compile of ``source`` first (its dependency files and diagnostics
    stay the build's), then the planned one over its object."""
    rc = subprocess.run(argv).returncode
    if rc != 0 or not (tuned or probes):
        return rc
    try:
        build_unit(line, source, obj, plan.unit_for(os.path.abspath(source)), probes=probes, tuned=tuned, plan=plan)
    except ApplyError as err:
        if os.environ.get("R3_APPLY_FALLBACK") == "1":
            warn("%s: built untuned: %s" % (source, err))
            subprocess.run(argv)
            return 0
        warn("%s: %s (R3_APPLY_FALLBACK=1 builds it untuned)" % (source, err))
        return 1
    return 0


def main():
    sys.exit(launch(sys.argv[1:]))


if __name__ == "__main__":
    main()
