"""The package's layers import one way: no module imports, at its top or inside a
function, one that imports it back (directly or through others)."""

import ast
import os

from conftest import REPO_ROOT

PACKAGE = os.path.join(REPO_ROOT, "spack_r3")

# The one circle left, until the compile layer is drawn out of replay/ (issue 62): the
# backends' registry names the device and record modules that themselves reach replay's
# stages, which ask the registry for a capture's backend. It may shrink, never grow.
KNOWN = {
    "spack_r3.backends",
    "spack_r3.device.codegen",
    "spack_r3.device.cudareplay",
    "spack_r3.device.hook",
    "spack_r3.device.screen",
    "spack_r3.record.cuda",
    "spack_r3.record.launcher",
    "spack_r3.record.offload",
    "spack_r3.replay.engine",
    "spack_r3.replay.source",
    "spack_r3.replay.stages",
}


def modules():
    out = {}
    for dirpath, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                name = os.path.relpath(path[:-3], REPO_ROOT).replace(os.sep, ".")
                out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = path
    return out


def imports(name, path, known):
    """The package's modules ``name`` imports anywhere in it (but under TYPE_CHECKING)."""
    package = name.split(".") if path.endswith("__init__.py") else name.split(".")[:-1]
    out = set()

    def visit(node):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                sub = target + "." + a.name
                out.add(sub if sub in known else target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    with open(path) as f:
        visit(ast.parse(f.read()))
    return {m for m in out if m in known and m != name}


def circles(graph):
    """The strongly connected sets of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = set()
            while True:
                w = stack.pop()
                on.discard(w)
                members.add(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(members)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_no_import_circle_but_the_one_known():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    assert graph["spack_r3.emit.apply"], "the import graph is empty: the test reads no imports"
    for members in circles(graph):
        assert members <= KNOWN, sorted(members - KNOWN)


def test_a_circle_is_found_where_there_is_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [{"a", "b", "c"}]
