"""Variant -> optimized module: the one road from a kernel's IR to the code that runs.

Replay measures what this builds, and a build (a compiler launcher building tuned
units) must build the same, so both call ``optimized_module``:

1. IR edits (text): target CPU and features attributes, fast-math flags, FMA split,
   ``noalias`` (``module.apply_pipeline_edits``), and the OpenMP schedule and chunk of
   loops scheduled at run time (``module.apply_launch_edits``); with ``specialize``, the
   kernel behind a guard, its clone with those arguments folded in (``specialize.py``).
2. With ``polly``: an ``opt -O3 -polly`` stage of the LLVM that wrote the bitcode
   (Debian's opt-19 has Polly built in; llvmlite's LLVM 22 has no Polly, prints IR that
   LLVM 19 cannot parse, and writes bitcode it cannot read, while it reads LLVM 19's).
   The stage starts from that LLVM's own text of the same units (``KernelIR.tool_ir``),
   and its bitcode output goes on to step 3.
3. llvmlite's pass pipeline: the O-level, tuning options, extra passes.

The baseline is the exception (``build_object``): the kernel compiled by the build's own
clang with the build's own flags, the code the untuned application runs. llvmlite's LLVM
is newer than the record clang's and its O3 is not clang's: measured, heat's stencil and
cg's spmv ran slower built by it, and a candidate beating that was a "gain" the
application never saw.

Nothing here knows about recorded memory: a ``KernelIR`` is a kernel's module and,
for an opt stage, the bitcode it came from.
"""

import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Dict, Optional, Tuple

import llvmlite
import llvmlite.binding as llvm

from ..errors import ToolchainError
from .. import fortran, settings, toolchain
from ..fileutil import write_atomic
from ..lifetime import die_with_parent
from ..iredit import rename_globals, target_triple
from .module import (
    apply_geometry,
    apply_launch_edits,
    apply_pipeline_edits,
    built_target,
    contracts_flagged,
    contracts_fma,
    dispatch_loops,
    extract_kernel,
    extract_kernel_text,
)
from .specialize import return_type, specialize_text

__all__ = [
    "CompileError",
    "KernelIR",
    "optimized_module",
    "build_object",
    "build_flags",
    "resolve_target",
    "target_machine",
    "run_pipeline",
    "polly_tools",
    "polly_available",
    "polly_options",
    "dispatch_loops",
    "module_triple",
    "POLLY_TIMEOUT_S",
]

# Bounds the opt stage: Polly's analysis of one dense loop nest with run-time sizes can take
# many seconds; below the replay server's default candidate timeout (60 s), so a run-away stage is a
# compile error, not a lost candidate. ``R3_POLLY_TIMEOUT`` overrides it.
POLLY_TIMEOUT_S = 50.0


class CompileError(Exception):
    """A variant that does not compile: one line saying why."""


# Seconds spent in each stage of the evaluation under way in this process (the candidate's
# child resets it): compile stages, restores, runs, checks. ``Evaluation.stages`` reports it.
SPENT: Dict[str, float] = {}


@contextmanager
def spent(stage):
    """Adds the time the block takes to ``SPENT[stage]``."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        SPENT[stage] = SPENT.get(stage, 0.0) + time.perf_counter() - t0


@dataclass
class KernelIR:
    """A kernel's module before optimization.

    ``ir`` is its textual IR as llvmlite prints it (what the pipeline parses). An opt
    stage needs the same module in its own LLVM's text, built from ``bitcode`` (the
    kernel's unit as clang wrote it) and ``link_units`` (other units it calls into),
    cut down to the kernel (``extract``) the way ``ir`` was; ``recorded_globals`` become
    external declarations there, as in ``ir``. ``clang``: the compiler that wrote the
    bitcode, whose LLVM version the opt stage uses.
    """

    kernel: str
    ir: str
    bitcode: Optional[bytes] = None
    link_units: Tuple[bytes, ...] = ()
    recorded_globals: Tuple[str, ...] = ()
    clang: Optional[str] = None
    extract: bool = True  # False: ``ir`` is the whole unit, not the kernel cut out
    build: bool = False  # cut out for a build (r3-apply), not for replay: frees stay frees
    build_level: Optional[str] = None  # the build's -O level (None: unknown, taken as optimized)
    _tool_ir: Dict[int, str] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_bitcode(
        cls,
        kernel,
        bitcode,
        link_units=(),
        recorded_globals=(),
        clang=None,
        extract=True,
        build=False,
        build_level=None,
    ):
        """The kernel of a unit's bitcode, in llvmlite's text (raises what ``extract_kernel`` raises)."""
        if extract:
            ir = extract_kernel(bitcode, kernel, list(recorded_globals), list(link_units), build)
        else:
            module = llvm.parse_bitcode(bitcode)
            for unit in link_units:
                module.link_in(llvm.parse_bitcode(unit))
            ir = str(module)
        return cls(kernel, ir, bitcode, tuple(link_units), tuple(recorded_globals), clang, extract, build, build_level)

    @functools.cached_property
    def built(self):
        """(cpu, features) the build compiled the kernel for (``module.built_target``)."""
        return built_target(self.ir, self.kernel)

    @property
    def built_fusion(self):
        """(llvm.fmuladd fused, ``contract`` operations fused) by the build's own code."""
        features = self.built[1]
        return contracts_fma(features), contracts_flagged(features, self.build_level or "2")

    def tool_ir(self, tools, timeout=POLLY_TIMEOUT_S):
        """The same module in the text of ``tools``' LLVM (``llvm-link`` + ``llvm-dis`` of the
        bitcode, then the same extraction); computed once per KernelIR and LLVM version."""
        if tools.version in self._tool_ir:
            return self._tool_ir[tools.version]
        if self.bitcode is None:
            raise CompileError("polly needs the kernel's bitcode (an opt stage cannot read llvmlite's IR)")
        with tempfile.TemporaryDirectory(prefix="r3-stage-") as tmp:
            paths = []
            for i, data in enumerate((self.bitcode,) + tuple(self.link_units)):
                paths.append(os.path.join(tmp, "unit%d.bc" % i))
                with open(paths[-1], "wb") as f:
                    f.write(data)
            if len(paths) > 1:
                linked = os.path.join(tmp, "linked.bc")
                _run_tool([tools.link] + paths + ["-o", linked], timeout)
                paths = [linked]
            text = _run_tool([tools.dis, paths[0], "-o", "-"], timeout).decode()
        if self.extract:
            own = {g.name for g in llvm.parse_bitcode(self.bitcode).global_variables}
            text = extract_kernel_text(text, self.kernel, list(self.recorded_globals), own, self.build)
        self._tool_ir[tools.version] = text
        return text


def resolve_target(pipeline, source, cpu=None, features=None):
    """(cpu, features) a variant of ``source`` (a KernelIR) is compiled for: the
    pipeline's own where it names them, the kernel's as built where it says ``built``,
    else ``cpu``/``features`` (the machine a build targets), else this host's."""
    if "built" in (pipeline.cpu, pipeline.features):
        built_cpu, built_features = source.built
        pipeline = replace(
            pipeline,
            cpu=built_cpu if pipeline.cpu == "built" else pipeline.cpu,
            features=built_features if pipeline.features == "built" else pipeline.features,
        )
    if pipeline.cpu == "host" and cpu is None:
        cpu = llvm.get_host_cpu_name()
    if pipeline.features == "host" and features is None:
        features = llvm.get_host_cpu_features().flatten()
    return (
        cpu if pipeline.cpu == "host" else pipeline.cpu,
        features if pipeline.features == "host" else pipeline.features,
    )


def module_triple(ir):
    """The module's target triple, else this process's."""
    return target_triple(ir) or llvm.get_process_triple()


def target_machine(triple, cpu, features, codegen=3, jit=False):
    """A fresh target machine (an MCJIT engine owns the one it is given)."""
    target = llvm.Target.from_triple(triple)
    if jit:
        return target.create_target_machine(cpu=cpu, features=features, opt=codegen, codemodel="jitdefault", jit=True)
    return target.create_target_machine(cpu=cpu, features=features, opt=codegen, reloc="pic", codemodel="default")


def optimized_module(source, pipeline, launch=None, cpu=None, features=None, tm=None, timeout=None):
    """The optimized llvmlite module of one variant of a kernel.

    ``source``: a KernelIR. ``pipeline``: a data.Pipeline; ``launch``: a data.Launch
    (only its OpenMP schedule and chunk touch the code) or None. ``cpu``/``features``:
    the target where the pipeline says ``host`` (default: this machine). ``tm``: the
    target machine the pipeline optimizes for (a JIT's, which then compiles the module);
    None: a new one for ``cpu``/``features``/``pipeline.codegen``. ``timeout``: seconds
    for each tool of the opt stage. Raises CompileError with one line.
    """
    cpu, features = resolve_target(pipeline, source, cpu, features)

    def edits(text):
        text = apply_pipeline_edits(text, source.kernel, pipeline, cpu, features, *source.built_fusion)
        if launch is not None:
            try:
                text = apply_launch_edits(text, launch.schedule, launch.chunk)
                text = apply_geometry(text, source.kernel, launch)  # an offload region's teams
            except ValueError as err:
                raise CompileError(str(err))
        if pipeline.specialize:  # last: the clone and the original carry every edit above
            try:
                text = specialize_text(text, source.kernel, pipeline.specialize, return_type(source.ir, source.kernel))
            except ValueError as err:
                raise CompileError(str(err))
        return text

    if pipeline.polly:
        with spent("opt"):  # on the kernel alone (``KernelIR.tool_ir``), cached (``_cached_stage``)
            limit = timeout or float(os.environ.get("R3_POLLY_TIMEOUT") or POLLY_TIMEOUT_S)
            tools = polly_tools(source.clang)
            text = edits(source.tool_ir(tools, limit))
            bitcode = _cached_stage([tools.opt] + polly_options(pipeline) + ["-", "-o", "-"], limit, text.encode())
        with spent("pipeline"):
            try:
                mod = llvm.parse_bitcode(bitcode)
                mod.verify()
            except RuntimeError as err:
                raise CompileError("the polly stage's output is rejected: %s" % _last_error(str(err)))
    else:
        with spent("pipeline"):
            try:
                mod = llvm.parse_assembly(edits(source.ir))
                mod.verify()
            except RuntimeError as err:
                raise CompileError("IR rejected: %s" % _last_error(str(err)))
    with spent("pipeline"):
        if tm is None:
            tm = target_machine(mod.triple or llvm.get_process_triple(), cpu, features, pipeline.codegen)
        run_pipeline(mod, tm, pipeline)
    return mod


# Flags of a compile line that do not belong in an object of the kernel alone: LTO would
# write bitcode, profiling, coverage and sanitizers call runtimes replay does not load,
# and debug information changes no code.
_NOT_FOR_THE_OBJECT = ("-flto", "-fno-lto", "-ffat-lto", "-fprofile", "-fcoverage", "-fsanitize", "-g", "-fdebug", "-W")


def build_flags(compile_command):
    """The build's flags that shape a kernel's code (optimization, target, code generation)
    from its recorded compile command."""
    from ..record.compileline import CompileLine, codegen_args

    return [a for a in codegen_args(CompileLine(list(compile_command))) if not a.startswith(_NOT_FOR_THE_OBJECT)]


def build_object(source, flags, timeout=None):
    """The kernel compiled as its build compiled it: the record clang (``source.clang``),
    with the build's ``flags``, on the kernel cut out of its unit in that clang's own
    LLVM text. Returns the object's bytes; CompileError where that clang or its LLVM
    tools are gone."""
    limit = timeout or float(os.environ.get("R3_POLLY_TIMEOUT") or POLLY_TIMEOUT_S)
    version = toolchain.llvm_major(source.clang)
    if version is None:
        raise CompileError("the record compiler %s is not a clang or flang found here" % (source.clang or "(none)"))
    if fortran.is_flang(source.clang):  # flang's flags (-ffree-form, ...) are not clang's
        compiler = fortran.flang_of_version(source.clang, version)
        flags, quiet = fortran.codegen_flags(flags), []
    else:
        compiler = toolchain.clang_of_version(source.clang, version)
        quiet = ["-Wno-override-module", "-Wno-unused-command-line-argument"]
    if compiler is None:
        name = "flang-new" if fortran.is_flang(source.clang) else "clang"
        raise CompileError("%s-%d, the record compiler, is not found here" % (name, version))
    try:
        tools = toolchain.find_llvm_tools(version, version)
    except ToolchainError as err:
        raise CompileError("the build's code needs the LLVM %d tools: %s" % (version, err))
    text = source.tool_ir(tools, limit)
    argv = [compiler] + list(flags) + quiet + ["-c", "-x", "ir", "-", "-o", "-"]
    return _cached_stage(argv, limit, text.encode(), stage="build", suffix=".o")


STAGE_CACHE_ENV = "R3_STAGE_CACHE"


def _cached_stage(argv, timeout, data, stage="polly", suffix=".bc"):
    """The opt stage's bitcode, from the stage cache when the same tool already ran with
    the same options on the same text (Polly's analysis of one loop nest can take long;
    a search and its confirmation ask for the same stage many times). The cache is the
    directory ``$R3_STAGE_CACHE`` (the replay server sets it to the workspace's);
    unset: no cache."""
    cache = os.environ.get(STAGE_CACHE_ENV)
    if not cache:
        return _run_tool(argv, timeout, data, stage=stage)
    key = hashlib.sha256(json.dumps([argv, os.path.getmtime(argv[0])]).encode() + b"\0" + data).hexdigest()
    path = os.path.join(cache, key[:2], key + suffix)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        pass
    out = _run_tool(argv, timeout, data, stage=stage)
    try:  # atomic: concurrent candidates may write the same entry
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, out)
    except OSError:
        pass  # a cache that cannot be written costs time, not the candidate
    return out


# "0": none of the cuts in an evaluation's cost (the object cache, the calibration run taken
# from the verification run, racing): what bench_evalcost.py measures as "before"
EVAL_CUTS_ENV = "R3_EVAL_CUTS"


def cuts():
    """Whether the cuts in an evaluation's cost are on (``$R3_EVAL_CUTS`` is not 0)."""
    return os.environ.get(EVAL_CUTS_ENV) != "0"


def object_key(source, pipeline, launch, cpu, features):
    """What a candidate's machine code depends on: the kernel's module (and the bitcode an opt
    stage starts from), the pipeline, the target, and the launch settings that edit the code
    (an OpenMP schedule and chunk, an offload region's geometry), not its thread count; None
    where no object cache is kept (``$R3_STAGE_CACHE`` unset, or ``$R3_EVAL_CUTS`` is 0)."""
    if not os.environ.get(STAGE_CACHE_ENV) or not cuts():
        return None
    code_launch = None if launch is None else json.dumps(replace(launch, threads=None).to_json(), sort_keys=True)
    h = hashlib.sha256()
    for part in (
        source.ir,
        source.bitcode or b"",
        *source.link_units,
        json.dumps(pipeline.to_json(), sort_keys=True),
        code_launch or "",
        cpu or "",
        features or "",
        "%s %s %s %s" % (llvmlite.__version__, llvm.llvm_version_info, source.extract, source.build),
        "fusion %s %s" % source.built_fusion,  # (what fma=built keeps: the build's target and -O level)
        _code_stamp(),
        str(_tool_stamp(source) if pipeline.polly else ""),
    ):
        h.update(part if isinstance(part, bytes) else part.encode(errors="surrogateescape"))
        h.update(b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _code_stamp():
    """r3's own code that edits a module before it is compiled: an object cached by an older
    r3 (another IR edit, another fact about the build) is not this one's."""
    from .. import iredit
    from . import module, specialize

    h = hashlib.sha256()
    for mod in (iredit, module, specialize, sys.modules[__name__]):
        with open(mod.__file__, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def _tool_stamp(source):
    """The opt a Polly stage runs, as (path, mtime): a new opt makes new objects."""
    try:
        opt = polly_tools(source.clang).opt
        return opt, os.path.getmtime(opt)
    except (CompileError, OSError):
        return None


def cached_object(key):
    """(object bytes, optimized IR text) compiled before under ``key``, or None."""
    if key is None:
        return None
    path = os.path.join(os.environ[STAGE_CACHE_ENV], "objects", key[:2], key)
    try:
        with open(path + ".o", "rb") as f:
            obj = f.read()
        with open(path + ".ll.z", "rb") as f:
            ir = zlib.decompress(f.read()).decode(errors="surrogateescape")
    except (OSError, zlib.error):
        return None
    return obj, ir


def keep_object(key, obj, ir):
    """Keep a candidate's object and its optimized IR (the code digest is taken from it) under ``key``."""
    if key is None:
        return
    path = os.path.join(os.environ[STAGE_CACHE_ENV], "objects", key[:2], key)
    try:  # the IR first: an object is looked up with its IR, and read only when both are there
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path + ".ll.z", zlib.compress(ir.encode(errors="surrogateescape"), 1))
        write_atomic(path + ".o", obj)
    except OSError:
        pass  # a cache that cannot be written costs time, not the candidate


def run_pipeline(mod, tm, p):
    """llvmlite's pass pipeline of ``p`` on ``mod``: the O-level, tuning options, extra passes."""
    level = {"0": 0, "1": 1, "2": 2, "3": 3, "s": 2, "z": 2}[p.opt]
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    if p.opt in ("s", "z"):  # llvmlite has no size levels: approximate -Os/-Oz by their tuning
        pto.inlining_threshold = 75 if p.opt == "s" else 25
        pto.loop_unrolling = False
        if p.opt == "z":
            pto.loop_vectorization = pto.slp_vectorization = False
    for attr, value in (
        ("loop_vectorization", p.loop_vectorize),
        ("slp_vectorization", p.slp_vectorize),
        ("loop_unrolling", p.unroll),
        ("loop_interleaving", p.interleave),
        ("inlining_threshold", p.inline_threshold),
    ):
        if value is not None:
            setattr(pto, attr, value)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    if p.passes:
        extra = llvm.create_new_module_pass_manager()
        for name in p.passes:
            getattr(extra, "add_%s_pass" % name)()
        extra.run(mod, pb)


def polly_tools(clang=None):
    """The opt, llvm-link and llvm-dis of the LLVM that ``clang`` (the record compiler;
    default: the one record uses) belongs to, or a newer one llvmlite still reads.
    CompileError with one line where they are missing."""
    newest = llvm.llvm_version_info[0]
    version = toolchain.llvm_major(clang)
    try:
        version = version or toolchain.clang_major(toolchain.find_clang())
    except ToolchainError:
        version = None
    if version is None:
        raise CompileError(
            "polly needs opt, llvm-link and llvm-dis of the record clang's LLVM, and no clang "
            "was found to tell its version"
        )
    try:
        return toolchain.find_llvm_tools(version, newest)
    except ToolchainError as err:
        raise CompileError("polly needs opt-%d, llvm-link-%d and llvm-dis-%d: %s" % (version, version, version, err))


def renamed_bitcode(bitcode, renames, clang=None):
    """``bitcode`` (``clang``'s) with the globals of ``renames`` ({old: new}) renamed, as
    bitcode of ``clang``'s own LLVM where its tools are here: llvmlite writes its newer
    LLVM's, which the Polly stage's LLVM 19 tools cannot read ("Unknown attribute kind")."""
    try:
        tools = polly_tools(clang)
    except CompileError:
        tools = None
    if tools is None:
        mod = llvm.parse_bitcode(bitcode)
        for fn in mod.functions:
            if fn.name in renames:
                fn.name = renames[fn.name]
        return mod.as_bitcode()
    text = _run_tool([tools.dis, "-", "-o", "-"], POLLY_TIMEOUT_S, bitcode).decode()
    return _run_tool([tools.opt, "-", "-o", "-"], POLLY_TIMEOUT_S, rename_globals(text, renames).encode())


def polly_available(clang=None):
    """True when a Polly stage can run for bitcode of ``clang`` (the search offers it then)."""
    try:
        return toolchain.opt_has_polly(polly_tools(clang).opt)
    except CompileError:
        return False


def polly_options(p):
    """opt's command line for the Polly stage of pipeline ``p`` (input and output aside):
    the LLVM options of Polly's rows (``settings.lower``).

    Only Polly's own knobs reach opt; the pipeline's tuning options (vectorize, unroll,
    inline...) act in llvmlite's pipeline after it. That keeps the stage's output a
    function of few settings, so the stage cache serves most candidates of a search."""
    return ["-O3"] + list(settings.lower(p, rows=settings.POLLY_ROWS).llvm)


# opt warns about CPU names and features of a newer LLVM (the host's, as llvmlite names
# them) and ignores them: not errors.
_WARNING = re.compile(r"is not a recognized (?:feature|processor) for this target|^\s*$")


def _run_tool(argv, timeout, data=None, stage=None):
    """stdout of ``argv`` (bounded by ``timeout``); CompileError with its first error line."""
    name = os.path.basename(argv[0])
    what = "%s -%s" % (name, stage) if stage else name
    try:
        proc = subprocess.run(
            argv,
            input=data,
            stdin=None if data is not None else subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            preexec_fn=die_with_parent,  # (a candidate killed at its deadline)
        )
    except subprocess.TimeoutExpired:
        raise CompileError("%s took longer than %.0fs (R3_POLLY_TIMEOUT)" % (what, timeout))
    except OSError as err:
        raise CompileError("%s cannot run: %s" % (what, err))
    if proc.returncode != 0:
        lines = [l.strip() for l in proc.stderr.decode(errors="replace").splitlines() if not _WARNING.search(l)]
        errors = [l for l in lines if "error" in l.lower()] or lines
        if stage == "polly" and any("Unknown command line argument" in l and "polly" in l for l in lines):
            raise CompileError("polly needs an opt with Polly built in (Debian's opt-19 has it); %s has not" % argv[0])
        raise CompileError("%s failed: %s" % (what, errors[0] if errors else "exit status %d" % proc.returncode))
    return proc.stdout


def _last_error(message):
    lines = [l.strip() for l in message.splitlines() if "error" in l] or [message.strip()]
    return lines[-1]
