"""Cut a kernel out of its translation unit and apply a pipeline's IR-level edits.

The replay module holds the kernel and what it reaches (functions, globals),
nothing else, so that functions of the application it never calls need not
resolve. Globals the record runtime snapshotted become external declarations:
replay maps them at their recorded addresses and points the JIT's symbols there.
This module says what to edit; how IR text is read and changed is ``iredit``'s.
"""

import functools
import os
import re
import string

import llvmlite.binding as llvm

from ..iredit import (
    GLOBAL_REF,
    add_fp_flags,
    edit_call_args,
    ensure_declared,
    external_global,
    function_prefix,
    function_span,
    global_ref,
    is_constant_global,
    mark_noalias,
    push_before_forks,
    redirect_calls,
    ref_name,
    set_linkage,
    set_target,
    string_attributes,
    drop_contract,
    split_fmuladd,
    split_module,
    target_triple,
)

REPLAY_FREE = "__r3_replay_free"
REPLAY_FREE_SIZED = "__r3_replay_free_sized"
# Deallocation functions a kernel may call on recorded (arena) memory, which replay must
# not hand to its own allocator: free, and C++'s operator delete (plain and sized).
DEALLOCATORS = {
    "free": REPLAY_FREE,
    "_ZdlPv": REPLAY_FREE,
    "_ZdaPv": REPLAY_FREE,
    "_ZdlPvm": REPLAY_FREE_SIZED,
    "_ZdaPvm": REPLAY_FREE_SIZED,
}


def declared_functions(text):
    """Functions the module calls but does not define (intrinsics and our own aside)."""
    return [
        name
        for kind, name, _ in split_module(text)
        if kind == "declare" and not name.startswith("llvm.") and name not in (REPLAY_FREE, REPLAY_FREE_SIZED)
    ]


class UnreplayableError(Exception):
    """The kernel reaches state the recording did not keep."""


def extract_kernel(bitcode, kernel, recorded_globals, link_units=(), build=False):
    """Textual IR holding ``kernel`` and what it reaches, ready for per-variant edits.

    ``link_units`` are the bitcode of other translation units that define functions
    the kernel calls; they are linked in first. Their writable globals were not
    recorded, so a kernel that reaches one is refused (UnreplayableError).
    """
    module = llvm.parse_bitcode(bitcode)
    own_globals = {g.name for g in module.global_variables}
    for unit in link_units:
        module.link_in(llvm.parse_bitcode(unit))
    return extract_kernel_text(str(module), kernel, recorded_globals, own_globals, build)


# Linkages under which a second definition of a function in the same link is no clash.
_NOT_STRONG = {"private", "internal", "linkonce", "linkonce_odr", "weak", "weak_odr", "available_externally"}


def extract_kernel_text(text, kernel, recorded_globals, own_globals=None, build=False):
    """``extract_kernel`` on textual IR, whichever LLVM printed it (llvmlite's, or an
    ``llvm-dis`` of the same units linked, which an opt stage of that LLVM reads).

    ``own_globals``: the globals the kernel's own unit defines (None: every global), so
    that a writable global of a linked-in unit is refused. ``build``: for a build (r3-apply),
    not replay: deallocation calls stay what they are, and the functions the kernel calls
    become its own internal copies (the rest of the unit keeps defining them).
    """
    entities = split_module(text)
    bodies = {name: text for kind, name, text in entities if kind in ("function", "global")}
    if kernel not in bodies:
        raise KeyError("kernel %s is not defined in its module" % kernel)
    # keep: definitions the kernel reaches; reached: those and the declarations it reaches.
    # Only reached declarations stay, so what replay must resolve is what the kernel calls,
    # not what the rest of its unit (main, a timer library) calls.
    recorded = set(recorded_globals)
    keep, reached, todo = set(), set(), [kernel]
    while todo:
        n = todo.pop()
        if n in reached:
            continue
        reached.add(n)
        if n not in bodies:
            continue
        keep.add(n)
        body = bodies[n]
        if body.startswith("@"):
            if n in recorded:
                continue  # becomes an external declaration: its initializer is not kept
            body = body.split("=", 1)[1]  # the initializer of a global
        todo.extend(ref_name(r) for r in GLOBAL_REF.findall(body))
    out, frees = [], set()
    for kind, name, text in entities:
        if kind == "function":
            if name not in keep:
                continue
            for dealloc, replacement in ({} if build else DEALLOCATORS).items():
                text, calls = redirect_calls(text, dealloc, replacement)
                if calls:
                    frees.add(replacement)
            if name == kernel:  # the trampoline in another module must see it
                text = set_linkage(text, kernel, "")
            elif build and not set(function_prefix(text, name)) & _NOT_STRONG:
                text = set_linkage(text, name, "internal")  # the kernel's own copy of a callee the unit keeps
        elif kind == "global":
            if name.startswith("llvm.") or name not in keep:
                continue
            if name in recorded:
                text = external_global(text)
            elif own_globals is not None and name not in own_globals and not is_constant_global(text):
                raise UnreplayableError(
                    "it reaches %s, a global of another translation unit that the recording did not keep" % name
                )
        elif kind == "declare" and name not in reached:
            continue
        out.append(text)
    if REPLAY_FREE in frees:
        out.append("declare void @%s(ptr)" % REPLAY_FREE)
    if REPLAY_FREE_SIZED in frees:
        out.append("declare void @%s(ptr, i64)" % REPLAY_FREE_SIZED)
    return "\n".join(out) + "\n"


def built_target(text, kernel):
    """(cpu, features) the build compiled ``kernel`` for: the target attributes clang
    wrote on its definition from the compile line's -march (none: the generic CPU of the
    module's triple, as clang's default)."""
    attrs = string_attributes(text, kernel)
    generic = "x86-64" if target_triple(text).split("-")[0] == "x86_64" else "generic"
    cpu, features = attrs.get("target-cpu", generic), attrs.get("target-features", "")
    if not features and cpu != generic:  # flang names the CPU only
        from ..toolchain import cpu_features

        features = cpu_features(cpu, target_triple(text) or llvm.get_process_triple())
    return cpu, features


def contracts_fma(features):
    """Whether code for ``features`` (a target-features string) fuses llvm.fmuladd."""
    return "+fma" in features.split(",")


def contracts_flagged(features, level):
    """Whether a build for ``features`` at optimization ``level`` fused operations marked
    ``contract`` (flang's, clang's under -ffp-contract=fast): at -O0 instruction selection
    takes each operation alone, and CloverLeaf's Fortran, built so by Spack's recipe, never
    fused what an optimized replay did (wrong output on every candidate)."""
    return contracts_fma(features) and level != "0"


# What a generic build leaves on the table: vector widths and fused multiply-add.
VECTOR_FEATURES = (
    "sse4.1",
    "sse4.2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512vl",
    "avx512bw",
    "avx512dq",
    "neon",
    "sve",
    "sve2",
)


def behind_host(features):
    """Whether this machine has vector or FMA features that ``features`` (a build's
    target-features) does not enable: compiling for this machine may then pay."""
    host = llvm.get_host_cpu_features()
    built = {f[1:] for f in features.split(",") if f.startswith("+")}
    return any(host.get(f) and f not in built for f in VECTOR_FEATURES if f in host)


def apply_pipeline_edits(text, kernel, pipeline, cpu, features, built_fma, built_contract=None):
    """The IR-level part of a pipeline: target attributes, FP flags, FMA, noalias.
    ``fma=built`` splits llvm.fmuladd exactly where the build's own target could not fuse
    it (``built_fma`` false), so a variant for another target computes what the
    application computed; and takes the ``contract`` flags off where the build fused
    llvm.fmuladd but not flagged operations (``built_contract`` false: an -O0 build,
    whose instruction selection takes each operation alone). (Text: the same edits feed
    an opt-19 stage, see iredit.)"""
    text = set_target(text, cpu, features)
    if pipeline.fma == "off" or (pipeline.fma == "built" and not built_fma):
        text = split_fmuladd(text)
    elif pipeline.fma == "built" and built_contract is False:
        text = drop_contract(text)
    if pipeline.fast_math:
        text = add_fp_flags(text, pipeline.fast_math)
    if pipeline.noalias:
        text = mark_noalias(text, kernel)
    return text


# OpenMP loops whose schedule is chosen at run time: clang calls __kmpc_dispatch_init_{4,4u,8,8u}
# (loc, gtid, i32 schedule, lb, ub, stride, chunk) and asks the runtime for each chunk, so any
# schedule kind and chunk work. (__kmpc_for_static_init loops compute their own bounds: not these.)
_DISPATCH_INIT = re.compile(r"\bcall void @__kmpc_dispatch_init_(?:4u?|8u?)\(")
SCHEDULE_KINDS = {"static": 34, "dynamic": 35, "guided": 36}  # kmp_sch_*; static with a chunk: 33
_STATIC, _STATIC_CHUNKED, _ORDERED = 34, 33, 32  # kmp_ord_* = kmp_sch_* + 32 (ordered loops stay ordered)
_MODIFIERS = (1 << 29) | (1 << 30)  # monotonic, nonmonotonic: kept as compiled


def dispatch_loops(ir):
    """How many OpenMP loops of a module take a schedule and chunk from ``apply_launch_edits``."""
    return len(_DISPATCH_INIT.findall(ir))


def apply_launch_edits(text, schedule=None, chunk=None):
    """Set the schedule kind (static, dynamic, guided) and chunk of every run-time-scheduled
    OpenMP loop; a module without such loops is returned as it is. ``chunk`` alone keeps each
    loop's kind (``schedule(runtime)`` and ``auto`` loops then ignore it, as the runtime does)."""
    if schedule is None and chunk is None:
        return text
    if schedule is not None and schedule not in SCHEDULE_KINDS:
        raise ValueError("schedule=%s: expected %s" % (schedule, ", ".join(SCHEDULE_KINDS)))
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
        raise ValueError("chunk=%s: expected a positive integer" % (chunk,))

    def edit(args):
        words = args[2].split()
        value = int(words[-1])
        mods = value & _MODIFIERS
        kind = value & ~_MODIFIERS
        ordered = _ORDERED if kind > 64 else 0
        if schedule is not None:
            kind = SCHEDULE_KINDS[schedule] + ordered
        if chunk is not None and kind == _STATIC + ordered:
            kind = _STATIC_CHUNKED + ordered  # plain static divides the loop evenly: no chunk
        args[2] = " ".join(words[:-1] + [str(kind | mods)])
        if chunk is not None:
            args[6] = " ".join(args[6].split()[:-1] + [str(chunk)])
        return args

    return edit_call_args(text, _DISPATCH_INIT, edit)


@functools.lru_cache(maxsize=None)
def _trampoline_template():
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "trampoline.ll")) as f:
        return string.Template(f.read())


def trampoline(kernel, signature, arena_base, arena_end):
    """A separate module: ``__r3_call(slots, ret)`` loads the arguments and calls the kernel,
    ``__r3_timed(slots, ret, n)`` makes n such calls and returns the nanoseconds they took,
    ``__r3_sequence`` replays a sequence of calls, and ``__r3_replay_free`` ignores frees of
    recorded (arena) memory. The fixed functions are the template ``trampoline.ll``; only
    ``__r3_call`` follows the kernel's signature (its types as the record's LLVM printed
    them, text that ``llvmlite.ir`` has no parser for)."""
    params, body, args = [], [], []
    for i, (ty, byval) in enumerate(zip(signature["params"], signature["byval"])):
        body.append("  %%p%d = getelementptr i64, ptr %%slots, i64 %d" % (i, i))
        body.append("  %%a%d = load %s, ptr %%p%d, align 8" % (i, ty, i))
        ty = "ptr byval([%d x i8]) align 8" % byval if byval else ty
        params.append(ty)
        args.append("%s %%a%d" % (ty, i))
    ret = signature["ret"]
    call = "call %s %s(%s)" % (ret, global_ref(kernel), ", ".join(args))
    if ret == "void":
        body.append("  " + call)
    else:
        body += ["  %r = " + call, "  store %s %%r, ptr %%ret, align 8" % ret]
    lines = [
        "declare %s %s(%s)" % (ret, global_ref(kernel), ", ".join(params)),
        "define void @__r3_call(ptr %slots, ptr %ret) {",
        *body,
        "  ret void",
        "}",
    ]
    fixed = _trampoline_template().substitute(
        arena_base=arena_base, arena_end=arena_end, replay_free=REPLAY_FREE, replay_free_sized=REPLAY_FREE_SIZED
    )
    return "\n".join(lines) + "\n" + fixed


# A fork of the teams of a `target teams` region in its device function, and a push of the
# geometry that precedes one (the region's num_teams / thread_limit clauses).
_FORK_TEAMS = re.compile(r"^(\s*)call void (?:\([^)]*\) )?@__kmpc_fork_teams\((ptr [^,]+), ", re.M)
_PUSH = re.compile(r"(call void @__kmpc_push_num_teams\(ptr [^,]+, i32 [^,]+), i32 [^,)]+, i32 [^,)]+\)")


def apply_geometry(text, kernel, launch):
    """``text`` (a module's IR) with ``launch.num_teams`` / ``launch.thread_limit`` (None or
    0: the runtime's choice) set for the teams the device function ``kernel`` forks: its
    clauses' push replaced, or a push added before each fork. A kernel that forks no teams
    has no geometry to set: ValueError."""
    teams, limit = getattr(launch, "num_teams", None), getattr(launch, "thread_limit", None)
    if not teams and not limit:
        return text
    span = function_span(text, kernel)
    if span is None:
        raise ValueError("the device function %s is not in its module" % kernel)
    start, end = span
    body = text[start:end]
    if not _FORK_TEAMS.search(body):
        raise ValueError("%s forks no teams: num_teams and thread_limit do not apply" % kernel)
    values = "i32 %d, i32 %d" % (teams or 0, limit or 0)
    if _PUSH.search(body):
        body = _PUSH.sub(lambda m: "%s, %s)" % (m.group(1), values), body)
    else:
        body = push_before_forks(body, _FORK_TEAMS, "__kmpc_push_num_teams", values)[0]
    text = text[:start] + body + text[end:]
    return ensure_declared(
        text, ["declare i32 @__kmpc_global_thread_num(ptr)", "declare void @__kmpc_push_num_teams(ptr, i32, i32, i32)"]
    )
