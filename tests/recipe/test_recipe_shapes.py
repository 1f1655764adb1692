"""The shapes of real source trees the recipe stage meets (issue 48), without Spack processes:
builds in subdirectories, versions that are macros, optional dependencies behind options,
language and feature variants, stand-alone tests, installs that put programs in bin/, the
diagnostics the refine loop turns into changes, and retrieval by what a tree uses. The trees
are our own (tests/trees/r3t-subdirs, or written here); tests/recipe/test_recipe_spack.py installs
r3t-subdirs with a real Spack."""

import json
import os

import pytest

from spack_r3.recipe import fixes, names, testfixes
from spack_r3.recipe.analyze import analyze
from spack_r3.recipe.generate import RuleGenerator
from spack_r3.recipe.retrieve import similar
from spack_r3.recipe.source import Source
from spack_r3.recipe.validate import validate
from spack_r3.spack import repos
from conftest import TREES


@pytest.fixture(scope="module")
def index(spack_root):
    builtin = repos.open_repo(os.path.join(spack_root, "var", "spack", "repos", "builtin"))
    return repos.PackageIndex([builtin])


def _recipe(a):
    src = Source(tree=a.root, url="file:///tmp/%s-1.0.tar.gz" % a.name, sha256="a" * 64, origin=a.root)
    text = RuleGenerator().generate(a, src)
    assert validate(text).ok, validate(text).reasons
    return text


def _write(root, files):
    for rel, text in files.items():
        path = os.path.join(str(root), rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return str(root)


def test_builds_in_subdirectories_are_a_variant(index):
    a = analyze(os.path.join(TREES, "r3t-subdirs"), "r3t-subdirs")
    names.resolve(a, index)
    # no build at the top: one per programming model; the CPU one is the default
    assert a.build_system == "makefile" and a.build["build_directory"] == "serial"
    assert a.build["subdirs"] == ["cuda", "serial"]
    # the Makefile's yes/no switches are variants, as the project defaults them (DEBUG is not one)
    assert [(v.name, v.default, v.kind) for v in a.variants] == [("openmp", True, "make"), ("mpi", False, "make")]
    # the MPI compiler wrapper under ifeq ($(MPI),yes) is a dependency behind +mpi only
    assert {(d.spack, d.when) for d in a.spack_dependencies()} == {("mpi", "+mpi")}
    assert a.build["compiler_vars"] == {"LINKER": "cc"}  # a compiler named by path
    assert a.executables == ["stencil"] and a.build["cli_flag"] == "-h"
    text = _recipe(a)
    # the other directory is named for a programming model: the variant named for it chooses it,
    # as Spack's recipes choose XSBench's cuda/ with +cuda
    assert 'variant("cuda", default=False' in text and 'depends_on("cuda", when="+cuda")' in text
    assert 'if self.spec.satisfies("+cuda"):\n            return "cuda"\n        return "serial"' in text
    assert '"LINKER={0}".format(spack_cc)' in text and '"MPI={0}".format("yes" if self.spec.satisfies("+mpi")' in text
    assert 'depends_on("c", type="build")' in text and 'depends_on("mpi", when="+mpi")' in text
    # installed where a user looks for it, from the build directory; a stand-alone test runs it
    assert "with working_dir(self.build_directory):" in text and "install(exe, prefix.bin)" in text
    assert "prefix.share" not in text
    assert "def test_stencil_h(self):" in text and "fail_on_error=False" in text


def test_versions_that_are_macros_resolve_or_fall_back(tmp_path):
    cm = _write(
        tmp_path / "cm",
        {
            "CMakeLists.txt": 'set(LIBQ_V "${LIBQ_VERSION_MAJOR}.${LIBQ_VERSION_MINOR}.${LIBQ_VERSION_PATCH}")\n'
            "project(libq VERSION ${LIBQ_V} LANGUAGES C)\nadd_library(q q.c)\n",
            "include/libq/version.h": "#define LIBQ_VERSION_MAJOR 1\n#define LIBQ_VERSION_MINOR 4\n"
            "#define LIBQ_VERSION_PATCH 2\n",
            "q.c": "int q(void) { return 0; }\n",
        },
    )
    assert analyze(cm, "libq").version == "1.4.2"
    at = _write(
        tmp_path / "at",
        {
            "configure.ac": "AC_INIT([libr], m4_normalize(m4_include([VERSION])), [x@example.org])\nAC_PROG_CC\n",
            "VERSION": "3.1.0\n",
            "configure": "#!/bin/sh\n",
            "r.c": "int r;\n",
        },
    )
    assert analyze(at, "libr").version == "3.1.0"
    bad = _write(tmp_path / "bad", {"CMakeLists.txt": "project(s VERSION ${NOWHERE})\n", "s.c": "int s;\n"})
    a = analyze(bad, "s")
    assert a.version == "1.0.0" and any("${NOWHERE}" in n for n in a.notes)  # never the raw macro


def test_optional_dependencies_stay_behind_variants(tmp_path, index):
    root = _write(
        tmp_path / "opt",
        {
            "CMakeLists.txt": "project(optlib VERSION 2.0 LANGUAGES C)\n"
            'option(OPTLIB_PYTHON "python bindings" ON)\noption(OPTLIB_BENCH "benchmarks" ON)\n'
            "find_package(Doxygen)\nfind_package(OpenMP)\nfind_package(ZLIB REQUIRED)\n"
            "add_library(optlib optlib.c)\n"
            "if(OPTLIB_PYTHON)\n  add_subdirectory(python)\nendif()\n"
            "if(OPTLIB_BENCH)\n  add_subdirectory(extern/gbench)\nendif()\n",
            "python/CMakeLists.txt": "find_package(Python3 REQUIRED)\n",
            "optlib.c": "int optlib(void) { return 0; }\n",
            "include/optlib.h": "int optlib(void);\n",
        },
    )
    os.makedirs(os.path.join(root, "extern", "gbench"))  # an empty submodule directory
    a = analyze(root, "optlib")
    names.resolve(a, index)
    deps = {(d.spack, d.when) for d in a.spack_dependencies()}
    # a subproject's dependency is behind the option that adds it; an optional find_package()
    # is a variant (documentation tools off); a required one stays unconditional
    assert ("python", "+python") in deps and ("doxygen", "+docs") in deps and ("zlib-api", None) in deps
    v = {x.name: (x.default, x.kind) for x in a.variants}
    assert v["openmp"] == (True, "cmake-find") and v["docs"][0] is False
    assert v["bench"][0] is False and any("extern/gbench is missing" in n for n in a.notes)
    text = _recipe(a)
    assert 'self.define("CMAKE_DISABLE_FIND_PACKAGE_Doxygen", self.spec.satisfies("~docs"))' in text
    # a library gets a stand-alone test that compiles and links against it
    assert "def test_link(self):" in text and 'for name in ["optlib.h"]' in text


def test_a_makefile_switch_guards_its_libraries(tmp_path):
    root = _write(
        tmp_path / "mk",
        {
            "Makefile": "AML = no\nprogram = sim\n$(program): sim.c\n\t$(CC) sim.c -o $@ $(LDFLAGS)\n"
            "ifeq ($(AML),yes)\n  LDFLAGS += -laml\nelse\n  LDFLAGS += -lm\nendif\n",
            "sim.c": "int main(int c, char **v) { return c > 1 && v[1][0] == '-' ? 0 : 1; } /* \"--version\" */\n",
        },
    )
    a = analyze(root, "sim")
    assert [(d.name, d.when) for d in a.dependencies] == [("aml", "+aml"), ("m", "~aml")]
    assert a.executables == ["sim"] and a.build["cli_flag"] == "--version"


def test_diagnostics_become_changes(tmp_path):
    a = analyze(os.path.join(TREES, "r3t-subdirs"), "r3t-subdirs")
    text = _recipe(a)
    log = (
        'stencil.h:4:3: error: #error "You should specify R3T_MPI=0 or R3T_MPI=1 on the compile line"\n'
        "make: /opt/vendor/bin/gcc: No such file or directory\n"
        "make: *** No rule to make target 'allmost'.  Stop.\n"
    )
    found = {(f.kind, f.subject) for f in fixes.diagnose(log)}
    assert {
        ("required-macro", "R3T_MPI"),
        ("missing-compiler", "/opt/vendor/bin/gcc"),
        ("unknown-target", "allmost"),
    } <= found
    new, done = fixes.apply(text, fixes.diagnose(log.splitlines()[0]), None, a)
    assert 'variant("r3t_mpi", default=False' in new and "def flag_handler(self, name, flags):" in new
    assert '"-DR3T_MPI={0}".format(1 if self.spec.satisfies("+r3t_mpi") else 0)' in new and validate(new).ok
    assert done and "R3T_MPI" in done[0]
    # a compiler named by path: the variable that names it gets Spack's compiler
    plain = text.replace('"LINKER={0}".format(spack_cc), ', "")
    new, done = fixes.apply(plain, fixes.diagnose(log.splitlines()[1]), None, a)
    assert '"LINKER={0}".format(spack_cc)' in new and validate(new).ok
    # a goal the recipe asked for that the Makefile lacks is dropped
    asked = text.replace('return ["CC={0}"', 'return ["allmost", "CC={0}"')
    new, _ = fixes.apply(asked, fixes.diagnose(log.splitlines()[2]), None, a)
    assert '"allmost"' not in new and validate(new).ok


def test_a_missing_submodule_and_an_unfetchable_dependency_turn_variants_off(tmp_path, index):
    root = _write(
        tmp_path / "sub",
        {
            "CMakeLists.txt": 'project(subx VERSION 1.0 LANGUAGES C)\noption(SUBX_BENCH "benchmarks" ON)\n'
            'option(SUBX_MPI "MPI" ON)\nif(SUBX_MPI)\n  find_package(MPI REQUIRED)\nendif()\n'
            "if(SUBX_BENCH)\n  add_subdirectory(thirdparty/gbench)\nendif()\nadd_executable(subx s.c)\n",
            "s.c": "int main(void) { return 0; }\n",
        },
    )
    a = analyze(root, "subx")
    names.resolve(a, index)
    a.variants[0].default = True  # as a recipe written before the submodule went missing
    text = _recipe(a)
    diag = (
        "CMake Error at CMakeLists.txt:7 (add_subdirectory):\n  add_subdirectory given source\n"
        '  "thirdparty/gbench" which is not an existing directory.\n'
    )
    new, done = fixes.apply(text, fixes.diagnose(diag), None, a)
    assert 'variant("bench", default=False' in new and done
    # offline, MPI's implementation cannot be fetched: the variant that wants it goes off
    spec = {
        "spec": {
            "nodes": [
                {
                    "name": "subx",
                    "hash": "r",
                    "dependencies": [
                        {
                            "name": "openmpi",
                            "hash": "o",
                            "parameters": {"deptypes": ["build", "link"], "virtuals": ["mpi"]},
                        }
                    ],
                },
                {"name": "openmpi", "hash": "o", "dependencies": [{"name": "hwloc", "hash": "h", "parameters": {}}]},
                {"name": "hwloc", "hash": "h"},
            ]
        }
    }
    specfile = tmp_path / "spec.json"
    specfile.write_text(json.dumps(spec))
    out = "==> Error: FetchError: All fetchers failed for spack-stage-hwloc-2.11.1-abcdefghijklmnopqrstuvwxyz012345\n"
    assert [f.kind for f in fixes.diagnose(out)] == ["unfetchable"]
    new, done = fixes.apply(new, fixes.diagnose(out), None, a, spec_file=str(specfile))
    assert 'variant("mpi", default=False' in new and "hwloc" in done[0]


def test_retrieval_ranks_by_what_the_tree_uses(index):
    a = analyze(os.path.join(TREES, "r3t-subdirs"), "r3t-subdirs")
    names.resolve(a, index)
    ex = similar(index, a, 3)
    # a C proxy app with MPI and OpenMP: the examples are recipes of that kind, which say so
    assert all("mpi" in index.recipes[e.name].dependencies for e in ex), [e.name for e in ex]
    assert all("proxy-app" in e.text for e in ex)
    left_out = similar(index, a, 3, exclude={ex[0].name})
    assert ex[0].name not in [e.name for e in left_out]
    text = RuleGenerator().generate(
        a, Source(tree=a.root, url="file:///x.tar.gz", sha256="a" * 64, origin=a.root), examples=ex
    )
    assert 'tags = ["proxy-app"]' in text and validate(text).ok


def test_an_on_off_switch_and_a_makefile_template(tmp_path, index):
    """The shape of a proxy app whose build directories hold only a Makefile template, where
    CC is MPI's wrapper for every build and an ON/OFF switch says whether MPI is used."""
    root = _write(
        tmp_path / "md",
        {
            "src-omp/Makefile.vanilla": "DO_MPI = ON\nCC = mpicc\nCFLAGS = -O2\nifeq ($(DO_MPI), ON)\n"
            "CFLAGS += -DDO_MPI\nFLAVOR = mpi\nelse\nFLAVOR = omp\nendif\n"
            "EXE = ../bin/md-$(FLAVOR)\n$(EXE): md.c\n\t$(CC) $(CFLAGS) md.c -o $(EXE)\n",
            "src-omp/md.c": "int main(void) { return 0; }\n",
        },
    )
    a = analyze(root, "md")
    names.resolve(a, index)
    assert a.build["build_directory"] == "src-omp" and a.build["makefile_template"] == "Makefile.vanilla"
    assert [(v.name, v.default) for v in a.variants] == [("mpi", True)]
    assert {(d.spack, d.when) for d in a.spack_dependencies()} == {("mpi", "+mpi")}
    text = _recipe(a)
    assert 'copy("Makefile.vanilla", "Makefile")' in text
    assert '"CC={0}".format(self.spec["mpi"].mpicc if self.spec.satisfies("+mpi") else spack_cc)' in text
    assert '"DO_MPI={0}".format("ON" if self.spec.satisfies("+mpi") else "OFF")' in text
    # a program named in ways not read here: the recipe installs what the build made (ELF
    # executables, not scripts) and its test runs each installed program
    assert 'if f.read(4) == b"\\x7fELF":' in text and "def test_programs_run(self):" in text


def test_meson_option_blocks_guard_their_dependencies(tmp_path, index):
    root = _write(
        tmp_path / "ms",
        {
            "meson.build": "project('msx', 'c', version: '2.1')\nlib = library('msx', 'msx.c')\n"
            "if get_option('test')\n  check_dep = dependency('check')\nendif\n"
            "if host_machine.system() == 'windows'\n  ws = cc.find_library('ws2_32')\nendif\n"
            "if not get_option('docs')\nelse\n  doxygen = find_program('doxygen')\nendif\n",
            "meson_options.txt": "option('test', type: 'boolean', value: false)\n"
            "option('docs', type: 'boolean', value: true)\n",
            "msx.c": "int msx(void) { return 0; }\n",
            "include/msx.h": "int msx(void);\n",
        },
    )
    a = analyze(root, "msx")
    names.resolve(a, index)
    # the test option builds the project's tests: Spack's run_tests, not a variant, and what
    # only the tests need (check, and pkg-config to find it) is no dependency
    assert a.spack_dependencies() == []
    assert [d.system for d in a.dependencies if d.name == "ws2_32"] == [True]  # Windows only
    assert {v.name: v.default for v in a.variants} == {"docs": False}
    assert (a.build["test_library"], a.build["test_header"]) == ("msx", "msx.h")
    text = _recipe(a)
    assert '"-Dtest={0}".format("true" if self.run_tests else "false")' in text
    assert 'variant("test"' not in text


def test_a_default_goal_that_builds_fortran_is_replaced_by_the_c_goals(tmp_path):
    root = _write(
        tmp_path / "fz",
        {
            "Makefile": "all: lib bin fortran\nlib:\n\t$(MAKE) -C src\nbin: lib\n\t$(MAKE) -C utils\n"
            "fortran: lib\n\t$(MAKE) -C fortran\n",
            "src/z.c": "int z(void) { return 0; }\n",
            "fortran/z.f90": "module z\nend module z\n",
        },
    )
    a = analyze(root, "fz")
    text = _recipe(a)
    new, done = fixes.apply(text, fixes.diagnose("make[1]: gfortran: Command not found\n"), None, a)
    assert '"lib", "bin", "CC={0}"' in new and validate(new).ok and "lib, bin only" in done[0]


def test_an_install_counts_only_with_something_where_users_look(tmp_path):
    from spack_r3.recipe.refine import installed_nothing

    prefix = tmp_path / "prefix"
    (prefix / ".spack").mkdir(parents=True)
    (prefix / "share" / "thing" / "obj").mkdir(parents=True)
    (prefix / "share" / "thing" / "obj" / "main.o").write_text("")
    assert installed_nothing(str(prefix)) == "only share"
    (prefix / "lib64").mkdir()
    (prefix / "lib64" / "libthing.a").write_text("")
    assert installed_nothing(str(prefix)) is None
    # the refine loop reads what it wrote and reinstalls the programs from the build directory
    a = analyze(os.path.join(TREES, "r3t-subdirs"), "r3t-subdirs")
    diag = "spack install succeeded, but the prefix /p has nothing in bin/, lib/ or include/ (only share): ..."
    found = fixes.diagnose(diag)
    assert [f.kind for f in found] == ["empty-install"]
    text = _recipe(a).replace("install(exe, prefix.bin)", "install_tree('.', prefix.share)")
    new, done = fixes.apply(text, found, None, a)
    assert "with working_dir(self.build_directory):" in new and "install('stencil', prefix.bin)" in new
    assert validate(new).ok


def test_an_enable_switch_guards_the_library_it_checks_for(tmp_path, index):
    root = _write(
        tmp_path / "ac",
        {
            "configure.ac": "AC_INIT([acx], [1.2.0])\nAC_PROG_CC\n"
            "AC_ARG_ENABLE([prof-libunwind], [AS_HELP_STRING([--enable-prof-libunwind], [use libunwind])])\n"
            'if test "x$enable_prof_libunwind" = "xyes" ; then\n'
            "  AC_CHECK_LIB([unwind], [unw_backtrace], [], [AC_MSG_ERROR([no libunwind])])\nfi\n"
            'AS_IF([test "x$with_zlib" != xno], [AC_CHECK_LIB([z], [inflate])])\n'
            "AC_ARG_WITH([zlib], [AS_HELP_STRING([--without-zlib], [no compression])])\n"
            "AC_CHECK_LIB([m], [cos])\nAC_OUTPUT\n",
            "configure": "#!/bin/sh\n",
            "acx.c": "int acx;\n",
        },
    )
    a = analyze(root, "acx")
    names.resolve(a, index)
    assert {v.name: v.default for v in a.variants} == {"prof_libunwind": False, "zlib": True}
    assert {(d.spack, d.when) for d in a.spack_dependencies()} == {
        ("libunwind", "+prof_libunwind"),
        ("zlib-api", "+zlib"),
    }
    text = _recipe(a)
    assert 'depends_on("libunwind", when="+prof_libunwind")' in text and '"--enable-prof-libunwind"' in text


def test_programs_behind_an_option_are_not_tested(tmp_path):
    root = _write(
        tmp_path / "ex",
        {
            "CMakeLists.txt": 'project(exl VERSION 1.0 LANGUAGES C)\noption(EXL_EXAMPLES "examples" OFF)\n'
            "add_library(exl exl.c)\nif(EXL_EXAMPLES)\n  add_executable(exdemo demo.c)\nendif()\n"
            "add_executable(exltool tool.c)\n",
            "exl.c": "int exl(void) { return 0; }\n",
            "exl.h": "int exl(void);\n",
            "tool.c": "int main(void) { return 0; }\n",
            "demo.c": "int main(void) { return 0; }\n",
        },
    )
    a = analyze(root, "exl")
    assert a.executables == ["exltool"]
    text = _recipe(a)
    assert "def test_exltool_h(self):" in text and "exdemo" not in text and "def test_link(self):" in text


def test_meson_programs_count_where_meson_installs_them(tmp_path):
    root = _write(
        tmp_path / "mi",
        {
            "meson.build": "project('mil', 'c', version: '1.1')\nlib = library('mil', 'mil.c', install: true)\n"
            "executable('example', 'example.c')\nexecutable('miltool', 'tool.c', install: true)\n",
            "mil.c": "int mil(void) { return 0; }\n",
            "include/mil/api.h": "int mil(void);\n",
            "example.c": "int main(void) { return 0; }\n",
            "tool.c": "int main(void) { return 0; }\n",
        },
    )
    a = analyze(root, "mil")
    assert a.executables == ["miltool"] and a.build["test_headers"] == ["api.h"]  # by its include/ place


def test_a_project_finding_itself_is_no_dependency(tmp_path, index):
    root = _write(
        tmp_path / "self",
        {
            "CMakeLists.txt": 'project(test-drive VERSION 0.6 LANGUAGES C)\noption(TESTING "tests" ON)\n'
            "add_library(${PROJECT_NAME} td.c)\nif(TESTING)\n  add_subdirectory(test)\nendif()\n",
            "test/CMakeLists.txt": "find_package(${PROJECT_NAME} REQUIRED)\n",
            "config/template.cmake.in": "find_package(@PROJECT_NAME@)\n",
            "td.c": "int td(void) { return 0; }\n",
        },
    )
    a = analyze(root, "r3x-test-drive")  # a new name, as the benchmark gives it
    names.resolve(a, index)
    assert a.spack_dependencies() == [] and a.unresolved() == []


def test_a_library_whose_kind_build_shared_libs_decides_gets_a_shared_variant(tmp_path):
    root = _write(
        tmp_path / "sh",
        {
            "CMakeLists.txt": "project(shl VERSION 1.0 LANGUAGES C)\nadd_library(shl s.c)\n",
            "s.c": "int s(void) { return 0; }\n",
        },
    )
    a = analyze(root, "shl")
    assert [(v.name, v.default, v.option) for v in a.variants] == [("shared", True, "BUILD_SHARED_LIBS")]
    assert 'self.define_from_variant("BUILD_SHARED_LIBS", "shared")' in _recipe(a)


def test_a_makefiles_commented_mpi_and_openmp_settings_become_variants(tmp_path, index):
    """HPCCG's shape: the MPI and OpenMP settings are there, commented out, above empty ones."""
    root = _write(
        tmp_path / "cg",
        {
            "Makefile": "#CXX=/usr/local/bin/mpicxx\n#USE_MPI = -DUSING_MPI\n#MPI_INC = -I/opt/mpich/include\n"
            "CXX=/usr/local/bin/g++\nUSE_MPI =\n#USE_OMP = -DUSING_OMP\n#OMP_FLAGS = -fopenmp\nUSE_OMP =\n"
            "cg: main.cpp\n\t$(CXX) $(USE_MPI) $(USE_OMP) $(OMP_FLAGS) main.cpp -o cg\n",
            "main.cpp": "int main() { return 0; }\n",
        },
    )
    a = analyze(root, "cg")
    names.resolve(a, index)
    assert [(v.name, v.default) for v in a.variants] == [("mpi", False), ("openmp", False)]
    assert {(d.spack, d.when) for d in a.spack_dependencies()} == {("mpi", "+mpi")}
    text = _recipe(a)
    assert (
        '*(["CXX={0}".format(self.spec["mpi"].mpicxx), "USE_MPI=-DUSING_MPI"] if self.spec.satisfies("+mpi") else [])'
    ) in text
    assert '"OMP_FLAGS={0}".format(self.compiler.openmp_flag), "USE_OMP=-DUSING_OMP"' in text
    assert "/opt/mpich" not in text and text.count('"CXX={0}".format(spack_cxx)') == 1


def test_an_optional_dependency_that_cannot_be_fetched_goes_behind_a_variant(tmp_path, index):
    root = _write(
        tmp_path / "od",
        {
            "meson.build": "project('odx', 'c', version: '1.0')\nz = dependency('zstd', required: false)\n"
            "executable('odx', 'odx.c', dependencies: z, install: true)\n",
            "odx.c": "int main(void) { return 0; }\n",
        },
    )
    a = analyze(root, "odx")
    names.resolve(a, index)
    text = _recipe(a)
    assert 'depends_on("zstd")' in text
    spec = {
        "spec": {
            "nodes": [
                {"name": "odx", "hash": "r", "dependencies": [{"name": "zstd", "hash": "z"}]},
                {"name": "zstd", "hash": "z"},
            ]
        }
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    out = "FetchError: All fetchers failed for spack-stage-zstd-1.5.6-hr7drepetnkbkl5aichww7vcek576a2b https://x\n"
    new, done = fixes.apply(text, fixes.diagnose(out), None, a, spec_file=str(tmp_path / "spec.json"))
    assert 'depends_on("zstd", when="+zstd")' in new and 'variant("zstd", default=False' in new
    assert validate(new).ok and "zstd" in done[0]


def test_words_after_pkg_config_in_a_message_are_no_dependency(tmp_path):
    root = _write(
        tmp_path / "pc",
        {
            "Makefile": "LIBS = $(shell pkg-config --libs zlib)\n"
            "x:\n\t$(CC) x.c -o x $(LIBS)\n\t$(error cannot write the pkg-config file)\n",
            "x.c": "int main(void) { return 0; }\n",
        },
    )
    assert [d.name for d in analyze(root, "pcx").dependencies] == ["zlib"]


def test_a_program_is_tested_by_the_name_it_is_installed_under(tmp_path):
    root = _write(
        tmp_path / "on",
        {
            "CMakeLists.txt": "project(onl VERSION 1.0 LANGUAGES C)\nadd_executable(onlcmd main.c)\n"
            "set_property(TARGET onlcmd PROPERTY OUTPUT_NAME onl)\ninstall(TARGETS onlcmd DESTINATION bin)\n",
            "main.c": 'int main(int c, char **v) { return 0; } /* "-h" */\n',
        },
    )
    a = analyze(root, "onl")
    assert a.executables == ["onl"] and 'join_path(self.prefix.bin, "onl")' in _recipe(a)


def test_a_library_named_in_a_loop_is_the_projects(tmp_path):
    root = _write(
        tmp_path / "lp",
        {
            "CMakeLists.txt": "project(lpx LANGUAGES C VERSION 4.2)\nforeach(T shared static)\n"
            '  set(N "${PROJECT_NAME}-${T}")\n  add_library(${N} ${T} src/lpx.c)\nendforeach()\n',
            "src/lpx.c": "int lpx(void) { return 0; }\n",
            "src/lpx.h": "int lpx(void);\n",
        },
    )
    a = analyze(root, "lpx")
    assert (a.build["test_library"], a.build["test_header"]) == ("lpx", "lpx.h")


def test_language_and_build_tool_dependencies_as_maintainers_write_them(tmp_path):
    cm = _write(
        tmp_path / "cm",
        {
            "CMakeLists.txt": "cmake_minimum_required(VERSION 3.18...3.28)\nproject(cml)\nadd_executable(cml m.c)\n",
            "m.c": "int main(void) { return 0; }\n",
        },
    )
    text = _recipe(analyze(cm, "cml"))
    assert 'depends_on("c", type="build")' in text and 'depends_on("cxx", type="build")' in text  # CMake's default
    assert 'depends_on("cmake@3.18:", type="build")' in text
    ms = _write(
        tmp_path / "ms",
        {
            "meson.build": "project('msl', 'c')\nif get_option('cpp')\n  add_languages('cpp')\nendif\n",
            "meson_options.txt": "option('cpp', type: 'boolean', value: true)\n",
        },
    )
    assert analyze(ms, "msl").languages == ["c", "cxx"]


def test_a_cmake_project_without_an_install_rule_installs_what_it_built(tmp_path):
    """LULESH's shape: add_executable and no install(): `make install` has no rule."""
    root = _write(
        tmp_path / "ni",
        {
            "CMakeLists.txt": "project(nix CXX)\nset(EXE nix2.0)\nadd_executable(${EXE} m.cc)\n",
            "m.cc": "int main() { return 0; }\n",
        },
    )
    a = analyze(root, "nix")
    assert a.build["has_install"] is False and a.executables == ["nix2.0"]
    text = _recipe(a)
    assert 'for name in ["nix2.0"]:' in text and "find(self.stage.path, name, recursive=True)" in text
    # a recipe that asked for `make install` anyway is repaired the same way
    asked = text[: text.index("    def install(")].rstrip() + "\n"
    diag = "make: *** No rule to make target 'install'.  Stop.\n"
    new, done = fixes.apply(asked, fixes.diagnose(diag), None, a)
    assert "for name in ['nix2.0']:" in new and validate(new).ok and done


def test_a_library_called_libx_builds_libx_and_includes_libx_h(tmp_path):
    root = _write(
        tmp_path / "lc",
        {
            "CMakeLists.txt": 'project(lcx C)\nset(libname "config")\nadd_library(${libname} lib/lc.c)\n'
            'set_target_properties(${libname} PROPERTIES OUTPUT_NAME "lcfg")\n',
            "lib/lc.c": "int lc(void) { return 0; }\n",
            "lib/liblcfg.h": "int lc(void);\n",
            "lib/config.h": "\n",
        },
    )
    a = analyze(root, "r3x-lcfg")
    assert (a.build["test_library"], a.build["test_headers"]) == ("lcfg", ["liblcfg.h"])


def test_a_with_option_that_is_a_setting_is_no_variant(tmp_path):
    # --with-ldflags (a compiler flag's name) and --with-dsoflags=... pass settings, not
    # features: maintainers pass them where they need them (Mini-XML); --with-x=prefix stays
    root = _write(
        tmp_path / "wv",
        {
            "configure.ac": "AC_INIT([wvx], [1.0])\nAC_PROG_CC\n"
            "AC_ARG_WITH([ldflags], [AS_HELP_STRING([--with-ldflags], [x])])\n"
            "AC_ARG_WITH([dsoflags], AS_HELP_STRING([--with-dsoflags=...], [DSO flags]))\n"
            "AC_ARG_WITH([zstd], AS_HELP_STRING([--with-zstd=prefix], [zstd's prefix]))\n",
            "configure": "#!/bin/sh\n",
            "w.c": "int w;\n",
        },
    )
    a = analyze(root, "wvx")
    assert [v.name for v in a.variants] == ["zstd"]
    text = _recipe(a)
    assert "ldflags" not in text and "dsoflags" not in text


def test_a_submodule_missing_from_makefile_am_subdirs_is_made_and_its_option_off(tmp_path):
    """jq's shape: SUBDIRS = vendor/onig (a git submodule the tarball lacks), no configure."""
    root = _write(
        tmp_path / "sm",
        {
            "configure.ac": "AC_INIT([smx], [1.0])\nAC_PROG_CC\n"
            "AC_ARG_WITH([onig], [AS_HELP_STRING([--with-onig=prefix], [onig prefix])], , [with_onig=yes])\n",
            "Makefile.am": "if BUILD_ONIG\nSUBDIRS = vendor/onig\nendif\nbin_PROGRAMS = smx\n",
            "vendor/onig/.keep": "",
            "smx.c": "int main(void) { return 0; }\n",
        },
    )
    os.remove(os.path.join(root, "vendor", "onig", ".keep"))  # the empty directory a submodule leaves
    a = analyze(root, "smx")
    assert a.build["missing_subdirs"] == ["vendor/onig"]
    assert [(v.name, v.default, v.kind) for v in a.variants] == [("onig", False, "with")]
    text = _recipe(a)
    # automake needs the directory; off passes --without-onig (configure would build the submodule)
    assert '@run_before("autoreconf")' in text and 'for d in ["vendor/onig"]:' in text
    assert '"--without-onig"' in text


def test_a_makefile_whose_default_goal_prints_help_builds_a_machine_target(tmp_path, index):
    """miniMD's shape: `help` first, `make openmpi` copies Makefile.openmpi (CC = mpicxx)."""
    root = _write(
        tmp_path / "hg",
        {
            "Makefile": "help:\n\t@echo 'make openmpi|intel'\n\nopenmpi:\n\t$(MAKE) -f Makefile.$@\n\n"
            "intel:\n\t$(MAKE) -f Makefile.$@\n",
            "Makefile.openmpi": "CC = mpicxx\nall:\n\t$(CC) -o md md.cpp\n",
            "Makefile.intel": "CC = mpiicpc\nall:\n\t$(CC) -o md md.cpp\n",
            "md.cpp": "#include <mpi.h>\nint main() { return 0; }\n",
        },
    )
    a = analyze(root, "hgx")
    names.resolve(a, index)
    assert a.build["goal"] == "openmpi" and a.build["mpi_wrapper"] == "always"
    assert [d.spack for d in a.spack_dependencies()] == ["mpi"]
    text = _recipe(a)
    assert '"openmpi"]' in text and 'self.spec["mpi"].mpicc' in text


def test_an_mpi_program_that_aborts_after_its_help_passes_its_test_with_255(tmp_path):
    root = _write(
        tmp_path / "ab",
        {
            "Makefile": "amr: amr.c\n\tmpicc -o amr amr.c\n",
            "amr.c": "#include <mpi.h>\n#include <string.h>\nint main(int c, char **v) {\n  MPI_Init(&c, &v);\n"
            '  if (c > 1 && !strcmp(v[1], "--help")) {\n    MPI_Abort(MPI_COMM_WORLD, -1);\n  }\n'
            "  MPI_Finalize();\n}\n",
        },
    )
    a = analyze(root, "abx")
    assert a.executables == ["amr"] and a.build["cli_status"] == 255
    assert "(0 <= exe.returncode < 126 or exe.returncode == 255)" in _recipe(a)


def test_a_fortran_library_is_tested_by_using_its_module(tmp_path):
    """test-drive's shape: a Fortran library with a module, a tester program not installed."""
    root = _write(
        tmp_path / "fm",
        {
            "CMakeLists.txt": "project(fmx LANGUAGES Fortran)\nadd_library(${PROJECT_NAME} src/fm.f90)\n"
            "add_executable(${PROJECT_NAME}-tester test/t.f90)\n"
            'install(TARGETS "${PROJECT_NAME}" EXPORT fmx-targets)\n',
            "src/fm.f90": "module fmx_mod\ncontains\nend module fmx_mod\n",
            "test/t.f90": "module helper\nend module helper\nprogram t\nuse fmx_mod\nend program t\n",
        },
    )
    a = analyze(root, "fmx")
    # install(TARGETS "${PROJECT_NAME}" ...) installs the library; the tester is not installed
    assert a.build["installed"] == ["fmx"] and a.executables == []
    assert (a.build["test_fortran_module"], a.build["test_library"]) == ("fmx_mod", "fmx")
    text = _recipe(a)
    assert 'depends_on("fortran", type="build")' in text
    assert 'find(self.prefix, "fmx_mod.mod", recursive=True)' in text and "Executable(self.compiler.fc)" in text


def test_the_install_step_takes_what_a_similar_recipe_installs_that_the_tree_has(tmp_path):
    """A proxy app without `make install`: a retrieved recipe (CoMD's shape) installs its input
    decks and README; this tree has both, not the built program the example names."""
    from spack_r3.recipe.retrieve import Example

    root = _write(
        tmp_path / "px",
        {
            "Makefile": "pxa: pxa.c\n\t$(CC) -o pxa pxa.c\n",
            "pxa.c": "int main(void) { return 0; }\n",
            "README.md": "pxa\n",
            "examples/in.deck": "steps 10\n",
        },
    )
    example = Example(
        "comdlike",
        "builtin",
        "/x/package.py",
        1.0,
        1.0,
        0.0,
        0.0,
        0.5,
        "class Comdlike(MakefilePackage):\n"
        "    def install(self, spec, prefix):\n"
        '        install_tree("bin", prefix.bin)\n'
        '        install_tree("examples", prefix.examples)\n'
        "        mkdirp(prefix.doc)\n"
        '        install("README.md", prefix.doc)\n'
        '        install("src/comd", prefix.bin)\n',
    )
    a = analyze(root, "pxa")
    src = Source(tree=root, url="file:///tmp/pxa-1.0.tar.gz", sha256="a" * 64, origin=root)
    text = RuleGenerator().generate(a, src, examples=[example])
    assert validate(text).ok
    assert 'install_tree(join_path(self.stage.source_path, "examples"), prefix.examples)' in text
    assert 'install(join_path(self.stage.source_path, "README.md"), prefix.doc)' in text
    assert '"bin"' not in text and "src/comd" not in text  # not in the tree (built, or another project's)


def test_a_test_option_builds_the_tests_when_spack_runs_them(tmp_path):
    """jansson's and utf8proc's shape: the tests behind an option are built when Spack runs them
    (``spack install --test=root`` runs ctest), not a variant; X_BUILD_SHARED_LIBS is 'shared'."""
    root = _write(
        tmp_path / "to",
        {
            "CMakeLists.txt": 'project(tox C)\noption(TOX_BUILD_SHARED_LIBS "shared" OFF)\n'
            'option(TOX_WITHOUT_TESTS "no tests" OFF)\noption(TOX_ENABLE_TESTING "tests" OFF)\n'
            "add_library(tox t.c)\ninstall(TARGETS tox)\n"
            "if(TOX_ENABLE_TESTING)\n  find_package(GTest REQUIRED)\nendif()\n",
            "t.c": "int t;\n",
        },
    )
    a = analyze(root, "tox")
    assert [v.name for v in a.variants] == ["shared"]
    assert a.dependencies == []  # what only the tests need is no dependency of the package
    text = _recipe(a)
    assert 'self.define("TOX_WITHOUT_TESTS", not self.run_tests)' in text
    assert 'self.define("TOX_ENABLE_TESTING", self.run_tests)' in text


def test_the_projects_own_test_app_finding_it_by_target_name_is_no_dependency(tmp_path, index):
    """utf8proc's shape: the library's file is renamed (OUTPUT_NAME ..._static, after a cache
    variable that is empty: zfp's), and a test app (a CMake project of its own, not added)
    finds the project by its target name."""
    root = _write(
        tmp_path / "u8",
        {
            "CMakeLists.txt": 'project(u8x C)\nset(U8_PREFIX "" CACHE STRING "Prefix to prepend")\n'
            'add_library(u8x u8x.c)\nset_target_properties(u8x PROPERTIES OUTPUT_NAME "${U8_PREFIX}u8x_static")\n'
            "install(TARGETS u8x)\n",
            "u8x.c": "int u;\n",
            "u8x.h": "int u8x(void);\n",
            "test/app/CMakeLists.txt": "project(u8x-test)\nfind_package(u8x REQUIRED)\n",
        },
    )
    a = analyze(root, "u8x")
    names.resolve(a, index)
    assert a.build["own_names"] == ["u8x_static"] and a.spack_dependencies() == []
    # the link test finds the library by either name (the shared one keeps the target's)
    assert 'find_libraries(["libu8x_static", "libu8x"], root=self.prefix, shared=True' in _recipe(a)


def test_install_run_by_subdirectory_makefiles_is_the_projects_own():
    # lz4's shape: `install: $(MAKE) -C lib $@`; PREFIX and the bin/ install are the subdirectories'
    a = analyze(os.path.join(TREES, "r3t-makelib"), "r3t-makelib")
    assert (a.build["has_install"], a.build["prefix_var"]) == (True, "PREFIX")
    assert a.build["own_names"] == ["r3mk"] and a.executables == ["r3mk"]
    assert [(c.exe, c.args) for c in a.checks] == [("r3mk", ["--selftest"])]
    text = _recipe(a)
    assert '"PREFIX={0}".format(self.prefix), "install"]' in text and "install_tree" not in text
    # the program's own check and, for the library, a program linked against it
    assert 'exe("--selftest")' in text and "def test_link(self):" in text


def test_a_handwritten_makefile_in_names_the_libraries(tmp_path):
    # Mini-XML's shape: autoconf substitutes the library's name; Makefile.in's rules name each
    # kind, several to a rule; --with-x=... settings are no variants
    root = _write(
        tmp_path / "mx",
        {
            "configure.ac": "AC_INIT([mx], [4.0.5])\nAC_PROG_CC\n"
            "AC_ARG_ENABLE([threads], AS_HELP_STRING([--disable-threads], [no threads, default=no]))\n"
            "AC_ARG_WITH([ldflags], AS_HELP_STRING([--with-ldflags=...], [Specify additional LDFLAGS]))\n"
            "AC_ARG_WITH([docdir], AS_HELP_STRING([--with-docdir], [set directory for documentation]))\n",
            "configure": "#!/bin/sh\n",
            "Makefile.in": "LIBMX = @LIBMX@\nall: $(LIBMX)\nlibmx.a libmx4.a: mx.o\n\t$(AR) rc $@ mx.o\n"
            "libmx.so.2 libmx4.so.2: mx.o\n\t$(CC) -shared -o $@ mx.o\nlib-release: all\n",
            "mx.c": "int mx(void) { return 0; }\n",
            "mx.h": "int mx(void);\n",
        },
    )
    a = analyze(root, "mx")
    assert a.build["own_names"] == ["mx", "mx4"]
    assert a.build["test_library_files"] == ["mx", "mx4"] and a.build["test_header"] == "mx.h"
    assert [(v.name, v.default, v.description) for v in a.variants] == [
        ("threads", True, "enable threads (--disable-threads: no threads, default=no)")
    ]
    assert 'find_libraries(["libmx", "libmx4"]' in _recipe(a)


def test_a_failed_stand_alone_test_names_what_the_prefix_has(tmp_path):
    a = analyze(os.path.join(TREES, "r3t-makelib"), "r3t-makelib")
    text = _recipe(a)
    prefix = _write(
        tmp_path / "prefix",
        {"lib/libr3mk2.so": "", "lib/libr3mk2.a": "", "include/r3mk/r3mk.h": "", "include/r3mk/other.h": ""},
    )
    # what `spack test run` wrote in its results file for the generated test methods
    results = (
        "==> [2026-11-25-23:40:01.1] test: test_link: compile and link a program\n"
        "AssertionError: no libr3mk under the prefix\n"
        "AssertionError: none of r3mk.h... under the prefix\n"
        "ProcessError: %s/bin/r3mk: No such file or directory\n" % prefix
    )
    found = testfixes.diagnose_test(results)
    assert [(f.kind, f.subject) for f in found] == [
        ("test-library", "r3mk"),
        ("test-header", "r3mk.h"),
        ("test-program", "r3mk"),
    ]
    assert fixes.diagnose(results) == []  # a build's rules do not read a test's words
    new, done = testfixes.apply(text, found, prefix)
    assert 'find_libraries(["libr3mk", "libr3mk2"]' in new and validate(new).ok
    assert 'for name in ["r3mk.h", "other.h"]' in new
    assert len(done) == 2  # bin/ has no program to run instead: that test stays as it is


def test_builds_named_otherwise_are_chosen_by_one_variant(tmp_path):
    # directories not named for a programming model (or two for one) keep one variant
    # naming the directory; models each get theirs, never together
    mk = "all: app\napp: main.c\n\t$(CC) -o app main.c\n"
    main = "int main(void) { return 0; }\n"
    root = _write(
        tmp_path / "bx",
        {"serial/Makefile": mk, "serial/main.c": main, "blocked/Makefile": mk, "blocked/main.c": main},
    )
    text = _recipe(analyze(root, "bx"))
    assert 'variant("implementation", default="serial", values=("blocked", "serial"), multi=False' in text
    assert 'return self.spec.variants["implementation"].value' in text
    root = _write(
        tmp_path / "mx",
        {"src/Makefile": mk, "src/main.c": main, "hip/Makefile": mk, "hip/main.c": main, "sycl/Makefile": mk},
    )
    text = _recipe(analyze(root, "mx"))
    assert 'variant("hip", default=False' in text and 'variant("sycl", default=False' in text
    assert 'conflicts("+hip", when="+sycl"' in text and "implementation" not in text


def test_cmake_bindings_are_named_for_their_language_and_test_options_are_no_variants(tmp_path):
    # zfp's shape: BUILD_ZFORP adds a directory that enables Fortran, BUILD_ZFPY one that finds
    # Python; the tests' own options (in tests/, or under if(BUILD_TESTING)) are not the package's
    root = _write(
        tmp_path / "zb",
        {
            "CMakeLists.txt": "cmake_minimum_required(VERSION 3.9)\nproject(ZB VERSION 1.0.0 LANGUAGES C)\n"
            'option(BUILD_ZBORT "Build Fortran library" OFF)\nif(BUILD_ZBORT)\n  add_subdirectory(fortran)\nendif()\n'
            'option(BUILD_ZBPY "Build python bindings" OFF)\nif(BUILD_ZBPY)\n  add_subdirectory(python)\nendif()\n'
            'option(ZB_WITH_CACHE "Cache" ON)\nadd_library(zb zb.c)\ninstall(TARGETS zb)\n'
            'if(BUILD_TESTING)\n  option(INSTALL_GTEST "Install Googletest" OFF)\n  add_subdirectory(tests)\nendif()\n',
            "fortran/CMakeLists.txt": "enable_language(Fortran)\nadd_library(zbf zbf.f90)\n",
            "python/CMakeLists.txt": "find_package(PythonInterp REQUIRED)\n",
            "tests/CMakeLists.txt": 'option(ZB_BUILD_TESTING_LARGE "Large tests" OFF)\n',
            "zb.c": "int zb;\n",
        },
    )
    a = analyze(root, "zb")
    assert sorted((v.name, v.option) for v in a.variants) == [
        ("cache", "ZB_WITH_CACHE"),
        ("fortran", "BUILD_ZBORT"),
        ("python", "BUILD_ZBPY"),
        ("shared", "BUILD_SHARED_LIBS"),  # a library whose kind BUILD_SHARED_LIBS decides
    ]
    assert 'self.define_from_variant("BUILD_ZBORT", "fortran")' in _recipe(a)


# SimpleMOC's builtin recipe (v4, ~mpi): make is given CFLAGS only, and the Makefile says
# `CC = gcc`. Built %clang, Spack's build PATH holds lib/spack/env, where `gcc` is a
# directory; make runs the bare command by its own PATH search and stops at it.
BUILT_IN_STEPS = '''from spack.package import *


class Movie(MakefilePackage):
    """A proxy app whose recipe builds its make arguments in steps."""

    version("4", sha256="%s")
    variant("mpi", default=True, description="Build with MPI support")
    depends_on("mpi", when="+mpi")
    build_directory = "src"

    @property
    def build_targets(self):
        targets = []
        cflags = "-std=gnu99"
        if "+mpi" in self.spec:
            targets.append("CC={0}".format(self.spec["mpi"].mpicc))
        targets.append("CFLAGS={0}".format(cflags))
        return targets
''' % ("a" * 64)
DENIED = (
    "gcc -std=gnu99 -c main.c -o main.o\nmake: gcc: Permission denied\nmake: *** [Makefile:124: main.o] Error 127\n"
)


def test_a_compiler_the_build_cannot_run_gets_spacks_in_the_overlay(tmp_path):
    from spack_r3.roundtrip import overlay
    from spack_r3.workspace import Workspace

    tree = _write(
        tmp_path / "movie",
        {"src/Makefile": "COMPILER = gnu\nifeq ($(COMPILER),gnu)\n  CC = gcc\nendif\nprog: main.c\n\t$(CC) main.c\n"},
    )
    own = tmp_path / "builtin" / "packages" / "movie" / "package.py"
    own.parent.mkdir(parents=True)
    own.write_text(BUILT_IN_STEPS)
    [found] = fixes.diagnose(DENIED)
    assert (found.kind, found.subject) == ("missing-compiler", "gcc")
    fixed = overlay.repair(Workspace(str(tmp_path / "ws")), "movie", str(own), "v1", DENIED, tree=tree)
    new = open(fixed.recipe).read()
    # Spack's compiler first, before what the recipe builds: its own CC (mpicc, +mpi) still wins
    assert 'return ["CC={0}".format(spack_cc)] + list(targets)' in new and validate(new).ok
    assert fixed.changes == ["passed CC= from Spack's compiler for gcc (make: gcc: Permission denied)"]
    assert own.read_text() == BUILT_IN_STEPS
    # without the tree there is no variable to give the compiler to: nothing is repaired
    assert overlay.repair(Workspace(str(tmp_path / "ws2")), "movie", str(own), "v1", DENIED) is None
