"""The kernel's source slice: the part of its unit a standalone program needs.

    s = source_slice(source, globals_at={"g": 0x7f...})   # source: mutators.KernelSource
    s.text        # the unit less the functions and globals the kernel never reaches
    s.headers     # {"include/<path>": text} the unit's own headers (system ones stay #includes)

Found on clang's AST (``search.mutators.cast``), never with regexes: the kernel's
definition, then every function and global its code names, and theirs, by name. Top-level
function definitions and global variables of the unit that nothing kept reaches are cut;
types, macros, declarations and includes stay as they are (unused ones cost nothing).

Recorded globals live at their recorded addresses inside the memory image: a definition
in the unit becomes an ``extern`` declaration, and after the last declaration each name is
a macro that reaches the object at its address:
``#define g (*(__typeof__(g) *)0x5600ff40ULL)`` (``g`` inside its own expansion is the
declared object, used only for its type, so nothing refers to the symbol at link time; an
absolute symbol from ``--defsym`` would need a non-PIE link, since ld relocates it in a PIE).

``SliceError`` when a slice cannot be made (then the MEP carries the kernel's IR).
"""

import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import Dict, List

from ..errors import R3Error
from ..search.mutators import cast

TOOL_TIMEOUT_S = 60


class SliceError(R3Error):
    """The kernel's source cannot be cut out of its unit (why, in one line)."""


@dataclass
class Slice:
    text: str
    headers: Dict[str, str] = field(default_factory=dict)  # path in the MEP -> text
    flags: List[str] = field(default_factory=list)  # the unit's flags that still mean something in the MEP
    kept: List[str] = field(default_factory=list)  # functions kept (the kernel first)


FUNCTION_KINDS = ("FunctionDecl", "CXXMethodDecl", "CXXConstructorDecl", "CXXDestructorDecl", "FunctionTemplateDecl")


def _names(node):
    """Names every DeclRefExpr and MemberExpr below ``node`` refers to."""
    out = set()
    for n, _ in cast.walk(node):
        ref = n.get("referencedDecl") or n.get("referencedMemberDecl")
        if isinstance(ref, dict) and ref.get("name"):
            out.add(ref["name"])
        elif isinstance(ref, str):
            out.add(ref)
        if n.get("kind") == "MemberExpr" and n.get("name"):
            out.add(n["name"])
        ctor = n.get("ctorType")
        if n.get("kind") == "CXXConstructExpr" and isinstance(ctor, dict):
            out.add(ctor.get("qualType", "").split("(")[0].strip())
    return out


def _is_definition(node):
    if node.get("kind") == "FunctionTemplateDecl":
        return False  # templates are instantiated where used: keep them whole
    return any(c.get("kind") == "CompoundStmt" for c in node.get("inner", []) if isinstance(c, dict))


def _top_level(tu):
    """(node, kind) of the unit's own top-level declarations, in order."""
    return [
        n
        for n in tu.get("inner", [])
        if isinstance(n, dict)
        and cast.in_main_file(n)
        and "range" in n
        and "offset" in n["range"].get("begin", {}).get("expansionLoc", n["range"]["begin"])
    ]


def _statement_end(raw, end):
    """``end`` moved past the ``;`` that closes a declaration (and the line's end)."""
    i = end
    while i < len(raw) and raw[i : i + 1] in (b" ", b"\t"):
        i += 1
    if raw[i : i + 1] == b";":
        i += 1
    if raw[i : i + 1] == b"\n":
        i += 1
    return i


def source_slice(source, globals_at=None):
    """The slice of ``source`` (a mutators.KernelSource) that ``source.function`` needs;
    ``globals_at``: {name: address} of the recorded globals (a name the kernel reaches
    is then reached at its address)."""
    globals_at = {_source_name(g): addr for g, addr in (globals_at or {}).items()}
    nodes = cast.dump(source)
    tu = next((n for n in nodes if n.get("kind") == "TranslationUnitDecl"), None)
    if tu is None:
        raise SliceError("clang gave no translation unit for %s" % source.filename)
    top = _top_level(tu)
    name = source.function.split("::")[-1]
    defs = {}  # name -> [nodes] of function definitions
    variables = {}  # name -> [nodes] of global variables
    for n in top:
        if n.get("kind") in FUNCTION_KINDS and _is_definition(n):
            defs.setdefault(n.get("name"), []).append(n)
        elif n.get("kind") == "VarDecl":
            variables.setdefault(n.get("name"), []).append(n)
    if name not in defs:
        raise SliceError("%s defines no function %s at its top level" % (source.filename, source.function))
    keep, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n in keep:
            continue
        keep.add(n)
        for node in defs.get(n, []) + variables.get(n, []):
            todo.extend(_names(node) - keep)
    if "main" in keep:
        raise SliceError("%s reaches main()" % source.function)
    for g in globals_at:
        if g not in keep:  # a function's static, a member: nothing the slice can put at its address
            raise SliceError("recorded global %s is not a global variable the kernel's code names" % g)
    raw = source.text.encode("utf-8", "surrogateescape")
    edits = []  # (begin, end, replacement bytes)
    for n in top:
        kind, nm = n.get("kind"), n.get("name")
        begin, end = cast.extent(n)
        if (
            kind in FUNCTION_KINDS
            and _is_definition(n)
            and nm not in keep
            and kind not in ("CXXConstructorDecl", "CXXDestructorDecl")
        ):  # reached by no name
            edits.append((begin, _statement_end(raw, end), b""))
        elif kind == "VarDecl" and n.get("storageClass") != "extern" and nm not in keep:
            edits.append((begin, _statement_end(raw, end), b""))
        elif kind in FUNCTION_KINDS and nm == name:
            head = raw[begin:end]
            # the driver calls the kernel from another unit: it cannot stay static
            stripped = re.sub(rb"^((?:\s*\b(?:inline|__inline__|__inline)\b)*)\s*\bstatic\b\s*", rb"\1 ", head, count=1)
            if stripped != head:
                edits.append((begin, end, stripped.lstrip()))
    used_globals = sorted(g for g in globals_at if g in keep and g in variables)
    for g in [g for g in globals_at if g in keep and g not in variables]:
        if g in defs:
            raise SliceError("recorded global %s is a function name in %s" % (g, source.filename))
    macro_at = 0  # after the last declaration of a recorded global
    for g in used_globals:
        for n in variables[g]:
            begin, end = cast.extent(n)
            macro_at = max(macro_at, _statement_end(raw, end))
            if n.get("storageClass") == "extern":
                continue
            init = [c for c in n.get("inner", []) if isinstance(c, dict) and "range" in c]
            stop = cast.extent(init[0])[0] if n.get("init") and init else end
            decl = raw[begin:stop].rstrip()
            if n.get("init"):
                decl = decl.rstrip(b"=").rstrip()
            decl = re.sub(rb"\bstatic\b\s*", b"", decl, count=1)
            if b"," in decl.split(b"[")[0] or decl.count(b";"):
                raise SliceError("recorded global %s shares its declaration with others" % g)
            edits.append((begin, _statement_end(raw, end), b"extern " + decl + b";\n"))
    # a recorded global declared only in a header: its macros go before the first kept function
    first_fn = min((cast.extent(n)[0] for nm in keep for n in defs.get(nm, [])), default=len(raw))
    if used_globals and macro_at == 0:
        macro_at = first_fn
    elif macro_at > first_fn and any(
        g in _names(n) for nm in keep for n in defs.get(nm, []) if cast.extent(n)[0] < macro_at for g in used_globals
    ):
        raise SliceError("a function %s needs comes before the last declaration of a global it uses" % source.function)
    for g in [g for g in globals_at if g in keep and g not in variables]:
        used_globals.append(g)  # declared in a header the unit includes
    if used_globals:
        lines = ["/* r3 mep: recorded globals, at their recorded addresses in the memory image */"]
        lines += ["#define %s (*(__typeof__(%s) *)0x%xULL)" % (g, g, globals_at[g]) for g in used_globals]
        edits.append((macro_at, macro_at, ("\n".join(lines) + "\n").encode()))
    out, pos = [], 0
    for begin, end, new in sorted(edits, key=lambda e: (e[0], e[1])):
        if begin < pos:
            raise SliceError("overlapping declarations in %s" % source.filename)
        out += [raw[pos:begin], new]
        pos = end
    out.append(raw[pos:])
    text = b"".join(out).decode("utf-8", "surrogateescape")
    text = re.sub(r"\n{3,}", "\n\n", text)
    headers, flags = local_headers(source)
    kept = [name] + sorted(k for k in keep if k in defs and k != name)
    return Slice(text, headers, flags, kept)


def _source_name(symbol):
    """A recorded global's name in the source: its symbol, or for C++ the demangled name
    of a global of the global namespace (``_ZL5scale`` -> ``scale``)."""
    if not symbol.startswith("_Z"):
        return symbol
    from ..cxxnames import demangle

    name = demangle(symbol)
    return name if re.match(r"^[A-Za-z_]\w*$", name or "") else symbol


def _search_dirs(source):
    """(include directories the unit's flags name, absolute; the flags with them left out)."""
    dirs, rest, args, i = [], [], list(source.parse_args), 0
    base = source.compile_dir or "."
    while i < len(args):
        a = args[i]
        for opt in ("-I", "-iquote", "-isystem", "-idirafter"):
            if a == opt and i + 1 < len(args):
                dirs.append((opt, os.path.normpath(os.path.join(base, args[i + 1]))))
                i += 2
                break
            if (
                a.startswith(opt)
                and len(a) > len(opt)
                and opt != "-I"
                or (opt == "-I" and a.startswith("-I") and len(a) > 2)
            ):
                dirs.append((opt, os.path.normpath(os.path.join(base, a[len(opt) :]))))
                i += 1
                break
        else:
            rest.append(a)
            i += 1
    return dirs, rest


def local_headers(source):
    """({MEP path: text} of the headers of the unit's own tree it includes, its flags
    without include directories (the MEP has its own), plus system -I directories)."""
    dirs, rest = _search_dirs(source)
    own = [source.include_dir] if source.include_dir else []
    roots = [d for _, d in dirs] + own
    cmd = (
        [source.clang]
        + rest
        + ["-iquote", source.include_dir or "."]
        + ["%s%s" % ("-I", d) for _, d in dirs]
        + ["-MM", "-MF", "-", "-x", _lang(source), "-"]
    )
    try:
        proc = subprocess.run(
            cmd,
            input=source.text.encode("utf-8", "surrogateescape"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=TOOL_TIMEOUT_S,
            cwd=source.compile_dir if os.path.isdir(source.compile_dir or "") else None,
        )
    except subprocess.TimeoutExpired:
        raise SliceError("clang -MM did not finish within %ss" % TOOL_TIMEOUT_S)
    if proc.returncode != 0:
        raise SliceError(
            "clang -MM failed on %s: %s"
            % (source.filename, proc.stderr.decode(errors="replace").strip().splitlines()[:1])
        )
    deps = proc.stdout.decode(errors="surrogateescape").replace("\\\n", " ").split(":", 1)[-1].split()
    headers = {}
    system_dirs = []
    for path in deps:
        if path == "-":
            continue
        path = os.path.normpath(os.path.join(source.compile_dir or ".", path))
        placed = False
        for root in roots:
            rel = os.path.relpath(path, root)
            if not rel.startswith(".."):
                with open(path, errors="surrogateescape") as f:
                    headers[os.path.join("include", rel)] = f.read()
                placed = True
        if not placed:
            with open(path, errors="surrogateescape") as f:
                headers[os.path.join("include", os.path.basename(path))] = f.read()
    tree = (
        os.path.commonpath([source.compile_dir, source.include_dir])
        if source.include_dir and source.compile_dir
        else source.include_dir
    )
    for opt, d in dirs:  # a directory outside the unit's tree (a dependency's prefix) stays as it is
        if tree and (d + os.sep).startswith(tree + os.sep):
            continue
        system_dirs.append(opt + d)
    # what means something to a compile of the slice alone (no link, no outputs, no deps)
    from ..compile.stages import _NOT_FOR_THE_OBJECT  # -flto would make an object of bitcode

    kept = [
        a
        for a in rest
        if a.startswith(("-D", "-U", "-std", "-f", "-m", "-x")) and not a.startswith(_NOT_FOR_THE_OBJECT)
    ]
    return headers, kept + system_dirs


def _lang(source):
    from ..search.mutators.base import language

    return "c++" if language(source) == "C++" else "c"
