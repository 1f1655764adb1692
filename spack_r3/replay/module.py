"""Cut a kernel out of its translation unit and apply a pipeline's IR-level edits.

The replay module holds the kernel and what it reaches (functions, globals),
nothing else, so that functions of the application it never calls need not
resolve. Globals the record runtime snapshotted become external declarations:
replay maps them at their recorded addresses and points the JIT's symbols there.
"""

import re

import llvmlite.binding as llvm

from ..iredit import (
    FunctionDef,
    GLOBAL_REF,
    external_global,
    find_define,
    global_ref,
    is_constant_global,
    matching,
    ref_name,
    split_module,
    split_top,
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
                if "call void @%s(" % dealloc in text:
                    text = text.replace("call void @%s(" % dealloc, "call void @%s(" % replacement)
                    frees.add(replacement)
            if name == kernel:  # the trampoline in another module must see it
                lines = text.split("\n")
                d = FunctionDef(lines[0], kernel)
                lines[0] = d.render(kernel, prefix=d.linkage_free_prefix)
                text = "\n".join(lines)
            elif build:  # a callee the rest of the unit still defines: the kernel's own copy
                lines = text.split("\n")
                d = FunctionDef(lines[0], name)
                if not set(d.prefix.split()) & _NOT_STRONG:
                    lines[0] = d.render(name, prefix=("internal " + d.linkage_free_prefix).strip())
                    text = "\n".join(lines)
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


_FP_OPS = re.compile(
    r"(= )(fadd|fsub|fmul|fdiv|frem|fneg)( (?:(?:fast|reassoc|nnan|ninf|nsz|arcp|contract|afn) )*)"
    r"((?:float|double|half|<\d+ x (?:float|double|half)>) )"
)
_FP_CALL = re.compile(
    r"(= (?:tail |notail |musttail )?call )((?:(?:fast|reassoc|nnan|ninf|nsz|arcp|contract|afn) )*)"
    r"((?:float|double|half|<\d+ x (?:float|double|half)>) @llvm\.)"
)
_FCMP = re.compile(r"(= fcmp )((?:(?:fast|reassoc|nnan|ninf|nsz|arcp|contract|afn) )*)")
_FMULADD = re.compile(
    r"^(\s*)(%[-\w.]+) = (?:tail )?call ((?:fast|reassoc|nnan|ninf|nsz|arcp|contract|afn) )*"
    r"(float|double|<\d+ x (?:float|double)>) @llvm\.fmuladd\.[\w.]+\("
    r"\4 (?:noundef )?([^,()]+), \4 (?:noundef )?([^,()]+), \4 (?:noundef )?([^,()]+)\)(.*)$",
    re.M,
)


def _merge_flags(existing, flags):
    have = set(existing.split())
    if "fast" in have:
        return existing
    return " " + " ".join(sorted(have | set(flags))) + " " if (have | set(flags)) else " "


def built_target(text, kernel):
    """(cpu, features) the build compiled ``kernel`` for: the target attributes clang
    wrote on its definition from the compile line's -march (none: the generic CPU of the
    module's triple, as clang's default)."""
    lines = text.split("\n")
    attrs = ""
    try:
        tail = lines[find_define(lines, kernel)].rsplit(")", 1)[-1]
    except (KeyError, ValueError):
        tail = ""
    for group in re.findall(r"#(\d+)", tail):
        m = re.search(r"^attributes #%s = \{(.*)\}\s*$" % group, text, re.M)
        attrs += m.group(1) if m else ""
    cpu = re.search(r'"target-cpu"="([^"]*)"', attrs)
    features = re.search(r'"target-features"="([^"]*)"', attrs)
    triple = re.search(r'^target triple = "([^"-]*)', text, re.M)
    generic = "x86-64" if triple and triple.group(1) == "x86_64" else "generic"
    return (cpu.group(1) if cpu else generic), (features.group(1) if features else "")


def contracts_fma(features):
    """Whether code for ``features`` (a target-features string) fuses llvm.fmuladd."""
    return "+fma" in features.split(",")


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


# A pointer parameter's type, its address space included (attributes follow the whole type:
# ``ptr addrspace(1) noalias %x``, never ``ptr noalias addrspace(1)``).
_PTR_TYPE = re.compile(r"^(ptr(?: addrspace\(\d+\))?) ")


def apply_pipeline_edits(text, kernel, pipeline, cpu, features, built_fma):
    """The IR-level part of a pipeline: target attributes, FP flags, FMA, noalias.
    ``fma=built`` splits llvm.fmuladd exactly where the build's own target could not fuse
    it (``built_fma`` false), so a variant for another target computes what the
    application computed."""
    split_fma = pipeline.fma == "off" or (pipeline.fma == "built" and not built_fma)
    text = re.sub(r'"target-cpu"="[^"]*"', '"target-cpu"="%s"' % cpu, text)
    text = re.sub(r'"target-features"="[^"]*"', '"target-features"="%s"' % features, text)
    text = re.sub(r'"tune-cpu"="[^"]*"', '"tune-cpu"="%s"' % cpu, text)
    if split_fma:

        def split(m):
            product = "%r3.fmul." + m.group(2)[1:]  # numbered ids take no suffix: a new name
            return "%s%s = fmul %s %s, %s\n%s%s = fadd %s %s, %s%s" % (
                m.group(1),
                product,
                m.group(4),
                m.group(5),
                m.group(6),
                m.group(1),
                m.group(2),
                m.group(4),
                product,
                m.group(7),
                m.group(8),
            )

        text = _FMULADD.sub(split, text)
    if pipeline.fast_math:
        flags = pipeline.fast_math
        text = _FP_OPS.sub(lambda m: m.group(1) + m.group(2) + _merge_flags(m.group(3), flags) + m.group(4), text)
        text = _FP_CALL.sub(lambda m: m.group(1) + _merge_flags(m.group(2), flags).lstrip() + m.group(3), text)
        cmp_flags = [f for f in flags if f in ("nnan", "ninf", "nsz")]
        if cmp_flags:
            text = _FCMP.sub(lambda m: m.group(1) + _merge_flags(m.group(2), cmp_flags).lstrip(), text)
    if pipeline.noalias:
        text = mark_noalias(text, kernel)
    return text


def mark_noalias(text, kernel):
    """``kernel``'s pointer parameters marked ``noalias`` (in any address space)."""
    lines = text.split("\n")
    i = find_define(lines, kernel)
    d = FunctionDef(lines[i], kernel)
    params = [_PTR_TYPE.sub(r"\1 noalias ", p, count=1) if "noalias" not in p else p for p in d.params]
    lines[i] = d.render(kernel, params=params)
    return "\n".join(lines)


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
    out, last = [], 0
    for m in _DISPATCH_INIT.finditer(text):
        open_paren = m.end() - 1
        close = matching(text, open_paren)
        args = split_top(text[open_paren + 1 : close - 1])
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
        out += [text[last : open_paren + 1], ", ".join(args), ")"]
        last = close
    out.append(text[last:])
    return "".join(out)


def trampoline(kernel, signature, arena_base, arena_end):
    """A separate module: ``__r3_call(slots, ret)`` loads the arguments and calls the kernel,
    ``__r3_timed(slots, ret, n)`` makes n such calls and returns the nanoseconds they took,
    and ``__r3_replay_free`` ignores frees of recorded (arena) memory."""
    params, loads, args = [], [], []
    for i, (ty, byval) in enumerate(zip(signature["params"], signature["byval"])):
        loads.append("  %%p%d = getelementptr i64, ptr %%slots, i64 %d" % (i, i))
        loads.append("  %%a%d = load %s, ptr %%p%d, align 8" % (i, ty, i))
        if byval:
            params.append("ptr byval([%d x i8]) align 8" % byval)
            args.append("ptr byval([%d x i8]) align 8 %%a%d" % (byval, i))
        else:
            params.append(ty)
            args.append("%s %%a%d" % (ty, i))
    ret = signature["ret"]
    lines = [
        "declare %s %s(%s)" % (ret, global_ref(kernel), ", ".join(params)),
        "declare void @free(ptr)",
        "define void @%s(ptr %%p) {" % REPLAY_FREE,
        "  %i = ptrtoint ptr %p to i64",
        "  %%lo = icmp uge i64 %%i, %d" % arena_base,
        "  %%hi = icmp ult i64 %%i, %d" % arena_end,
        "  %in = and i1 %lo, %hi",
        "  br i1 %in, label %skip, label %real",
        "real:",
        "  call void @free(ptr %p)",
        "  ret void",
        "skip:",
        "  ret void",
        "}",
        "define void @%s(ptr %%p, i64 %%n) {" % REPLAY_FREE_SIZED,
        "  call void @%s(ptr %%p)" % REPLAY_FREE,
        "  ret void",
        "}",
        "define void @__r3_call(ptr %slots, ptr %ret) {",
    ]
    lines += loads
    call = "call %s %s(%s)" % (ret, global_ref(kernel), ", ".join(args))
    if ret == "void":
        lines.append("  " + call)
    else:
        lines += ["  %r = " + call, "  store %s %%r, ptr %%ret, align 8" % ret]
    lines += ["  ret void", "}"]
    # __r3_timed(slots, ret, n): n calls back to back, timed here rather than around a
    # ctypes call, whose few hundred nanoseconds would hide a short kernel's own time.
    lines += [
        "declare i32 @clock_gettime(i32, ptr)",
        "define i64 @__r3_timed(ptr %slots, ptr %ret, i64 %n) {",
        "entry:",
        "  %t0 = alloca [2 x i64], align 8",
        "  %t1 = alloca [2 x i64], align 8",
        "  call i32 @clock_gettime(i32 1, ptr %t0)",
        "  %none = icmp eq i64 %n, 0",
        "  br i1 %none, label %done, label %loop",
        "loop:",
        "  %i = phi i64 [ 0, %entry ], [ %next, %loop ]",
        "  call void @__r3_call(ptr %slots, ptr %ret)",
        "  %next = add i64 %i, 1",
        "  %more = icmp ult i64 %next, %n",
        "  br i1 %more, label %loop, label %done",
        "done:",
        "  call i32 @clock_gettime(i32 1, ptr %t1)",
        "  %s0 = load i64, ptr %t0, align 8",
        "  %s1 = load i64, ptr %t1, align 8",
        "  %q0 = getelementptr i64, ptr %t0, i64 1",
        "  %q1 = getelementptr i64, ptr %t1, i64 1",
        "  %n0 = load i64, ptr %q0, align 8",
        "  %n1 = load i64, ptr %q1, align 8",
        "  %ds = sub i64 %s1, %s0",
        "  %dsns = mul i64 %ds, 1000000000",
        "  %dn = sub i64 %n1, %n0",
        "  %ns = add i64 %dsns, %dn",
        "  ret i64 %ns",
        "}",
    ]
    # __r3_sequence(calls, n): for each of n recorded calls {slots, ret, copies, ncopies},
    # its copies {dst, src, len} put back, then the call timed alone; the timed spans' sum.
    # In native code: Python between two calls would evict what the kernel left in cache.
    lines += [
        "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)",
        "define i64 @__r3_sequence(ptr %calls, i64 %n) {",
        "entry:",
        "  %u0 = alloca [2 x i64], align 8",
        "  %u1 = alloca [2 x i64], align 8",
        "  br label %head",
        "head:",
        "  %i = phi i64 [ 0, %entry ], [ %inext, %timed ]",
        "  %acc = phi i64 [ 0, %entry ], [ %acc2, %timed ]",
        "  %more = icmp ult i64 %i, %n",
        "  br i1 %more, label %body, label %done",
        "body:",
        "  %c = getelementptr [4 x i64], ptr %calls, i64 %i",
        "  %cpsp = getelementptr i64, ptr %c, i64 2",
        "  %cps = load ptr, ptr %cpsp, align 8",
        "  %ncp = getelementptr i64, ptr %c, i64 3",
        "  %nc = load i64, ptr %ncp, align 8",
        "  br label %chead",
        "chead:",
        "  %j = phi i64 [ 0, %body ], [ %jnext, %cbody ]",
        "  %cmore = icmp ult i64 %j, %nc",
        "  br i1 %cmore, label %cbody, label %timed",
        "cbody:",
        "  %cp = getelementptr [3 x i64], ptr %cps, i64 %j",
        "  %dst = load ptr, ptr %cp, align 8",
        "  %srcp = getelementptr i64, ptr %cp, i64 1",
        "  %src = load ptr, ptr %srcp, align 8",
        "  %lenp = getelementptr i64, ptr %cp, i64 2",
        "  %len = load i64, ptr %lenp, align 8",
        "  call void @llvm.memcpy.p0.p0.i64(ptr %dst, ptr %src, i64 %len, i1 false)",
        "  %jnext = add i64 %j, 1",
        "  br label %chead",
        "timed:",
        "  %slots = load ptr, ptr %c, align 8",
        "  %retp = getelementptr i64, ptr %c, i64 1",
        "  %ret = load ptr, ptr %retp, align 8",
        "  call i32 @clock_gettime(i32 1, ptr %u0)",
        "  call void @__r3_call(ptr %slots, ptr %ret)",
        "  call i32 @clock_gettime(i32 1, ptr %u1)",
        "  %a0 = load i64, ptr %u0, align 8",
        "  %a1 = load i64, ptr %u1, align 8",
        "  %b0p = getelementptr i64, ptr %u0, i64 1",
        "  %b1p = getelementptr i64, ptr %u1, i64 1",
        "  %b0 = load i64, ptr %b0p, align 8",
        "  %b1 = load i64, ptr %b1p, align 8",
        "  %da = sub i64 %a1, %a0",
        "  %dans = mul i64 %da, 1000000000",
        "  %db = sub i64 %b1, %b0",
        "  %d = add i64 %dans, %db",
        "  %acc2 = add i64 %acc, %d",
        "  %inext = add i64 %i, 1",
        "  br label %head",
        "done:",
        "  ret i64 %acc",
        "}",
    ]
    return "\n".join(lines) + "\n"
