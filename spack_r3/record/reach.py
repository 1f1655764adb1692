"""The globals a kernel reaches through functions of other units, named at link time.

A kernel's own unit tells which globals the kernel touches (``KernelInfo.globals``); a
callee in another unit may touch more: SNAP's sweep calls into ``plib``, which reads
the module variable ``plib_module::nthreads``; Nekbone's ``glsc3`` calls ``gop``, which
reads the COMMON block ``nekmpi``. Neither shows in the kernel's unit, and replay refused
the kernel ("a global of another translation unit that the recording did not keep").

Each unit's ``tu.json`` lists, for each function it exports, the writable globals of
external linkage it reaches (``ModuleAnalysis.export_globals``). When r3-record links an
executable, every unit of the build is known: this module follows each kernel's calls
through the units (as ingest does for the code, ``ingest._link_units``) and writes a
small object that names each global reached so per kernel. Its constructor hands the
table to the record runtime (``__r3_extra_globals``, runtime/extra.c), which adds those
globals to the kernel's own when the kernel registers: they are captured, compared and
replayed at their addresses as the kernel's own are. The references are weak: a unit of
another program of the same build leaves its entry null, and it is skipped.

    args = link_args(clang, record_dir, tmp, warn)   # [] or [the table's object]
"""

import glob
import json
import os
import subprocess
from dataclasses import dataclass
from typing import List

from ..iredit import c_string, global_ref

REGISTER = "__r3_extra_globals"


@dataclass(frozen=True)
class Reached:
    kernel: str  # the kernel's symbol
    tu_dir: str  # its unit's record directory (kernels of two units may share a name)
    name: str  # the global's symbol
    size: int


def _units(record_dir):
    out = {}
    for path in sorted(glob.glob(os.path.join(record_dir, "tus", "*", "tu.json"))):
        try:
            with open(path) as f:
                out[os.path.dirname(path)] = json.load(f)
        except (OSError, ValueError):
            continue
    return out


def reached(record_dir) -> List[Reached]:
    """Per kernel of the build's units, the globals its callees in other units reach and
    its own unit does not name."""
    units = _units(record_dir)
    exporters = {}  # function -> (unit, what it calls elsewhere, the globals it reaches)
    for tu_dir, meta in units.items():
        linkable = meta.get("export_globals", {})
        for name, calls in meta.get("exports", {}).items():
            exporters.setdefault(name, (tu_dir, calls, linkable.get(name, [])))
    out = []
    for tu_dir, meta in units.items():
        for k in meta.get("kernels", []):
            own = {g["name"] for g in k.get("globals", [])}
            found, todo, seen = {}, list(k.get("calls", [])), set()
            while todo:
                name = todo.pop()
                if name in seen or name not in exporters:
                    continue
                seen.add(name)
                unit, calls, linkable = exporters[name]
                if unit != tu_dir:
                    for g, size in linkable:
                        if g not in own:
                            found.setdefault(g, size)
                todo.extend(calls)
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
    entries = reached(record_dir)
    if not entries:
        return []
    triples = {m.get("triple") for m in _units(record_dir).values()} - {None}
    ll, obj = os.path.join(tmp, "r3-reach.ll"), os.path.join(tmp, "r3-reach.o")
    with open(ll, "w") as f:
        f.write(table_ir(entries, triples.pop() if len(triples) == 1 else ""))
    proc = subprocess.run([clang, "-c", "-fPIC", "-x", "ir", ll, "-o", obj], capture_output=True, text=True)
    if proc.returncode:
        warn("the globals kernels reach through other units are not recorded: %s" % (proc.stderr.strip()[:300]))
        return []
    return [obj]
