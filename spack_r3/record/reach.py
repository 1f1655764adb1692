"""The globals a kernel reaches through functions of other units, named at link time.

A kernel's own unit tells which globals the kernel touches (``KernelInfo.globals``); a
callee in another unit may touch more: SNAP's sweep calls into ``plib``, which reads
the module variable ``plib_module::nthreads``; Nekbone's ``glsc3`` calls ``gop``, which
reads the COMMON block ``nekmpi``. Neither shows in the kernel's unit, and replay refused
the kernel ("a global of another translation unit that the recording did not keep").

Each unit's ``tu.json`` lists, for each function it exports, the writable globals of
external linkage it reaches (``ModuleAnalysis.export_globals``). When r3-record links an
executable, every unit of the build is known: this module follows each kernel's calls
through the units (``callees``: ingest follows the same calls for the code) and writes a
small object that names each global reached so per kernel. Its constructor hands the
table to the record runtime (``__r3_extra_globals``, runtime/probes.c), which adds those
globals to the kernel's own when the kernel registers: they are captured, compared and
replayed at their addresses as the kernel's own are. The references are weak: a unit of
another program of the same build leaves its entry null, and it is skipped.

    args = link_args(clang, record_dir, tmp, warn)   # [] or [the table's object]
    index = exporters(load_units(record_dir))        # function -> Export
    names = list(callees(kernel_calls, index))       # what a kernel's calls reach
"""

import glob
import json
import os
import subprocess
from dataclasses import dataclass
from typing import Dict, List, Tuple

from ..iredit import c_string, global_ref

REGISTER = "__r3_extra_globals"


@dataclass(frozen=True)
class Reached:
    kernel: str  # the kernel's symbol
    tu_dir: str  # its unit's record directory (kernels of two units may share a name)
    name: str  # the global's symbol
    size: int


@dataclass(frozen=True)
class Export:
    """A function a unit exports: the unit, what it calls in other units, and the writable
    globals of external linkage it reaches in its own (``ModuleAnalysis.export_globals``)."""

    unit: str
    calls: Tuple[str, ...]
    globals: Tuple[Tuple[str, int], ...]


def load_units(record_dir) -> Dict[str, dict]:
    """Each unit's record directory -> its ``tu.json`` (units whose file is unreadable left out)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(record_dir, "tus", "*", "tu.json"))):
        try:
            with open(path) as f:
                out[os.path.dirname(path)] = json.load(f)
        except (OSError, ValueError):
            continue
    return out


def exporters(units) -> Dict[str, Export]:
    """Function name -> its Export, over ``load_units``' units (the first unit that exports
    a name keeps it)."""
    index = {}
    for tu_dir, meta in units.items():
        linkable = meta.get("export_globals", {})
        for name, calls in meta.get("exports", {}).items():
            index.setdefault(name, Export(tu_dir, tuple(calls), tuple(map(tuple, linkable.get(name, [])))))
    return index


def callees(calls, index):
    """Every function reached from ``calls`` (a kernel's calls into other units), each once:
    exported ones are followed into what they call, the rest (library functions) are not."""
    todo, seen = list(calls), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        yield name
        if name in index:
            todo.extend(index[name].calls)


def reached(units) -> List[Reached]:
    """Per kernel of the build's units (``load_units``), the globals its callees in other
    units reach and its own unit does not name."""
    index = exporters(units)
    out = []
    for tu_dir, meta in units.items():
        for k in meta.get("kernels", []):
            own = {g["name"] for g in k.get("globals", [])}
            found = {}
            for name in callees(k.get("calls", []), index):
                export = index.get(name)
                if export is not None and export.unit != tu_dir:
                    for g, size in export.globals:
                        if g not in own:
                            found.setdefault(g, size)
            out += [Reached(k["name"], tu_dir, g, size) for g, size in sorted(found.items())]
    return out


def table_ir(entries, triple):
    """The table's module: ``{kernel, tu_dir, global's name, its address, size}`` entries
    and a constructor that registers them."""
    lines = ['target triple = "%s"' % triple] if triple else []
    strings, rows, declared = {}, [], set()

    def string(value):
        if value not in strings:
            const, n = c_string(value)
            strings[value] = "@__r3.xs.%d" % len(strings)
            lines.append("%s = private unnamed_addr constant [%d x i8] %s, align 1" % (strings[value], n, const))
        return strings[value]

    for e in entries:
        if e.name not in declared:
            declared.add(e.name)
            lines.append("%s = extern_weak global i8" % global_ref(e.name))
        rows.append(
            "{ ptr, ptr, ptr, ptr, i64 } { ptr %s, ptr %s, ptr %s, ptr %s, i64 %d }"
            % (string(e.kernel), string(e.tu_dir), string(e.name), global_ref(e.name), e.size)
        )
    lines += [
        "@__r3.extra = private constant [%d x { ptr, ptr, ptr, ptr, i64 }] [%s], align 8"
        % (len(rows), ", ".join(rows)),
        "declare void @%s(ptr, i64)" % REGISTER,
        "define internal void @__r3.extra.ctor() {",
        "  call void @%s(ptr @__r3.extra, i64 %d)" % (REGISTER, len(rows)),
        "  ret void",
        "}",
        "@llvm.global_ctors = appending global [1 x { i32, ptr, ptr }] [{ i32, ptr, ptr } { i32 101, ptr @__r3.extra.ctor, ptr null }]",
    ]
    return "\n".join(lines) + "\n"


def link_args(clang, record_dir, tmp, warn):
    """[the table's object] for an executable linked now, or [] where no kernel reaches a
    global through another unit (or the table cannot be built: said, and the link goes on
    as before, those kernels refused in replay as before)."""
    units = load_units(record_dir)
    entries = reached(units)
    if not entries:
        return []
    triples = {m.get("triple") for m in units.values()} - {None}
    ll, obj = os.path.join(tmp, "r3-reach.ll"), os.path.join(tmp, "r3-reach.o")
    with open(ll, "w") as f:
        f.write(table_ir(entries, triples.pop() if len(triples) == 1 else ""))
    proc = subprocess.run([clang, "-c", "-fPIC", "-x", "ir", ll, "-o", obj], capture_output=True, text=True)
    if proc.returncode:
        warn("the globals kernels reach through other units are not recorded: %s" % (proc.stderr.strip()[:300]))
        return []
    return [obj]
