"""The package's layers import one way: no module imports, at its top or inside a
function, one that imports it back (directly or through others)."""

import ast
import os
import re

from conftest import REPO_ROOT

PACKAGE = os.path.join(REPO_ROOT, "spack_r3")

# The stages above the compile layer: it serves them all (replay measures what it builds,
# the +r3 build, the MEP and the device code generation build the same), so it imports
# none of them.
ABOVE_COMPILE = ("replay", "search", "emit", "mep", "device", "roundtrip", "commands", "scale", "spack", "model")


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


def graph():
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_no_import_circle():
    g = graph()
    assert g["spack_r3.emit.apply"], "the import graph is empty: the test reads no imports"
    assert circles(g) == []


def test_the_compile_layer_imports_no_stage_above_it():
    g = graph()
    compile_modules = [m for m in g if m.startswith("spack_r3.compile.")]
    assert "spack_r3.compile.stages" in compile_modules
    above = {
        (m, i) for m in compile_modules for i in g[m] if i.split(".")[1] in ABOVE_COMPILE and i != "spack_r3.compile"
    }
    assert above == set()


def test_a_circle_is_found_where_there_is_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [{"a", "b", "c"}]


def packages_imported(g):
    """Each subpackage of spack_r3 and the other subpackages its modules import."""
    paths = modules()

    def package(name):  # its subpackage, or None for a top module (spack_r3.data)
        parts = name.split(".")
        return parts[1] if len(parts) >= 3 or (len(parts) == 2 and paths[name].endswith("__init__.py")) else None

    out = {}
    for name, targets in g.items():
        if package(name) is None:
            continue
        mine = out.setdefault(package(name), set())
        mine.update(package(t) for t in targets if package(t) not in (None, package(name)))
    return out


def test_design_md_s_import_table_is_the_tree_s():
    with open(os.path.join(REPO_ROOT, "docs", "design.md")) as f:
        text = f.read()
    table = text.split("<!-- imports -->")[1].split("<!-- end imports -->")[0]
    written = {}
    for row in re.findall(r"^\| `(\w+)/` \| (.*) \|$", table, re.M):
        written[row[0]] = set(re.findall(r"`(\w+)/`", row[1]))
    assert written == packages_imported(graph())


def test_the_modules_at_the_top_import_no_stage():
    """The package's own modules (data, settings, ...) sit under every stage; a package
    (backends/, a plug-in per device kind) is not one of them."""
    g, paths = graph(), modules()
    top = [m for m in g if m.count(".") == 1 and not paths[m].endswith("__init__.py")]
    assert "spack_r3.data" in top
    assert {(m, t) for m in top for t in g[m] if t.count(".") >= 2} == set()


def test_design_md_s_layout_names_every_package_and_top_module():
    with open(os.path.join(REPO_ROOT, "docs", "design.md")) as f:
        layout = f.read().split("## Layout")[1]
    named = set(re.findall(r"^  (\w+/|\w+\.py) ", layout, re.M))
    tree = {e + "/" for e in os.listdir(PACKAGE) if os.path.isfile(os.path.join(PACKAGE, e, "__init__.py"))}
    tree |= {e for e in os.listdir(PACKAGE) if e.endswith(".py") and e != "__init__.py"}
    assert tree - named == set()
