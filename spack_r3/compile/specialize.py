"""Argument specialization: a kernel cloned with recorded scalar arguments folded in, behind
a guard.

A kernel's captures hold the arguments of each recorded call. An integer argument with the
same value in every capture (a problem size, a stride, a flag) is a constant the build could
not know; folded in, the optimizer sees trip counts and strides (LLNL's Proteus does this at
run time on GPUs). Which of them are worth it is read on the kernel's IR (``roles``): those
that feed a loop bound, a stride (a multiply whose result indexes memory) or a branch.

The code (``specialize_text``, a text edit of the module, run by ``stages.optimized_module``
for replay and for ``r3-apply`` alike) keeps the kernel's name for a guard:

    k(args):  calls += 1
              if (n == 300 && ...) { hits += 1; return k.r3.spec(args) }   (n folded in)
              return k.r3.orig(args)                                         (the kernel as it was)

so a call with other arguments runs the original. ``calls`` and ``hits`` are hidden globals
(``counter_names``); a tuned build reports them at exit (``emit/apply.py``), so the check
sees a guard that never matched. Floating-point arguments are not specialized (a guard on
an FP equality is fragile, and they rarely shape loops).

OpenMP kernels: their loops live in outlined functions, which receive a shared argument
as a pointer to the kernel's copy (``__kmpc_fork_call``), so folding the argument in the
kernel alone changes nothing there, and LLVM does not carry the constant through the
runtime call. The clone's parallel regions call clones of their outlined functions that
read the folded value from a constant global instead, where LLVM's own analysis finds the
outlined function only reads that argument (``readonly``), and the kernel stores it once.
"""

import functools
import re
from dataclasses import dataclass
from typing import Tuple

from ..iredit import (
    FunctionDef,
    body_without_debug,
    find_define,
    for_analysis,
    global_ref,
    init_native,
    local_ref,
    matching,
    ref_name,
    split_top,
    strip_dbg,
)

ORIG_SUFFIX = ".r3.orig"
SPEC_SUFFIX = ".r3.spec"
CALLS_PREFIX = "__r3_spec.calls."
HITS_PREFIX = "__r3_spec.hits."
ROLES = ("bound", "stride", "branch")
_INT = re.compile(r"^i(1|8|16|32|64)$")
# Instructions an integer's value flows through (the forward slice of an argument).
_FLOWS = {
    "add",
    "sub",
    "mul",
    "shl",
    "lshr",
    "ashr",
    "and",
    "or",
    "xor",
    "sext",
    "zext",
    "trunc",
    "phi",
    "select",
    "freeze",
    "sdiv",
    "udiv",
    "srem",
    "urem",
}


@dataclass
class ConstantArg:
    """An integer argument with one value in every recorded call, and what it does there."""

    index: int
    type: str  # i8, i16, i32, i64 (i1: a bool)
    value: int  # signed, in the type's width
    name: str  # the source's parameter name where it was found, else arg<index>
    roles: Tuple[str, ...]  # of ROLES; empty: it shapes nothing the optimizer could use

    def to_json(self):
        return {
            "index": self.index,
            "type": self.type,
            "value": self.value,
            "name": self.name,
            "roles": list(self.roles),
        }


def _signed(slot, ty):
    bits = int(_INT.match(ty).group(1))
    v = int(slot, 16) & ((1 << bits) - 1)
    return v - (1 << bits) if bits > 1 and v >> (bits - 1) else v


def recorded_constants(captures):
    """{index: (type, value)} of the integer arguments whose value is the same in every one
    of ``captures`` (data.Capture, instances of one kernel)."""
    first = captures[0]
    out = {}
    for i, ty in enumerate(first.signature.get("params", [])):
        if not _INT.match(ty) or (first.signature.get("byval") or [0] * (i + 1))[i]:
            continue
        values = {_signed(c.args[i], ty) for c in captures if i < len(c.args)}
        if len(values) == 1:
            out[i] = (ty, values.pop())
    return out


def _key(v):
    return str(v)


def roles(ir, kernel):
    """{argument index: set of ROLES} on the kernel's IR (llvmlite's text, as clang wrote it
    before optimization: arguments live in allocas, so ``sroa`` puts them in SSA first)."""
    import llvmlite.binding as llvm  # (here: the check and r3-apply read counts without it)

    text = for_analysis(ir)
    init_native()
    mod = llvm.parse_assembly(text)
    tm = llvm.Target.from_triple(mod.triple or llvm.get_process_triple()).create_target_machine()
    pm = llvm.create_new_module_pass_manager()
    pm.add_sroa_pass()
    pm.run(mod, llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options()))
    return _Roles(mod).of_arguments(kernel)


FORK_CALL = "__kmpc_fork_call"
# A fork call's operands: ident, argument count, the outlined function, then the shared
# arguments; the outlined function's parameters: global and bound thread ids, then those.
_FORK_SHARED, _OUTLINED_SHARED = 3, 2


class _Roles:
    """The def-use walk of ``roles`` on a module after ``sroa``, reaching through OpenMP's
    fork calls into outlined functions (and the calls they make to internal functions).
    Values are keyed by their text, which is unique within a function only: each function
    has its own index."""

    def __init__(self, mod):
        self.mod = mod
        self.index = {}  # function name: (users, defs)

    def _of(self, fn):
        if fn.name not in self.index:
            users, defs = {}, {}
            for block in fn.blocks:
                for inst in block.instructions:
                    defs[_key(inst)] = inst
                    for pos, op in enumerate(inst.operands):
                        users.setdefault(_key(op), []).append((inst, pos))
            self.index[fn.name] = (users, defs)
        return self.index[fn.name]

    def forward(self, fn, start):
        users, _ = self._of(fn)
        seen, todo = {_key(start): start}, [start]
        while todo:
            for inst, _ in users.get(_key(todo.pop()), []):
                if inst.opcode in _FLOWS and _key(inst) not in seen:
                    seen[_key(inst)] = inst
                    todo.append(inst)
        return seen.values()

    def from_phi(self, fn, v, depth=6):
        """Whether ``v`` derives from a phi (an induction variable)."""
        inst = self._of(fn)[1].get(_key(v))
        if inst is None or depth == 0:
            return False
        return inst.opcode == "phi" or (
            inst.opcode in _FLOWS and any(self.from_phi(fn, o, depth - 1) for o in inst.operands)
        )

    def indexes_memory(self, fn, v):
        users, _ = self._of(fn)
        return any(
            inst.opcode == "getelementptr" and pos > 0
            for w in self.forward(fn, v)
            for inst, pos in users.get(_key(w), [])
        )

    def of_value(self, fn, value, depth=3):
        users, _ = self._of(fn)
        found = set()
        for v in self.forward(fn, value):
            for inst, pos in users.get(_key(v), []):
                op = inst.opcode
                if op == "icmp":
                    other = list(inst.operands)[1 - pos]
                    found.add("bound" if self.from_phi(fn, other) else "branch")
                elif op in ("br", "switch") or (op == "select" and pos == 0):
                    found.add("branch")
                elif op in ("mul", "shl") and self.indexes_memory(fn, inst):
                    found.add("stride")
                elif op == "call" and depth:
                    found |= self.passed(inst, pos, lambda callee, param: self.of_value(callee, param, depth - 1))
        return found

    def passed(self, call, pos, walk):
        """``walk`` over the parameter an operand of ``call`` becomes: a fork call's shared
        operand in the outlined function, a direct call's in an internal callee."""
        ops = list(call.operands)
        if ops[-1].name == FORK_CALL:
            callee, index = (
                (self.defined(ops[2].name), pos - _FORK_SHARED + _OUTLINED_SHARED) if pos >= _FORK_SHARED else (None, 0)
            )
        else:
            callee, index = self.defined(ops[-1].name), pos
        params = list(callee.arguments) if callee is not None else []
        return walk(callee, params[index]) if index < len(params) else set()

    def of_pointer(self, fn, ptr, depth=3):
        """Roles of the values loaded through ``ptr``, a parameter of ``fn`` pointing at a
        shared argument: in ``fn``, and in the internal functions it passes ``ptr`` to."""
        users, _ = self._of(fn)
        found = set()
        for inst, pos in users.get(_key(ptr), []):
            if inst.opcode == "load":
                found |= self.of_value(fn, inst)
            elif inst.opcode == "call" and depth:
                found |= self.passed(inst, pos, lambda callee, param: self.of_pointer(callee, param, depth - 1))
        return found

    def defined(self, name):
        """The function ``name`` where this module defines it, else None."""
        try:
            fn = self.mod.get_function(name) if name else None
        except NameError:
            return None
        return fn if fn is not None and not fn.is_declaration else None

    def through_forks(self, fn, arg):
        """Roles of an argument the kernel stores for its parallel regions: each fork call
        that passes the store's address hands it to an outlined function's parameter."""
        users, _ = self._of(fn)
        found = set()
        for store, pos in users.get(_key(arg), []):
            if store.opcode != "store" or pos != 0:
                continue
            for call, at in users.get(_key(list(store.operands)[1]), []):
                if call.opcode == "call" and list(call.operands)[-1].name == FORK_CALL:
                    found |= self.passed(call, at, self.of_pointer)
        return found

    def of_arguments(self, kernel):
        fn = self.mod.get_function(kernel)
        out = {}
        for i, arg in enumerate(fn.arguments):
            found = self.of_value(fn, arg) | self.through_forks(fn, arg)
            if found:
                out[i] = found
        return out


def source_names(path, kernel, count):
    """The kernel's parameter names in its source file (a C or C++ definition read with a
    regular expression: names for tables only), or None."""
    base = re.sub(r"\(.*$", "", kernel).split("::")[-1]
    if base.startswith("_Z"):
        from ..cxxnames import demangle

        base = re.sub(r"\(.*$", "", demangle(kernel) or "").split("::")[-1]
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except (OSError, TypeError):
        return None
    for m in re.finditer(r"\b%s\s*\(([^;{}]*?)\)\s*(?:const\s*)?\{" % re.escape(base), text):
        params = [p.strip() for p in m.group(1).split(",") if p.strip()]
        if len(params) == count:
            names = [(re.findall(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$", p) or [None])[0] for p in params]
            if all(names):
                return names
    return None


def constant_args(captures, ir, kernel):
    """The kernel's ConstantArgs (``recorded_constants`` with their ``roles``), by index."""
    constants = recorded_constants(captures)
    if not constants or not ir:
        return []
    found = roles(ir, kernel)
    names = source_names(captures[0].source_file, kernel, len(captures[0].signature.get("params", []))) or []
    return [
        ConstantArg(
            i, ty, value, names[i] if i < len(names) else "arg%d" % i, tuple(r for r in ROLES if r in found.get(i, ()))
        )
        for i, (ty, value) in sorted(constants.items())
    ]


def named(capture, pairs):
    """``pairs`` ((index, value), ...) of a kernel in words, with its source's parameter
    names where they are found: ["n=300", "arg2=64"]."""
    names = source_names(capture.source_file, capture.kernel, len(capture.signature.get("params", []))) or []
    return ["%s=%d" % (names[i] if i < len(names) else "arg%d" % i, v) for i, v in pairs]


def label(args, pairs):
    """A specialization in words: ``n=300,m=200`` (names from ``args``, ConstantArgs)."""
    names = {a.index: a.name for a in args}
    return ",".join("%s=%d" % (names.get(i, "arg%d" % i), v) for i, v in pairs) or "none"


def choices(args):
    """The specializations worth searching: none, each argument that shapes a loop, a stride
    or a branch alone, and all of them together. [(label, ((index, value), ...))]."""
    useful = [a for a in args if a.roles]
    out = [("none", ())]
    for a in useful:
        out.append((label(args, ((a.index, a.value),)), ((a.index, a.value),)))
    if len(useful) > 1:
        pairs = tuple((a.index, a.value) for a in useful)
        out.append((label(args, pairs), pairs))
    return out if len(out) > 1 else []


@functools.lru_cache(maxsize=16)
def return_type(ir, kernel):
    """The kernel's return type as IR text (read with llvmlite from ``ir``)."""
    import llvmlite.binding as llvm

    return str(llvm.parse_assembly(ir).get_function(kernel).global_value_type.get_function_return())


def counter_names(kernel):
    """(calls, hits): the guard's counters of ``kernel`` (hidden globals)."""
    return CALLS_PREFIX + kernel, HITS_PREFIX + kernel


def _constant(ty, value):
    return ("true" if value else "false") if ty == "i1" else str(value)


def specialize_text(text, kernel, pairs, ret_type):
    """``text`` (a module's IR) with ``kernel`` behind a guard on ``pairs`` ((index, value),
    ...): a clone with those arguments folded in runs when they match, the original
    otherwise (see the module's doc). Raises ValueError on an argument that is not an integer."""
    lines = text.split("\n")
    i = find_define(lines, kernel)
    j = i
    while lines[j] != "}":
        j += 1
    d = FunctionDef(lines[i], kernel)
    if "..." in d.params:
        raise ValueError("%s takes variable arguments: not specialized" % kernel)
    types = {}
    for index, _ in pairs:
        if index >= len(d.params):
            raise ValueError("specialize: %s has no argument %d" % (kernel, index))
        ty = d.params[index].split()[0]
        if not _INT.match(ty):
            raise ValueError("specialize: argument %d of %s is %s, not an integer" % (index, kernel, ty))
        types[index] = ty
    internal = " ".join(["internal", d.linkage_free_prefix]).strip()
    suffix = re.sub(r"\bcomdat(\s*\([^)]*\))?", "", d.suffix).strip()
    body = lines[i + 1 : j + 1]
    spec = body_without_debug(body)
    for index, value in pairs:
        spec = [local_ref(d.param_name(index)).sub(_constant(types[index], value), line) for line in spec]
    spec, outlined = _fold_into_parallel_regions(text, lines, kernel, body, spec, d, pairs, types)
    calls, hits = (global_ref(n) for n in counter_names(kernel))
    args = ", ".join("%s %s" % (d.param_without_name(k), d.param_name(k)) for k in range(len(d.params)))
    void = ret_type == "void"

    def call(callee, value):
        if void:
            return ["  call void %s(%s)" % (global_ref(callee), args), "  ret void"]
        return [
            "  %s = call %s %s(%s)" % (value, ret_type, global_ref(callee), args),
            "  ret %s %s" % (ret_type, value),
        ]

    conds = [
        "  %%r3.eq%d = icmp eq %s %s, %s" % (n, types[index], d.param_name(index), _constant(types[index], value))
        for n, (index, value) in enumerate(pairs)
    ]
    match = "%r3.eq0"
    for n in range(1, len(pairs)):
        conds.append("  %%r3.all%d = and i1 %s, %%r3.eq%d" % (n, match, n))
        match = "%%r3.all%d" % n
    guard = (
        [
            strip_dbg(d.render(kernel)),
            "  %%r3.calls = atomicrmw add ptr %s, i64 1 monotonic, align 8" % calls,
        ]
        + conds
        + [
            "  br i1 %s, label %%r3.spec, label %%r3.orig" % match,
            "r3.spec:",
            "  %%r3.hits = atomicrmw add ptr %s, i64 1 monotonic, align 8" % hits,
        ]
        + call(kernel + SPEC_SUFFIX, "%r3.ret.spec")
        + ["r3.orig:"]
        + call(kernel + ORIG_SUFFIX, "%r3.ret.orig")
        + ["}"]
    )
    orig = [d.render(kernel + ORIG_SUFFIX, prefix=internal, suffix=suffix)] + body
    clone = [strip_dbg(d.render(kernel + SPEC_SUFFIX, prefix=internal, suffix=suffix))] + spec
    counters = ["%s = hidden global i64 0, align 8" % calls, "%s = hidden global i64 0, align 8" % hits]
    return "\n".join(lines[:i] + orig + [""] + clone + [""] + guard + outlined + lines[j + 1 :] + counters) + "\n"


def _fold_into_parallel_regions(text, lines, kernel, body, spec, d, pairs, types):
    """The clone's parallel regions given the folded values: (the clone's body, the lines
    of the outlined functions' clones and of the constants they read).

    A fork call hands an outlined function each argument its region uses: a shared one as
    the address of the kernel's copy, a firstprivate one by value (clang copies it through
    a ``.casted`` slot). The kernel's copy of a folded argument, stored once, holds the
    constant; the fork then calls a clone of the outlined function that reads the constant
    in its place: a private constant global for a shared argument (where LLVM finds that
    the outlined function only reads through that parameter), the number for one passed
    by value."""
    folded = {}  # the kernel's copy of a folded argument: (type, value, index)
    for index, value in pairs:
        param = local_ref(d.param_name(index))
        for line in body:
            m = re.match(r"^\s*store (\S+) (\S+), ptr (%[-\w$.]+)", line)
            if m and m.group(1) == types[index] and param.fullmatch(m.group(2)) and _stores(body, m.group(3)) == 1:
                folded[m.group(3)] = (types[index], value, index)
    if not folded:
        return spec, []
    defs = {m.group(1): m.group(2) for m in (re.match(r"^\s*(%[-\w$.]+) = (.*)$", x) for x in spec) if m}

    def by_value(value):
        """The folded copy a value passed by value was read from, through clang's
        ``.casted`` slot (load, store once, load), else None."""
        m = re.match(r"^load i\d+, ptr (%[-\w$.]+)", defs.get(value, ""))
        if not m or _stores(spec, m.group(1)) != 1:
            return None
        stored = next(x for x in spec if re.search(r"\bstore .*, ptr %s(?![-\w$.])" % re.escape(m.group(1)), x))
        v = re.match(r"^\s*store i\d+ (%[-\w$.]+),", stored)
        copy = re.match(r"^load i\d+, ptr (%[-\w$.]+)", defs.get(v.group(1), "")) if v else None
        return copy.group(1) if copy and copy.group(1) in folded else None

    readonly = _readonly_params(text)
    wanted, forks = {}, []  # outlined function: {its parameter: (kind, folded copy)}
    for n, line in enumerate(spec):
        at = line.find("@%s(" % FORK_CALL)
        if at < 0:
            continue
        open_paren = line.index("(", at)
        args = split_top(line[open_paren + 1 : matching(line, open_paren) - 1])
        if len(args) <= _FORK_SHARED or not args[2].startswith("ptr @"):
            continue
        outlined = ref_name(args[2].split(None, 1)[1])
        reads = {}
        for k, arg in enumerate(args[_FORK_SHARED:]):
            ty, value = arg.split()[0], arg.split()[-1]
            if ty == "ptr" and value in folded and _OUTLINED_SHARED + k in readonly.get(outlined, ()):
                reads[_OUTLINED_SHARED + k] = ("shared", value)
            elif re.match(r"^i\d+$", ty) and by_value(value):
                reads[_OUTLINED_SHARED + k] = ("value", by_value(value))
        if outlined in wanted and wanted[outlined] != reads:
            reads = {}  # forked twice with other arguments: left as it is
        wanted[outlined] = reads
        forks.append((n, outlined))
    out, constants = [], {}
    for outlined, reads in wanted.items():
        if not reads:
            continue
        start = find_define(lines, outlined)
        end = start
        while lines[end] != "}":
            end += 1
        od = FunctionDef(lines[start], outlined)
        clone_body = body_without_debug(lines[start + 1 : end + 1])
        for k, (kind, copy) in reads.items():
            ty, value, index = folded[copy]
            if kind == "shared":
                const = global_ref("%s.r3.c%d" % (kernel, index))
                constants[const] = "%s = private unnamed_addr constant %s %s" % (const, ty, _constant(ty, value))
            else:  # the parameter's own type, wider than the argument's: its low bits are read
                const = _constant(ty, value)
            clone_body = [local_ref(od.param_name(k)).sub(lambda _, c=const: c, x) for x in clone_body]
        head = strip_dbg(od.render(outlined + SPEC_SUFFIX, prefix="internal " + od.linkage_free_prefix))
        out += [""] + [head] + clone_body
        for n, name in forks:
            if name == outlined:
                spec[n] = spec[n].replace("ptr %s," % global_ref(name), "ptr %s," % global_ref(name + SPEC_SUFFIX), 1)
    return spec, out + [""] + sorted(constants.values())


def _stores(body, slot):
    """How many of ``body``'s lines store to ``slot``."""
    return sum(1 for x in body if re.search(r"\bstore .*, ptr %s(?![-\w$.])" % re.escape(slot), x))


@functools.lru_cache(maxsize=8)
def _readonly_params(text):
    """{function: indexes of the pointer parameters it only reads through}, as LLVM's
    function attribute inference finds them on ``text`` (an -O2 pipeline on a copy)."""
    import llvmlite.binding as llvm

    init_native()
    prepared = for_analysis(text)
    try:
        mod = llvm.parse_assembly(prepared)
    except RuntimeError:
        return {}
    tm = llvm.Target.from_triple(mod.triple or llvm.get_process_triple()).create_target_machine()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=2))
    pb.getModulePassManager().run(mod, pb)
    out = {}
    for fn in mod.functions:
        if fn.is_declaration:
            continue
        out[fn.name] = {
            k
            for k, arg in enumerate(fn.arguments)
            if {b"readonly", b"readnone"} & {a.split()[0] for a in arg.attributes}
        }
    return out


def read_counts(path):
    """{kernel: [calls, hits]} from a tuned build's ``R3_SPEC_LOG`` file (lines ``kernel calls
    hits``, one per specialized kernel and process); {} when there is none."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3:
                    c = out.setdefault(parts[0], [0, 0])
                    c[0] += int(parts[1])
                    c[1] += int(parts[2])
    except (OSError, ValueError):
        return out
    return out


LOG_ENV = "R3_SPEC_LOG"


def reporter_c(kernels):
    """C source of a destructor that appends each of ``kernels``' guard counts to the file
    ``$R3_SPEC_LOG`` names, at the exit of a tuned build's process (nothing when unset)."""
    decls, prints = [], []
    for n, k in enumerate(kernels):
        calls, hits = counter_names(k)
        decls.append(
            'extern unsigned long long r3_calls_%d __asm__("%s"), r3_hits_%d __asm__("%s");' % (n, calls, n, hits)
        )
        prints.append('  fprintf(f, "%%s %%llu %%llu\\n", "%s", r3_calls_%d, r3_hits_%d);' % (k, n, n))
    return "\n".join(
        ["#include <stdio.h>", "#include <stdlib.h>"]
        + decls
        + [
            "__attribute__((destructor)) static void r3_spec_report(void) {",
            '  const char *path = getenv("%s");' % LOG_ENV,
            "  if (!path || !*path) return;",
            '  FILE *f = fopen(path, "a");',
            "  if (!f) return;",
        ]
        + prints
        + ["  fclose(f);", "}", ""]
    )


def specialized(pipeline_json):
    """The (index, value) pairs of a pipeline as JSON (a plan's), () when none."""
    return tuple(tuple(p) for p in (pipeline_json or {}).get("specialize") or ())
