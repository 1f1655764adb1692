"""What differs under Spack 1.x, tested without one (CI has Spack 0.2x only): the output of
``spack repo list``, the spec file install, where variants go in a spec with a compiler,
the compiler of a concrete spec, the compilers a wrapped package finds, and how a wrapped
package imports its parent (by the parent repository's layout).

With ``R3_SPACK1_ROOT`` pointing at a Spack 1.x (and its config reachable, e.g. through
``SPACK_USER_CONFIG_PATH``), the last test also runs ``spack r3 -h`` and ``spack repo list``
through it; otherwise it skips.
"""

import os
import subprocess
import sys
import types

import pytest

from spack_r3.extension import EXTENSION_ROOT
from spack_r3.spack import wrap
from spack_r3.roundtrip.record import spec_compiler, with_clang
from spack_r3.spack.repos import detect_layout, write_scope
from spack_r3.spack.runner import Spack, SpackResult, parse_repo_list


def test_repo_list_of_either_spack(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b with space"
    a.mkdir()
    b.mkdir()
    old = "r3         %s\nbuiltin    %s\n" % (a, b)  # 0.x
    assert parse_repo_list(old) == [("r3", str(a)), ("builtin", str(b))]
    new = (
        "[+] r3         v1.0    %s\n"
        "[+] builtin    v2.2    %s\n"
        " -  remote            %s\n"
        "[-] broken            %s: cannot read repo.yaml\n" % (a, b, a, b)
    )  # 1.x
    assert parse_repo_list(new) == [("r3", str(a)), ("builtin", str(b))]
    assert parse_repo_list("[+] gone   v2.0   /no/such/dir\n") == []


def test_layout_follows_the_spack_major_version():
    assert detect_layout("0.23.1") == "v1" and detect_layout("0.24.0.dev0") == "v1"
    assert detect_layout("1.0.2") == "v2" and detect_layout("1.2.0.dev0") == "v2"


def _fake_spack(version, calls):
    spack = Spack(root="/nonexistent-spack")
    spack._version = version

    def run(*args, timeout=None, cwd=None, env=None):
        calls.append((list(args), cwd))
        return SpackResult(list(args), 0, "", "", 0.0)

    spack.run = run
    return spack


@pytest.mark.parametrize("version", ["0.24.0.dev0", "1.2.0.dev0"])
def test_spec_file_install_by_version(tmp_path, version):
    specfile = str(tmp_path / "spec.json")
    calls = []
    outcome = _fake_spack(version, calls).install_specfile(specfile, overwrite=True)
    assert outcome.ok
    [(args, cwd)] = calls
    assert args[:4] == ["install", "--keep-stage", "--overwrite", "-y"]
    if version.startswith("0."):
        assert args[4:] == ["-f", specfile] and cwd is None
    else:  # -f is --force on 1.x; a spec file is a spec literal there
        assert args[4:] == ["./spec.json"] and cwd == str(tmp_path)


def test_variants_go_on_the_root_before_the_compiler():
    assert with_clang("r3-dense") == "r3-dense %clang"
    assert with_clang("r3-dense", "+r3") == "r3-dense +r3 %clang"
    assert with_clang("r3-dense@1.0 %gcc", "~r3+r3probes") == "r3-dense@1.0 ~r3+r3probes %gcc"
    assert with_clang("r3-dense%clang", "+r3") == "r3-dense +r3 %clang"


def test_compiler_of_a_concrete_spec():
    old = {"name": "r3-dense", "hash": "a", "compiler": {"name": "clang", "version": "19.1.7"}}
    assert spec_compiler(old, [old]) == "clang@19.1.7"
    root = {
        "name": "r3-dense",
        "hash": "a",
        "dependencies": [
            {"name": "glibc", "hash": "g", "parameters": {"deptypes": ["link"], "virtuals": ["libc"]}},
            {"name": "llvm", "hash": "l", "parameters": {"deptypes": ["build"], "virtuals": ["c"]}},
        ],
    }
    nodes = [
        root,
        {"name": "glibc", "hash": "g", "version": "2.36"},
        {"name": "llvm", "hash": "l", "version": "19.1.7"},
    ]
    assert spec_compiler(root, nodes) == "llvm@19.1.7"
    assert spec_compiler({"name": "x", "hash": "x"}, []) is None


class InstallError(Exception):
    """Spack's (``from spack.package import *`` gives it to a package)."""


def _wrapped_class(hooks="/hooks"):
    """A recipe (its ``compiler`` as 0.x and 1.x give it) and the subclass wrap writes,
    with the launchers where ``hooks`` says they were when the package was written."""
    ns = {"os": os, "R3_HOOKS_AT_EMIT": hooks, "InstallError": InstallError}
    recipe = (
        "class Recipe:\n    given = None\n\n    @property\n    def compiler(self):\n"
        "        return self.given\n\n\nclass Wrapped(Recipe):\n"
    )
    exec(wrap._HOOKS + wrap._COMPILER_PROXY + recipe + wrap._COMPILERS, ns)
    return ns["Wrapped"]


@pytest.fixture
def hooks(tmp_path):
    """A directory with the launchers in it (the emitted package checks they are there)."""
    for name in ("r3-spack-cc", "r3-spack-cxx", "r3-spack-fc", "r3-spack-f77"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    return str(tmp_path)


def _node(**attrs):
    return types.SimpleNamespace(package=types.SimpleNamespace(**attrs))


class _Spec1:
    """A concrete spec of Spack 1.x: compilers are the dependencies providing c / cxx."""

    def __init__(self, by_lang):
        self.by_lang = by_lang

    def dependencies(self, name=None, deptype=None, *, virtuals=None):
        return [self.by_lang[v] for v in virtuals or [] if v in self.by_lang]


class _Adaptor:
    """1.x's deprecated ``self.compiler``: raises for a language the package has not."""

    cc = "/usr/bin/clang-19"

    @property
    def cxx(self):
        raise AttributeError("'x' has no cxx compiler, so the 'cxx' property cannot be retrieved")


def _compilers(cc=None, cxx=None, fortran=None):
    return {"cc": cc, "cxx": cxx, "fc": fortran, "f77": fortran}


def test_wrapped_package_finds_its_compilers(hooks):
    cls = _wrapped_class(hooks)
    p = cls()
    p.spec = _Spec1({"c": _node(cc="/usr/bin/clang-19")})  # 1.x, a C-only package
    p.given = _Adaptor()
    assert p._r3_compilers() == _compilers("/usr/bin/clang-19")
    p.spec = _Spec1({"c": _node(cc="/usr/bin/clang-19"), "cxx": _node(cxx="/usr/bin/clang++-19")})
    assert p._r3_compilers() == _compilers("/usr/bin/clang-19", "/usr/bin/clang++-19")
    # 1.x, C and Fortran: the Fortran compiler's package has it as ``fortran``
    p.spec = _Spec1({"c": _node(cc="/usr/bin/clang-19"), "fortran": _node(fortran="/usr/bin/flang-new-19")})
    assert p._r3_compilers() == _compilers("/usr/bin/clang-19", fortran="/usr/bin/flang-new-19")
    p.spec = _Spec1({})  # 0.x: no language dependencies; self.compiler has them all
    p.given = types.SimpleNamespace(
        cc="/usr/bin/clang-19", cxx="/usr/bin/clang++-19", fc="/usr/bin/flang-new-19", f77=None, version="19.1.7"
    )
    assert p._r3_compilers() == dict(
        _compilers("/usr/bin/clang-19", "/usr/bin/clang++-19", "/usr/bin/flang-new-19"), f77=None
    )
    env = {}
    p._r3_launch(types.SimpleNamespace(set=env.__setitem__), "record")
    assert env["SPACK_CC"] == hooks + "/r3-spack-cc" and env["R3_REAL_CXX"] == "/usr/bin/clang++-19"
    assert env["SPACK_FC"] == hooks + "/r3-spack-fc" and env["R3_REAL_FC"] == "/usr/bin/flang-new-19"
    assert "SPACK_F77" not in env  # a compiler the build has not is left alone
    assert p.compiler.cc == "/usr/bin/clang-19"  # outside the build: the recipe's own
    # Inside the build, a recipe that passes its build the compiler (CC=self.compiler.cc)
    # passes the launcher: the build's environment holds what _r3_launch set.
    saved = dict(os.environ)
    try:
        os.environ.update(env)
        assert (p.compiler.cc, p.compiler.cxx, p.compiler.fc, p.compiler.version) == (
            hooks + "/r3-spack-cc",
            hooks + "/r3-spack-cxx",
            hooks + "/r3-spack-fc",
            "19.1.7",
        )
        assert p._r3_compilers()["cxx"] == "/usr/bin/clang++-19"
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_a_package_finds_the_launchers_where_spack_r3_is_now(hooks, tmp_path, monkeypatch):
    """spack-r3 moved since it wrote the package (another virtualenv, another node):
    $R3_HOOKS says where it is now; with the launchers nowhere, the build stops with one
    line saying what to do."""
    p = _wrapped_class(str(tmp_path / "gone"))()
    p.spec, p.given = _Spec1({}), types.SimpleNamespace(cc="/usr/bin/clang-19", cxx=None)
    env = {}
    monkeypatch.setenv("R3_HOOKS", hooks)
    p._r3_launch(types.SimpleNamespace(set=env.__setitem__), "apply")
    assert env["SPACK_CC"] == os.path.join(hooks, "r3-spack-cc")
    monkeypatch.delenv("R3_HOOKS")
    with pytest.raises(InstallError, match="r3-spack-cc is not in .*gone: install spack-r3 and set R3_HOOKS"):
        p._r3_launch(types.SimpleNamespace(set=env.__setitem__), "apply")


def test_parent_is_imported_by_its_own_repository_layout():
    # A v1 repository (all of 0.x; read by 1.x too) is ``spack.pkg.<ns>`` whatever the
    # layout of the repository the wrapped package is written to.
    v1 = wrap.record_package("r3", "r3-dense", "v1", {"R3_RECORD_DIR": "/r"})
    assert "from spack.pkg.r3.r3_dense import *" in v1
    v2 = wrap.tuned_package("builtin", "3proxy", "v2", {}, "0123456789abcdef")
    assert "from spack_repo.builtin.packages._3proxy.package import _3proxy as _R3Original" in v2
    compile(v1, "package.py", "exec")
    compile(v2, "package.py", "exec")


def test_extension_help_through_a_real_spack1(tmp_path):
    root = os.environ.get("R3_SPACK1_ROOT")
    if not root or not os.access(os.path.join(root, "bin", "spack"), os.X_OK):
        pytest.skip("no Spack 1.x (set R3_SPACK1_ROOT)")
    spack = Spack(root=root)
    if spack.major_minor() < (1, 0):
        pytest.skip("R3_SPACK1_ROOT is Spack %s" % spack.version())
    assert spack.repo_list(), "no repository parsed from spack repo list"
    ext = write_scope(str(tmp_path / "ext"), config={"extensions": [EXTENSION_ROOT]})
    env = dict(spack.environment(), SPACK_PYTHON=os.environ.get("SPACK_PYTHON") or sys.executable)
    proc = subprocess.run([spack.exe, "-C", ext, "r3", "-h"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "emit" in proc.stdout and "record" in proc.stdout


def test_a_dev_path_spec_builds_a_copy_of_the_tree_without_its_build_outputs(tmp_path):
    """``spack develop`` trees build in place: r3's builds get their own copy, or they would
    write into the user's tree and reuse its objects (compiling nothing with probes)."""
    from spack_r3.spack.devpath import dev_path, private_copy

    tree = tmp_path / "my src"
    (tree / "sub").mkdir(parents=True)
    (tree / "main.c").write_text("int main(void) { return 0; }\n")
    (tree / "sub" / "kernel.c").write_text("void k(void) {}\n")
    (tree / "main.o").write_bytes(b"\x7fELF old object")
    (tree / "sub" / "libk.a").write_bytes(b"!<arch>\n")
    (tree / "build-linux-debian12-x86_64_v4-y4x7646").mkdir()
    (tree / "build-linux-debian12-x86_64_v4-y4x7646" / "CMakeCache.txt").write_text("old\n")
    (tree / "spack-build-out.txt").write_text("old log\n")
    (tree / "build-linux-debian12-x86_64_v4-tbdaaps").symlink_to(tmp_path / "gone-stage")
    before = sorted(str(p) for p in tree.rglob("*"))

    spec = 'xsbench@20 +openmp dev_path="%s" %%clang' % tree
    assert dev_path(spec) == str(tree)
    copied_spec, copy = private_copy(spec, str(tmp_path / "build" / "dev-src"))
    assert copied_spec == "xsbench@20 +openmp dev_path=%s %%clang" % copy
    kept = sorted(os.path.relpath(str(p), copy) for p in __import__("pathlib").Path(copy).rglob("*"))
    assert kept == ["main.c", "sub", os.path.join("sub", "kernel.c")]
    assert sorted(str(p) for p in tree.rglob("*")) == before  # the user's tree is only read
    assert private_copy("xsbench@20 %clang", str(tmp_path / "none")) == ("xsbench@20 %clang", None)
