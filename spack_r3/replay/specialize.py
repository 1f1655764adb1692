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
an FP equality is fragile, and they rarely shape loops). OpenMP kernels gain little: their
loops live in outlined functions, which receive the arguments through memory.
"""

import functools
import re
from dataclasses import dataclass
from typing import Tuple

from ..iredit import FunctionDef, find_define, global_ref, init_native

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

    text = re.sub(r"\boptnone\b", "", ir)  # an -O0 build's functions: sroa would skip them
    # The record clang's target attributes name features this LLVM may not know (it warns on
    # stderr, once per function); a def-use walk after sroa needs none of them.
    text = re.sub(r'"target-(?:cpu|features)"="[^"]*"', "", text)
    init_native()
    mod = llvm.parse_assembly(text)
    tm = llvm.Target.from_triple(mod.triple or llvm.get_process_triple()).create_target_machine()
    pm = llvm.create_new_module_pass_manager()
    pm.add_sroa_pass()
    pm.run(mod, llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options()))
    fn = mod.get_function(kernel)
    users, defs = {}, {}
    for block in fn.blocks:
        for inst in block.instructions:
            defs[_key(inst)] = inst
            for pos, op in enumerate(inst.operands):
                users.setdefault(_key(op), []).append((inst, pos))

    def forward(start):
        seen, todo = {_key(start): start}, [start]
        while todo:
            for inst, _ in users.get(_key(todo.pop()), []):
                if inst.opcode in _FLOWS and _key(inst) not in seen:
                    seen[_key(inst)] = inst
                    todo.append(inst)
        return seen.values()

    def from_phi(v, depth=6):
        """Whether ``v`` derives from a phi (an induction variable)."""
        inst = defs.get(_key(v))
        if inst is None or depth == 0:
            return False
        return inst.opcode == "phi" or (inst.opcode in _FLOWS and any(from_phi(o, depth - 1) for o in inst.operands))

    def indexes_memory(v):
        return any(
            inst.opcode == "getelementptr" and pos > 0 for w in forward(v) for inst, pos in users.get(_key(w), [])
        )

    out = {}
    for i, arg in enumerate(fn.arguments):
        found = set()
        for v in forward(arg):
            for inst, pos in users.get(_key(v), []):
                op = inst.opcode
                if op == "icmp":
                    other = list(inst.operands)[1 - pos]
                    found.add("bound" if from_phi(other) else "branch")
                elif op in ("br", "switch") or (op == "select" and pos == 0):
                    found.add("branch")
                elif op in ("mul", "shl") and indexes_memory(inst):
                    found.add("stride")
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


def _without_debug(lines):
    """A copy of a function body for a second function: the debug records and locations
    belong to the original's subprogram."""
    out = []
    for line in lines:
        if "#dbg_" in line or "@llvm.dbg." in line:
            continue
        out.append(re.sub(r",?\s*!dbg\s+!\d+", "", line))
    return out


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
    spec = _without_debug(body)
    for index, value in pairs:
        pat = re.compile(r"(?<![-\w$.%%])%s(?![-\w$.])" % re.escape(d.param_name(index)))
        spec = [pat.sub(_constant(types[index], value), line) for line in spec]
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
            re.sub(r"\s*!dbg\s+!\d+", "", d.render(kernel)),
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
    clone = [re.sub(r"\s*!dbg\s+!\d+", "", d.render(kernel + SPEC_SUFFIX, prefix=internal, suffix=suffix))] + spec
    counters = ["%s = hidden global i64 0, align 8" % calls, "%s = hidden global i64 0, align 8" % hits]
    return "\n".join(lines[:i] + orig + [""] + clone + [""] + guard + lines[j + 1 :] + counters) + "\n"


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
