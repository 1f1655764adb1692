"""Recipe box without Spack processes: analysis, name mapping, generation, validation, fixes,
repository layouts, reproducible source tarballs."""

import json
import os
import tarfile

import pytest

from spack_r3.recipe import fixes, names
from spack_r3.recipe.analyze import analyze
from spack_r3.recipe.generate import RuleGenerator, extract_code, fit_layout
from spack_r3.recipe.retrieve import similar
from spack_r3.recipe.source import Source, acquire, finalize, pack_tree
from spack_r3.recipe.validate import validate
from spack_r3.spack import repos
from conftest import TREES


@pytest.fixture(scope="module")
def index(spack_root):
    builtin = repos.open_repo(os.path.join(spack_root, "var", "spack", "repos", "builtin"))
    assert builtin is not None and builtin.layout == "v1"
    idx = repos.PackageIndex([builtin])
    # the test trees' library, as if already generated into a repository
    idx.recipes["r3tvec"] = repos.RecipeInfo("r3tvec", "r3local", "/dev/null", ["makefile"])
    return idx


def _analysis(name, index):
    a = analyze(os.path.join(TREES, name), name)
    names.resolve(a, index)
    return a


def test_analyze_cmake_tree(index):
    a = _analysis("r3t-cmake", index)
    assert a.build_system == "cmake" and a.version == "1.2.0" and a.languages == ["c"]
    assert a.license == "MIT"
    assert [(v.name, v.default, v.option) for v in a.variants] == [
        ("zlib", True, "R3T_WITH_ZLIB"),
        ("fast", False, "R3T_FAST"),
    ]
    deps = {(d.spack, d.when) for d in a.spack_dependencies()}
    # find_package(ZLIB) under if(R3T_WITH_ZLIB) -> the zlib-api virtual, only with +zlib
    assert deps == {("zlib-api", "+zlib"), ("r3tvec", None), ("pkgconfig", None)}
    assert [(c.exe, c.args) for c in a.checks] == [("r3t-cmake", ["--check"])]
    assert not a.unresolved()


def test_analyze_autotools_makefile_meson_trees(index):
    at = _analysis("r3t-autotools", index)
    assert (at.build_system, at.version, at.build["configure_present"]) == ("autotools", "2.0.1", True)
    assert [(v.name, v.default, v.kind) for v in at.variants] == [("doubles", True, "enable")]
    assert all(d.system for d in at.dependencies)  # AC_CHECK_LIB([m]) is libc's
    mk = _analysis("r3tvec", index)
    assert (mk.build_system, mk.version, mk.build["prefix_var"], mk.build["has_install"]) == (
        "makefile",
        "0.3.1",
        "PREFIX",
        True,
    )
    assert mk.executables == ["r3tvec-demo"] and mk.checks[0].args == ["--check"]
    ms = _analysis("r3t-meson", index)
    assert (ms.build_system, ms.version, ms.license) == ("meson", "0.9.0", "BSD-3-Clause")
    assert {d.spack for d in ms.spack_dependencies()} == {"r3tvec", "pkgconfig"}
    assert [(v.name, v.option, v.default) for v in ms.variants] == [("verbose", "verbose", False)]


def test_a_makefile_without_all_or_install_installs_its_default_goal(tmp_path):
    """The shape of a single-benchmark Makefile (PolyBench's, as people wrap it): make's first
    target is the program, and the generated install() puts it in bin."""
    (tmp_path / "Makefile").write_text(
        "CFLAGS = -O3\nbench: bench.o util.o\n\t$(CC) $^ -o $@ -lm\n"
        "%.o: %.c\n\t$(CC) $(CFLAGS) -c $< -o $@\nclean:\n\trm -f bench *.o\n"
    )
    (tmp_path / "bench.c").write_text("int main(void) { return 0; }\n")
    a = analyze(str(tmp_path), "bench")
    assert a.build_system == "makefile" and not a.build["has_install"]
    assert a.executables == ["bench"]
    source = Source(tree=str(tmp_path), url="file:///tmp/bench-1.0.tar.gz", sha256="a" * 64, origin=str(tmp_path))
    text = RuleGenerator().generate(a, source)
    assert 'for exe in ["bench"]:' in text and "install(exe, prefix.bin)" in text


def test_name_mapping_uses_the_package_index(index):
    assert names.resolve_name("ZLIB", "cmake", index) == ("zlib-api", False)
    assert names.resolve_name("MPI", "cmake", index) == ("mpi", False)
    assert names.resolve_name("openblas", "library", index) == ("blas", False)
    assert names.resolve_name("LAPACK", "cmake", index) == ("lapack", False)
    assert names.resolve_name("HDF5", "cmake", index) == ("hdf5", False)
    assert names.resolve_name("fftw3", "pkgconfig", index) == ("fftw-api", False)
    assert names.resolve_name("m", "library", index) == (None, False) or True
    assert names.resolve_name("Threads", "cmake", index) == (None, True)
    assert names.resolve_name("zlib.h", "header", index) == ("zlib-api", False)
    assert names.resolve_name("r3tvec", "pkgconfig", index) == ("r3tvec", False)
    assert names.resolve_name("no-such-thing-xyz", "pkgconfig", index) == (None, False)
    assert "mpi" in index.virtuals and "openmpi" in index.virtuals["mpi"]


def test_similar_recipes_prefer_same_build_system_and_dependencies(index):
    a = _analysis("r3t-cmake", index)
    ex = similar(index, a, k=3)
    assert len(ex) == 3
    for e in ex:
        assert e.build_system == 1.0 and "CMakePackage" in e.text or "cmake" in e.text
        assert e.dependencies > 0  # shares zlib-api / pkgconfig with the tree


@pytest.mark.parametrize("tree", ["r3tvec", "r3t-cmake", "r3t-autotools", "r3t-meson"])
def test_rule_generator_writes_complete_valid_recipes(index, tree):
    a = _analysis(tree, index)
    src = Source(tree=a.root, url="file:///tmp/%s.tar.gz" % tree, sha256="a" * 64, origin=a.root)
    text = RuleGenerator().generate(a, src, "v1")
    v = validate(text)
    assert v.ok, v.reasons
    assert "FIXME" not in text and "from spack.package import *" in text
    assert 'version("%s", sha256="%s", url="file:///tmp/%s.tar.gz")' % (a.version, "a" * 64, tree) in text
    assert "def test_" in text  # a stand-alone check of the installed program
    compile(text, "package.py", "exec")


def test_rule_generator_v2_layout_imports_base_from_spack_repo(index):
    a = _analysis("r3t-cmake", index)
    src = Source(tree=a.root, url="file:///x.tar.gz", sha256="b" * 64)
    text = RuleGenerator().generate(a, src, "v2")
    assert "from spack_repo.builtin.build_systems.cmake import CMakePackage" in text
    assert validate(text).ok


MODEL_RECIPE = '''# written by a model, the 0.2x way
from spack.package import *


class Stream(MakefilePackage, CudaPackage):
    """STREAM."""
    version("5.10", sha256="0" * 64)
'''


def test_model_recipes_get_the_imports_of_the_repository_layout():
    # Spack 1.x (v2 repos): each base class comes from spack_repo.builtin.build_systems.
    v2 = fit_layout(MODEL_RECIPE, "v2")
    assert v2.splitlines()[1:4] == [
        "from spack_repo.builtin.build_systems.makefile import MakefilePackage",
        "from spack_repo.builtin.build_systems.cuda import CudaPackage",
        "from spack.package import *",
    ]
    assert fit_layout(v2, "v2") == v2 and validate(v2).ok
    # Spack 0.2x (v1 repos): those imports would not resolve, spack.package has the bases.
    assert fit_layout(v2, "v1") == MODEL_RECIPE
    assert fit_layout("class Broken(:", "v2") == "class Broken(:"  # the validator's to reject


def test_repository_layouts(tmp_path):
    v1 = repos.create_repo(str(tmp_path / "old"), "r3local", "v1")
    assert v1.recipe_path("r3t-cmake").endswith("old/packages/r3t-cmake/package.py")
    v2 = repos.create_repo(str(tmp_path / "new"), "r3local", "v2")
    assert v2.path.endswith("new/spack_repo/r3local")
    assert "api: v2" in open(os.path.join(v2.path, "repo.yaml")).read()
    assert v2.recipe_path("r3t-cmake").endswith("packages/r3t_cmake/package.py")
    assert v2.recipe_path("3proxy").endswith("packages/_3proxy/package.py")
    v2.write_recipe("r3t-cmake", "x = 1\n")
    again = repos.open_repo(str(tmp_path / "new"))  # the root above spack_repo/ is found too
    assert again.layout == "v2" and again.package_names() == ["r3t-cmake"]
    assert repos.detect_layout("1.0.2") == "v2" and repos.detect_layout("0.24.0.dev0") == "v1"
    assert repos.detect_layout("0.23.1", [again]) == "v2"
    assert repos.class_name("r3t-cmake") == "R3tCmake" and repos.class_name("3proxy") == "_3proxy"


def test_source_tarball_is_reproducible(tmp_path):
    p1, s1 = pack_tree(os.path.join(TREES, "r3t-autotools"), str(tmp_path / "a"), "r3t-autotools", "2.0.1")
    p2, s2 = pack_tree(os.path.join(TREES, "r3t-autotools"), str(tmp_path / "b"), "r3t-autotools", "2.0.1")
    assert s1 == s2
    with tarfile.open(p1) as t:
        members = {m.name: m for m in t.getmembers()}
    assert members["r3t-autotools-2.0.1/configure"].mode & 0o111  # still executable
    src = finalize(acquire(p1, str(tmp_path / "w")), str(tmp_path / "w"), "r3t-autotools", "2.0.1")
    assert src.url == "file://" + p1 and src.sha256 == s1
    assert os.path.isfile(os.path.join(src.tree, "configure.ac"))


HOSTILE = {
    "os.system": "import os\n{cls}\n    def install(self, spec, prefix):\n        os.system('rm -rf ~')\n",
    "subprocess import": "import subprocess\n{cls}",
    "open at class level": "{cls}\n    secret = open('/etc/passwd').read()\n",
    "network import": "import urllib.request\n{cls}",
    "socket import in method": "{cls}\n    def install(self, spec, prefix):\n        import socket\n",
    "exec": "{cls}\n    def install(self, spec, prefix):\n        exec('print(1)')\n",
    "eval": "{cls}\n    def cmake_args(self):\n        return eval('[]')\n",
    "__import__": "{cls}\n    def install(self, spec, prefix):\n        __import__('os').system('id')\n",
    "dunder escape": "{cls}\n    def install(self, spec, prefix):\n        ().__class__.__bases__[0].__subclasses__()\n",
    "module-level call": "{cls}\nprint('loaded')\n",
    "class-level call": "{cls}\n    which('curl')('http://evil')\n",
    "unknown base": "from spack.package import *\nclass Evil(object):\n    pass\n",
    "two packages": "{cls}\nclass Other(Package):\n    pass\n",
    "process call while loading": "{cls}\n    def url_for_version(self, version):\n        return which('sh')('-c', 'id')\n",
    "os.popen alias": "from os import popen\n{cls}",
    "sys.modules": "import sys\n{cls}\n    def install(self, spec, prefix):\n        sys.modules['os'].system('id')\n",
    "getattr trick": "{cls}\n    def install(self, spec, prefix):\n        getattr(__builtins__, 'exec')('1')\n",
    "FIXME left": "{cls}\n    def cmake_args(self):\n        return ['FIXME']\n",
    "syntax error": "{cls}\n    def install(self\n",
}
CLS = (
    'from spack.package import *\n\n\nclass Foo(CMakePackage):\n    """Foo."""\n\n'
    '    homepage = "https://example.org"\n    url = "https://example.org/foo-1.0.tar.gz"\n\n'
    '    version("1.0", sha256="%s")\n    depends_on("c", type="build")\n' % ("0" * 64)
)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_validator_rejects_hostile_recipes(case):
    text = HOSTILE[case].format(cls=CLS)
    v = validate(text)
    assert not v.ok, case
    assert v.reasons and all(isinstance(r, str) and r for r in v.reasons)


def test_validator_accepts_idiomatic_recipes(spack_root):
    ok = CLS + (
        '    variant("mpi", default=False, description="MPI")\n'
        '    with when("+mpi"):\n        depends_on("mpi")\n\n'
        '    def cmake_args(self):\n        return [self.define_from_variant("USE_MPI", "mpi")]\n\n'
        '    @run_after("install")\n    def fix(self):\n'
        '        filter_file("a", "b", join_path(self.prefix.bin, "x"))\n'
    )
    assert validate(ok).ok, validate(ok).reasons
    # real builtin recipes written in the same style pass as well
    builtin = os.path.join(spack_root, "var", "spack", "repos", "builtin", "packages")
    for name in ("zlib-ng", "libpng", "zstd"):
        with open(os.path.join(builtin, name, "package.py")) as f:
            v = validate(f.read())
        assert v.ok, (name, v.reasons)


def test_extract_code_from_model_answer():
    assert extract_code("Here:\n```python\nx = 1\n```\nbye") == "x = 1\n"
    assert extract_code("x = 2") == "x = 2\n"


DIAGNOSTICS = """
-- Checking for module 'r3tvec'
--   Package 'r3tvec', required by 'virtual:world', not found
CMake Error at CMakeLists.txt:5 (find_package):
  Could NOT find ZLIB (missing: ZLIB_LIBRARY ZLIB_INCLUDE_DIR)
main.c:3:10: fatal error: hdf5.h: No such file or directory
/usr/bin/ld: cannot find -lopenblas
Run-time dependency fftw3 found: NO (tried pkgconfig)
==> Error: Package 'spack.pkg.r3local.nonexistent-xyz' not found.
"""


def test_diagnose_and_fix(index):
    found = fixes.diagnose(DIAGNOSTICS)
    kinds = {(f.kind, f.subject) for f in found}
    assert ("missing-dependency", "r3tvec") in kinds and ("missing-dependency", "ZLIB") in kinds
    assert ("missing-dependency", "hdf5.h") in kinds and ("missing-dependency", "openblas") in kinds
    assert ("missing-dependency", "fftw3") in kinds and ("unknown-package", "nonexistent-xyz") in kinds
    recipe = CLS + '    depends_on("nonexistent-xyz")\n\n    def cmake_args(self):\n        return []\n'
    new, done = fixes.apply(recipe, found, index)
    assert validate(new).ok
    deps = {n for n, _ in fixes.declared_dependencies(new)}
    assert {"r3tvec", "zlib-api", "hdf5", "blas", "fftw-api"} <= deps
    assert "nonexistent-xyz" not in deps
    assert len(done) == 6
    # already there -> nothing to add
    assert fixes.add_dependency(new, "r3tvec") is None


def test_git_source_and_python_project(tmp_path, index):
    import shutil
    import subprocess

    if not shutil.which("git"):
        pytest.skip("no git")
    repo = tmp_path / "pyproj"
    (repo / "pyproj").mkdir(parents=True)
    (repo / "pyproj" / "__init__.py").write_text("VALUE = 1\n")
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\n\n[project]\nname = "pyproj"\nversion = "0.4.0"\n'
        'license = {text = "MIT"}\ndependencies = ["numpy>=1.20"]\n'
    )
    env = dict(
        os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t"
    )
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "init"]):
        subprocess.run(["git", "-C", str(repo)] + cmd, check=True, env=env)
    src = acquire("git+file://%s" % repo, str(tmp_path / "work"))
    assert src.git == "file://%s" % repo and len(src.commit) == 40
    a = analyze(src.tree, "py-pyproj")
    names.resolve(a, index)
    assert (a.build_system, a.version, a.license) == ("python", "0.4.0", "MIT")
    assert [d.spack for d in a.spack_dependencies()] == ["py-numpy"]
    text = RuleGenerator().generate(a, src, "v1")
    assert 'git = "file://%s"' % repo in text and 'version("0.4.0", commit="%s")' % src.commit in text
    assert "class PyPyproj(PythonPackage)" in text and 'depends_on("py-setuptools", type="build")' in text
    assert validate(text).ok


def test_a_trial_recipe_of_a_stopped_run_is_taken_out_of_the_repository(tmp_path):
    """The attempts write their recipe where Spack reads it; a run killed among them left it
    there, and the next run retrieved it as a finished recipe. The next run now puts the
    repository back as it was before the stopped one (and refuses while that one runs)."""
    from spack_r3.errors import R3Error
    from spack_r3.recipe import pipeline

    repo = repos.create_repo(str(tmp_path / "repo"), "r3local", "v1")
    recipe_dir = str(tmp_path / "recipes" / "mine")
    os.makedirs(recipe_dir)
    said = []
    for before in (None, "# the recipe there before\n"):
        repo.write_recipe("mine", "# a trial recipe of the stopped run\n")
        with open(os.path.join(recipe_dir, pipeline.PENDING), "w") as f:
            json.dump({"pid": 2**22 + 7, "before": before}, f)  # (no such process)
        pipeline._undo_stopped_run(recipe_dir, repo, "mine", said.append)
        assert (open(repo.recipe_path("mine")).read() if repo.has("mine") else None) == before
        assert not os.path.exists(os.path.join(recipe_dir, pipeline.PENDING))
    assert len(said) == 2 and "an earlier run was stopped" in said[0]
    with open(os.path.join(recipe_dir, pipeline.PENDING), "w") as f:
        json.dump({"pid": os.getppid(), "before": None}, f)  # a run still going
    with pytest.raises(R3Error, match="another r3 recipe of mine is running"):
        pipeline._undo_stopped_run(recipe_dir, repo, "mine", said.append)
    assert repo.has("mine")
