"""Choose the kernels of one translation unit and wrap them with record probes.

Analysis reads the unit's bitcode with llvmlite; the edit is made on clang's own
textual IR (with ``iredit``), so that the same clang compiles the instrumented unit:
clang-19 cannot read what llvmlite's LLVM 22 would write. Each kernel
``k`` is renamed ``__r3_orig.k`` (internal) and a wrapper named ``k`` calls
``__r3_enter`` / the original / ``__r3_exit``, so every caller, in this unit or
another, goes through the probes. The struct passed to the runtime is
``struct r3_kinfo`` of ``runtime/r3rt.h``.
"""

import ctypes
import re
from dataclasses import asdict, dataclass, field
from typing import List, Optional, Tuple

import llvmlite.binding as llvm

from .. import cxxnames
from ..iredit import (
    GLOBAL_REF,
    FunctionDef,
    c_string,
    find_define,
    global_ref,
    init_native,
    ref_name,
    strip_dbg,
    with_fn_attribute,
)
from .libstate import SYSTEM_MEMORY_CALLS, unreplayable_reason

OMP_FORK = "__kmpc_fork_call"
MAX_SLOT_BYTES = 8  # one 64-bit slot per argument
MAX_RET_BYTES = 16
NOT_KERNELS = {"main", "_QQmain"}  # C's main and a Fortran main program: the whole run


@dataclass
class KernelInfo:
    name: str
    ret_type: str
    ret_size: int
    param_types: List[str]
    byval_sizes: List[int]
    globals: List[Tuple[str, int]] = field(default_factory=list)
    openmp: bool = False
    has_loop: bool = False
    calls: List[str] = field(default_factory=list)  # functions it reaches that other units define
    unreplayable: Optional[str] = None  # why replay would compute something else (see libstate)

    @property
    def signature(self):
        return {"ret": self.ret_type, "ret_size": self.ret_size, "params": self.param_types, "byval": self.byval_sizes}

    def to_json(self):
        d = asdict(self)
        d["globals"] = [{"name": n, "size": s} for n, s in self.globals]
        return d


def _key(value):
    return ctypes.cast(value._ptr, ctypes.c_void_p).value


def has_loop(fn):
    """True if the function's CFG has a back edge (a loop)."""
    blocks = list(fn.blocks)
    if not blocks:
        return False
    succ = {}
    for b in blocks:
        term = list(b.instructions)[-1]
        succ[_key(b)] = [_key(o) for o in term.operands if o.value_kind == llvm.ValueKind.basic_block]
    state, stack = {}, [(_key(blocks[0]), iter(succ[_key(blocks[0])]))]
    state[_key(blocks[0])] = 1
    while stack:
        node, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            state[node] = 2
            stack.pop()
        elif state.get(nxt) == 1:
            return True
        elif nxt not in state:
            state[nxt] = 1
            stack.append((nxt, iter(succ.get(nxt, []))))
    return False


def _references(fn, functions, variables):
    """Functions and global variables that ``fn``'s instructions refer to. A constant
    expression (``getelementptr (i8, ptr @table, i64 800)``, a global's element at a fixed
    index) is read from its text: llvmlite walks the operands of instructions only."""
    fns, gvs, seen = set(), set(), set()

    def visit(v):
        kind = v.value_kind
        if kind == llvm.ValueKind.function:
            fns.add(v.name)
        elif kind == llvm.ValueKind.global_variable:
            gvs.add(v.name)
        elif kind == llvm.ValueKind.constant_expr:
            k = _key(v)
            if k not in seen:
                seen.add(k)
                for name in map(ref_name, GLOBAL_REF.findall(str(v))):
                    if name in functions:
                        fns.add(name)
                    elif name in variables:
                        gvs.add(name)

    for b in fn.blocks:
        for ins in b.instructions:
            for o in ins.operands:
                visit(o)
    return fns, gvs


class ModuleAnalysis:
    """Loops, call graph and global references of every function of one module."""

    def __init__(self, bitcode):
        init_native()
        self.module = llvm.parse_bitcode(bitcode)
        self.target_data = llvm.create_target_data(self.module.data_layout)
        self.defined = {f.name: f for f in self.module.functions if not f.is_declaration}
        self.globals = {g.name: g for g in self.module.global_variables if g.name}
        functions = {f.name for f in self.module.functions}
        self.refs = {name: _references(f, functions, self.globals) for name, f in self.defined.items()}
        self.loops = {name: has_loop(f) for name, f in self.defined.items()}

    def reachable(self, name):
        """Defined functions reachable from ``name`` (itself included)."""
        out, todo = set(), [name]
        while todo:
            n = todo.pop()
            if n in out or n not in self.defined:
                continue
            out.add(n)
            todo.extend(self.refs[n][0])
        return out

    def external_calls(self, name):
        """Functions reachable from ``name`` that this unit only declares (no intrinsics)."""
        called = set()
        for f in self.reachable(name):
            called |= {c for c in self.refs[f][0] if c not in self.defined and not c.startswith("llvm.")}
        return sorted(called)

    def exports(self):
        """Each externally visible function with what it calls in other units: lets
        replay find the units a kernel's callees live in."""
        return {
            name: self.external_calls(name) for name, f in self.defined.items() if f.linkage == llvm.Linkage.external
        }

    def export_globals(self):
        """Each externally visible function with the writable globals of external linkage
        it reaches in this unit (as ``referenced_globals``): a kernel of another unit that
        calls it touches them too, and another object can name them (``record.reach``)."""
        out = {}
        for name, f in self.defined.items():
            if f.linkage != llvm.Linkage.external:
                continue
            linkable = [
                (g, size)
                for g, size in self.referenced_globals(name)
                if self.globals[g].linkage in (llvm.Linkage.external, llvm.Linkage.common)
            ]
            if linkable:
                out[name] = linkable
        return out

    def referenced_globals(self, name):
        """Writable, sized, non-thread-local globals the kernel may touch."""
        names = set()
        for f in self.reachable(name):
            names |= self.refs[f][1]
        result = []
        for g in sorted(names):
            if not g or g.startswith("llvm.") or is_library_global(g):
                continue
            gv = self.globals.get(g)
            if gv is None:
                continue
            words = _definition_words(gv)
            if "constant" in words or "thread_local" in words or any(w.startswith("thread_local(") for w in words):
                continue
            ty = gv.global_value_type
            try:
                size = self.target_data.get_abi_size(ty)
            except Exception:  # opaque or unsized: cannot be snapshotted
                continue
            if size > 0:
                result.append((g, size))
        return result

    def _type_size(self, ty):
        return self.target_data.get_abi_size(ty)

    def _byval_size(self, attrs):
        for a in attrs:
            a = a.decode() if isinstance(a, bytes) else a
            m = re.match(r"byval\((.*)\)$", a)
            if m:
                tname = m.group(1)
                if tname.startswith("%"):
                    return self._type_size(self.module.get_struct_type(tname[1:].strip('"')))
                return _array_size(tname, self)
        return 0

    def kernel(self, name):
        """KernelInfo for ``name``, or a reason string why it cannot be a kernel."""
        fn = self.defined[name]
        if fn.linkage not in (llvm.Linkage.external, llvm.Linkage.internal):
            return "linkage %s is not supported" % fn.linkage.name
        ft = fn.global_value_type
        if ft.is_function_vararg:
            return "variadic"
        ret = ft.get_function_return() if hasattr(ft, "get_function_return") else list(ft.elements)[0]
        ret_type = str(ret)
        ret_size = 0 if ret_type == "void" else self._type_size(ret)
        if ret_size > MAX_RET_BYTES:
            return "returns %d bytes" % ret_size
        types, byvals = [], []
        for a in fn.arguments:
            byval = self._byval_size(a.attributes)
            if not byval and self._type_size(a.type) > MAX_SLOT_BYTES:
                return "parameter of type %s does not fit a slot" % a.type
            types.append(str(a.type))
            byvals.append(byval)
        reach = self.reachable(name)
        openmp = any(OMP_FORK in self.refs[f][0] for f in reach)
        loop = self.loops[name] or (openmp and any(self.loops[f] for f in reach if f != name))
        calls = self.external_calls(name)
        # Still recorded (its hotness counts); replay refuses it with this reason.
        return KernelInfo(
            name,
            ret_type,
            ret_size,
            types,
            byvals,
            self.referenced_globals(name),
            openmp,
            loop,
            calls,
            unreplayable_reason(calls),
        )

    def select(self, wanted=None):
        """Kernels of this unit: the ``wanted`` names, or every function holding a loop.

        A wanted name may be a symbol or a C++ name as ``cxxnames`` reads it (demangled,
        or qualified without parameters: every overload of it here is taken; the record
        session settles which of them across units were meant).
        Returns (kernels, skipped) where skipped lists (name, reason).
        """
        kernels, skipped = [], []
        for name, fn in self.defined.items():
            if wanted is not None:
                if not any(cxxnames.match_level(w, name) for w in wanted):
                    continue
            elif name in NOT_KERNELS or _is_outlined(name) or fn.linkage in _ODR_LINKAGES:
                continue  # ODR copies (C++ templates, inline functions): not kernels by design
            info = self.kernel(name)
            if isinstance(info, str):
                if wanted is not None or self.loops[name]:  # only report what would have been a kernel
                    skipped.append((name, info))
            elif wanted is not None or info.has_loop:
                kernels.append(info)
        return kernels, skipped


_ODR_LINKAGES = (llvm.Linkage.linkonce_odr, llvm.Linkage.weak_odr, llvm.Linkage.available_externally)


# Globals of the C and C++ libraries a kernel may name (stdout for printf, std::cout):
# replay binds them to its own process's, never to recorded copies, whose pointers lead
# into the recording process's library data.
LIBRARY_GLOBALS = {
    "stdout",
    "stderr",
    "stdin",
    "environ",
    "__environ",
    "optarg",
    "optind",
    "opterr",
    "optopt",
    "errno",
    "program_invocation_name",
    "program_invocation_short_name",
    "timezone",
    "daylight",
    "tzname",
    "signgam",
}


def is_library_global(name):
    return name in LIBRARY_GLOBALS or name.startswith(("_ZSt", "_ZNSt", "__libc_", "_IO_"))


def _definition_words(gv):
    """The keywords of a global's definition up to ``global``/``constant``."""
    head = str(gv).split("=", 1)[1][:200].split()
    words = []
    for w in head:
        words.append(w)
        if w in ("global", "constant"):
            break
    return words


def _is_outlined(name):
    return ".omp_outlined" in name or name.startswith(".omp") or "omp_par" in name or name.startswith("__r3_")


def _array_size(type_text, analysis):
    m = re.match(r"\[(\d+) x (.*)\]$", type_text.strip())
    if not m:
        return 0
    inner = m.group(2).strip()
    if inner.startswith("%"):
        elem = analysis._type_size(analysis.module.get_struct_type(inner[1:].strip('"')))
    else:
        elem = {"i8": 1, "i16": 2, "i32": 4, "i64": 8, "float": 4, "double": 8, "ptr": 8}.get(inner, 0)
    return int(m.group(1)) * elem


KINFO_TYPE = "{ ptr, ptr, i64, ptr, i64, ptr, i64, i64, i64, i64, i64, i64, ptr, i64, i64, i64 }"
KFLAG_WHOLE_HEAP = 1  # r3rt.h R3_KFLAG_WHOLE_HEAP
KFLAG_NO_CAPTURE = 2  # r3rt.h R3_KFLAG_NO_CAPTURE
KFLAG_RUNTIME_STATE = 8  # r3rt.h R3_KFLAG_RUNTIME_STATE


def instrument_text(ll_text, kernels, tu_dir, orig_prefix="__r3_orig."):
    """Return clang's textual IR with every kernel wrapped by record probes; the kernel's
    own body is renamed ``orig_prefix + name`` (r3-apply's timed builds name it so that
    the tuned body can stand in for it)."""
    lines = ll_text.split("\n")
    extra = [
        "",
        "; ---- spack-r3 record probes ----",
        "declare void @__r3_enter_tc(ptr, ptr, ptr)",
        "declare void @__r3_exit(ptr, ptr)",
    ]
    tu_const, tu_len = c_string(tu_dir)
    extra.append("@__r3.tu_dir = private unnamed_addr constant [%d x i8] %s, align 1" % (tu_len, tu_const))
    for idx, k in enumerate(kernels):
        line_no = find_define(lines, k.name)
        d = FunctionDef(lines[line_no], k.name)
        orig = orig_prefix + k.name
        # The original becomes internal so it may be inlined into its wrapper.
        lines[line_no] = d.render(
            orig, prefix=" ".join(["internal", d.linkage_free_prefix]).strip(), suffix=d.suffix.replace("comdat", "")
        )
        extra += _kinfo_globals(idx, k)
        extra += _wrapper(idx, k, d, orig)
    return "\n".join(lines + extra) + "\n"


def uses_omp_state(name):
    """Whether calling ``name`` may hand the kernel objects living in the OpenMP runtime's own
    heap: locks, OpenMP allocators, threadprivate copies. A parallel region alone
    (__kmpc_fork_call, worksharing, reductions) and queries (omp_get_thread_num) run on the
    replay process's own runtime and need none of the recorded state."""
    return (name.startswith("omp_") and ("lock" in name or "alloc" in name or name == "omp_free")) or name.startswith(
        "__kmpc_threadprivate"
    )


def kernel_flags(k):
    """Runtime flags of a kernel: whole-heap capture for one that hands memory to the system;
    no capture at all when replay would refuse it anyway (it reads input), since a
    whole-heap capture is the costliest kind; the OpenMP runtime's own heap state kept only
    for a kernel that may reach it (for a small kernel it would be most of the capture)."""
    flags = KFLAG_RUNTIME_STATE if any(uses_omp_state(c) for c in k.calls) else 0
    if not SYSTEM_MEMORY_CALLS.intersection(k.calls):
        return flags
    return flags | (KFLAG_NO_CAPTURE if k.unreplayable else KFLAG_WHOLE_HEAP)


def _kinfo_globals(idx, k):
    out = []
    name_const, name_len = c_string(k.name)
    out.append("@__r3.name.%d = private unnamed_addr constant [%d x i8] %s, align 1" % (idx, name_len, name_const))
    n = len(k.param_types)
    byvals = ", ".join("i64 %d" % s for s in k.byval_sizes) or "i64 0"
    out.append("@__r3.byval.%d = private constant [%d x i64] [%s], align 8" % (idx, max(n, 1), byvals))
    ginit = []
    for gi, (gname, size) in enumerate(k.globals):
        gconst, glen = c_string(gname)
        out.append("@__r3.gname.%d.%d = private unnamed_addr constant [%d x i8] %s, align 1" % (idx, gi, glen, gconst))
        ginit.append("{ ptr, ptr, i64 } { ptr @__r3.gname.%d.%d, ptr %s, i64 %d }" % (idx, gi, global_ref(gname), size))
    ng = len(ginit)
    if ng:
        out.append(
            "@__r3.globals.%d = private constant [%d x { ptr, ptr, i64 }] [%s], align 8" % (idx, ng, ", ".join(ginit))
        )
        gptr = "@__r3.globals.%d" % idx
    else:
        gptr = "null"
    out.append(
        "@__r3.kinfo.%d = internal global %s { ptr @__r3.name.%d, ptr @__r3.tu_dir, i64 %d, ptr @__r3.byval.%d, "
        "i64 %d, ptr %s, i64 %d, i64 0, i64 0, i64 0, i64 0, i64 0, ptr null, i64 %d, i64 0, i64 0 }, align 8"
        % (idx, KINFO_TYPE, idx, n, idx, ng, gptr, k.ret_size, kernel_flags(k))
    )
    return out


# struct tcount of runtime/r3rt_internal.h: { calls, total_ns, self_ns, period, top_calls, skip_mask, probed, block, samples,
# outer_samples, top_ns } (8 bytes each); its block points at the thread's struct tblock, whose first field is ``leaf``
TCOUNT_SKIP_MASK_OFFSET = 40
TCOUNT_BLOCK_OFFSET = 56


def _wrapper(idx, k, d, orig):
    """The kernel's name becomes a fast path: while the runtime lets this thread skip the
    probes of a short, frequent leaf kernel (``calls & skip_mask`` nonzero, the calls its
    sampling does not time), a call counts itself and runs the body, inlinable into its
    caller as without probes (a probe call around each of XSBench's many short searches
    slowed it markedly). Every other call goes through the probed wrapper. While the body
    runs, the thread's ``leaf`` names its counters (volatile stores: only the runtime's
    profiler, from a signal handler, reads them), so the profiler's ticks count for it and
    not for its caller."""
    n = len(k.param_types)
    tc, probed = "@__r3.tc.%d" % idx, "__r3.probed.%d" % idx
    args = ", ".join("%s %s" % (d.param_without_name(i), d.param_name(i)) for i in range(n))
    void = k.ret_type == "void"

    def call_and_return(callee, value, after=()):
        if void:
            return ["  call void %s(%s)" % (callee, args), *after, "  ret void"]
        return [
            "  %s = call %s %s(%s)" % (value, k.ret_type, callee, args),
            *after,
            "  ret %s %s" % (k.ret_type, value),
        ]

    fast = [
        "",
        "%s = internal thread_local global ptr null, align 8" % tc,
        d.render(k.name, suffix=strip_dbg(d.suffix)),
        "  %%r3.tc = load ptr, ptr %s, align 8" % tc,
        "  %r3.have = icmp ne ptr %r3.tc, null",
        "  br i1 %r3.have, label %r3.check, label %r3.slow",
        "r3.check:",
        "  %r3.n = load i64, ptr %r3.tc, align 8",
        "  %%r3.maskp = getelementptr inbounds i8, ptr %%r3.tc, i64 %d" % TCOUNT_SKIP_MASK_OFFSET,
        "  %r3.mask = load i64, ptr %r3.maskp, align 8",
        "  %r3.m = and i64 %r3.n, %r3.mask",
        "  %r3.skip = icmp ne i64 %r3.m, 0",
        "  br i1 %r3.skip, label %r3.fast, label %r3.slow",
        "r3.fast:",
        "  %r3.n1 = add i64 %r3.n, 1",
        "  store i64 %r3.n1, ptr %r3.tc, align 8",
        "  %%r3.blockp = getelementptr inbounds i8, ptr %%r3.tc, i64 %d" % TCOUNT_BLOCK_OFFSET,
        "  %r3.block = load ptr, ptr %r3.blockp, align 8",
        "  store volatile ptr %r3.tc, ptr %r3.block, align 8",
        *call_and_return(global_ref(orig), "%r3.fast.ret", ["  store volatile ptr null, ptr %r3.block, align 8"]),
        "r3.slow:",
        *call_and_return(global_ref(probed), "%r3.slow.ret"),
        "}",
    ]
    return fast + _probed(idx, k, d, orig, probed, tc)


def _probed(idx, k, d, orig, probed, tc):
    n = len(k.param_types)
    kinfo = "@__r3.kinfo.%d" % idx
    body = [
        "",
        d.render(
            probed,
            prefix=" ".join(["internal", d.linkage_free_prefix]).strip(),
            # noinline: the wrapper keeps its own frame; inlined into its caller, the probes and
            # the kernel's spill slots would sit in the caller's frame, inside the stack region
            # a capture records (and compares) when an argument points into that frame.
            suffix=with_fn_attribute(strip_dbg(d.suffix), "noinline").replace("comdat", ""),
        ),
        "  %%r3.slots = alloca [%d x i64], align 8" % max(n, 1),
        "  store [%d x i64] zeroinitializer, ptr %%r3.slots, align 8" % max(n, 1),
    ]
    if k.ret_size:
        body.append("  %%r3.retslot = alloca %s, align 16" % k.ret_type)
    for i, ty in enumerate(k.param_types):
        body.append("  %%r3.s%d = getelementptr inbounds [%d x i64], ptr %%r3.slots, i64 0, i64 %d" % (i, max(n, 1), i))
        body.append("  store %s %s, ptr %%r3.s%d, align 8" % (ty, d.param_name(i), i))
    body.append("  call void @__r3_enter_tc(ptr %s, ptr %%r3.slots, ptr %s)" % (kinfo, tc))
    args = ", ".join("%s %s" % (d.param_without_name(i), d.param_name(i)) for i in range(n))
    if k.ret_size:
        body.append("  %%r3.ret = call %s %s(%s)" % (k.ret_type, global_ref(orig), args))
        body.append("  store %s %%r3.ret, ptr %%r3.retslot, align 8" % k.ret_type)
        body.append("  call void @__r3_exit(ptr %s, ptr %%r3.retslot)" % kinfo)
        body.append("  ret %s %%r3.ret" % k.ret_type)
    else:
        body.append("  call %s %s(%s)" % (k.ret_type, global_ref(orig), args))
        body.append("  call void @__r3_exit(ptr %s, ptr null)" % kinfo)
        body.append("  ret void")
    body.append("}")
    return body
