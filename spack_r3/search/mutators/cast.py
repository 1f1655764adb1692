"""The kernel's source as clang sees it: ``clang -Xclang -ast-dump=json`` (never regexes).

    fn = function_definition(source)             # the kernel's FunctionDecl (JSON), with a body
    begin, end = extent(fn)                       # byte offsets of the definition in source.text
    text = replace_function(source, new_definition_text)

Clang's JSON omits a location's ``file`` when it is the same as the previous location it
printed; ``dump`` walks every dump in order and writes the resolved file into each
location (``"_file"``) and whether it is the unit itself (``"_main"``), so offsets can be
trusted to point into ``source.text``.
"""

import json
import os
import subprocess
import tempfile

from ...errors import R3Error

AST_TIMEOUT_S = 60


class ASTError(R3Error):
    """The unit does not parse (its first error line), or the kernel is not defined in it."""


def dump(source, text=None, function=None):
    """Top-level declarations of the unit's AST (only ``function``'s when given), with files
    resolved; ASTError with clang's first error when the text does not parse."""
    text = source.text if text is None else text
    with tempfile.TemporaryDirectory(prefix="r3-ast-") as tmp:
        path = os.path.join(tmp, source.filename)
        with open(path, "w", errors="surrogateescape") as f:
            f.write(text)
        cmd = [source.clang] + list(source.parse_args) + ["-fsyntax-only", "-Xclang", "-ast-dump=json"]
        if function:
            cmd += ["-Xclang", "-ast-dump-filter=" + function]
        if source.include_dir:
            cmd += ["-iquote", source.include_dir]
        cwd = source.compile_dir if os.path.isdir(source.compile_dir or "") else tmp
        try:
            proc = subprocess.run(
                cmd + [path], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=AST_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            raise ASTError("clang did not parse %s within %ss" % (source.filename, AST_TIMEOUT_S))
        err = proc.stderr.decode(errors="replace").replace(path, source.filename)
        if proc.returncode != 0:
            first = [l for l in err.splitlines() if "error:" in l]
            raise ASTError("%s does not parse: %s" % (source.filename, (first or err.splitlines() or ["?"])[0]))
    out, data, pos = [], proc.stdout.decode(errors="surrogateescape"), 0
    decoder = json.JSONDecoder()
    while True:
        start = data.find("{", pos)
        if start < 0:
            break
        node, pos = decoder.raw_decode(data, start)
        out.append(node)
    state = {"file": None}
    for node in out:
        _resolve(node, state, path)
    return out


def _resolve(node, state, main):
    """Annotate locations in document order with their file (see the module docstring)."""
    if isinstance(node, dict):
        if "offset" in node or "file" in node or "spellingLoc" in node:
            if "spellingLoc" in node:  # a macro expansion: where it was written and where used
                _resolve(node["spellingLoc"], state, main)
                _resolve(node["expansionLoc"], state, main)
                node["_file"], node["_main"] = node["expansionLoc"].get("_file"), node["expansionLoc"].get("_main")
                return
            if "file" in node:
                state["file"] = node["file"]
            node["_file"] = state["file"]
            node["_main"] = (
                state["file"] is not None
                and os.path.basename(state["file"]) == os.path.basename(main)
                and "includedFrom" not in node
            )
            if "includedFrom" in node:
                state["included"] = True
            return
        for key in ("loc", "range"):
            if key in node:
                _resolve(node[key], state, main)
        for key, value in node.items():
            if key not in ("loc", "range"):
                _resolve(value, state, main)
    elif isinstance(node, list):
        for item in node:
            _resolve(item, state, main)


def offset(loc):
    """The byte offset (clang counts bytes: slice ``text.encode()``, not ``text``) of a location in the unit (its expansion for a macro)."""
    loc = loc.get("expansionLoc", loc)
    return loc["offset"]


def extent(node):
    """[begin, end) byte offsets of a node in the unit's text."""
    begin, end = node["range"]["begin"], node["range"]["end"]
    end = end.get("expansionLoc", end)
    return offset(begin), end["offset"] + end.get("tokLen", 0)


def in_main_file(node):
    loc = node.get("loc", {})
    return bool(loc.get("_main"))


def function_definition(source, text=None, name=None):
    """The definition (with a body) of the kernel's function in the unit."""
    name = name or source.function
    for node in dump(source, text, function=name):
        if (
            node.get("kind") in ("FunctionDecl", "CXXMethodDecl")
            and node.get("name") == name.split("::")[-1]
            and in_main_file(node)
            and any(c.get("kind") == "CompoundStmt" for c in node.get("inner", []))
        ):
            return node
    raise ASTError("%s defines no function %s" % (source.filename, name))


def body(fn):
    """The function's body (its CompoundStmt)."""
    return [c for c in fn.get("inner", []) if c.get("kind") == "CompoundStmt"][-1]


def walk(node, parents=()):
    """(node, parents) for every node below ``node``, in document order."""
    yield node, parents
    for child in node.get("inner", []) or []:
        if isinstance(child, dict):
            yield from walk(child, parents + (node,))


def replace_function(source, new_definition, text=None, name=None):
    """The unit with the kernel's definition replaced by ``new_definition``."""
    text = source.text if text is None else text
    begin, end = extent(function_definition(source, text, name))
    raw = text.encode("utf-8", "surrogateescape")  # clang's offsets count bytes, not characters
    return (
        raw[:begin].decode("utf-8", "surrogateescape")
        + new_definition.strip("\n")
        + raw[end:].decode("utf-8", "surrogateescape")
    )
