"""The refine loop's repairs for the classes of failure met on trees nobody tuned for
(issue 59), read from the diagnostics real tools print, applied to generated recipes:

- a C++ header included by a C link test -> the test is C++;
- an installed program run with an argument it does not take (it crashed, timed out or
  said nothing) -> the next way to run it, each tried once, the tried ones kept in the test;
- configure without its auxiliary scripts -> configure regenerated; where it already was,
  automake's scripts copied too (a second, different diagnosis);
- a language the build compiles that the recipe does not depend on -> ``depends_on``;
- a hand-written ``configure`` that takes the architecture (HPCG's) is not run as
  Autoconf's; the architecture file its Makefile includes is chosen instead.

The same classes are built for real through Spack in test_recipe_spack.py.
"""

from spack_r3.recipe import fixes, testfixes
from spack_r3.recipe.analyze import analyze
from spack_r3.recipe.analyze.facts import detect_build_system
from spack_r3.recipe.validate import validate
from test_recipe_shapes import _recipe, _write  # (one copy of the tree and recipe helpers)


CMAKE_LIB = (
    "cmake_minimum_required(VERSION 3.10)\nproject(cxlib C CXX)\n"
    "add_library(cxlib SHARED cxlib.cc)\nadd_executable(cxtool tool.c)\n"
    "install(TARGETS cxlib DESTINATION lib)\ninstall(FILES cxlib.h DESTINATION include)\n"
)


def test_a_cxx_header_gets_a_cxx_link_test(tmp_path):
    # snappy's shape: a .h that includes <string>, the library C++ beside a C tool
    root = _write(
        tmp_path / "cxlib",
        {
            "CMakeLists.txt": CMAKE_LIB,
            "cxlib.h": "#pragma once\n#include <string>\n/* class of its own */\nnamespace cx { int f(); }\n",
            "cxlib.cc": '#include "cxlib.h"\nint cx::f() { return 1; }\n',
            "tool.c": "int main(void) { return 0; }\n",
        },
    )
    a = analyze(root, "cxlib")
    assert a.build["test_language"] == "cxx"
    text = _recipe(a)
    assert 'open("r3_link_test.cpp", "w")' in text and "Executable(self.compiler.cxx)" in text
    assert 'depends_on("cxx", type="build")' in text


def test_a_c_header_keeps_a_c_link_test(tmp_path):
    root = _write(
        tmp_path / "clib",
        {
            "CMakeLists.txt": CMAKE_LIB.replace("cxlib.cc", "cxlib.c"),
            # C++ only behind __cplusplus's extern "C", and in comments
            "cxlib.h": '#pragma once\n/* namespace cx { } */\n#ifdef __cplusplus\nextern "C" {\n#endif\nint f(void);\n'
            "#ifdef __cplusplus\n}\n#endif\n",
            "cxlib.c": "int f(void) { return 1; }\n",
            "tool.c": "int main(void) { return 0; }\n",
        },
    )
    text = _recipe(analyze(root, "clib"))
    assert 'open("r3_link_test.c", "w")' in text and "Executable(self.compiler.cc)" in text


def test_a_cxx_header_hidden_from_the_analysis_is_repaired_from_the_test(tmp_path):
    # the header's C++ is in a header it includes: the C test fails as clang and gcc say it
    root = _write(
        tmp_path / "cxlib",
        {
            "CMakeLists.txt": CMAKE_LIB,
            "cxlib.h": '#pragma once\n#include "cxlib_impl.h"\n',
            "cxlib_impl.h": "#include <string>\n",
            "cxlib.cc": '#include "cxlib.h"\n',
            "tool.c": "int main(void) { return 0; }\n",
        },
    )
    text = _recipe(analyze(root, "cxlib"))
    assert 'open("r3_link_test.c", "w")' in text
    for said in (
        "/p/include/cxlib_impl.h:1:10: fatal error: 'string' file not found\n",
        "/p/include/cxlib_impl.h:1:10: fatal error: string: No such file or directory\n",
        "/p/include/cxlib_impl.h:3:1: error: unknown type name 'namespace'\n",
    ):
        found = testfixes.diagnose_test(said)
        assert [f.kind for f in found] == ["test-language"], said
        new, done = testfixes.apply(text, found, str(tmp_path))
        assert 'open("r3_link_test.cpp", "w")' in new and '"r3_link_test.cpp", "-o"' in new
        assert "Executable(self.compiler.cxx)" in new and 'depends_on("cxx", type="build")' in new
        assert validate(new).ok and done and "C++" in done[0]
    assert fixes.diagnose(said) == []  # a build's rules do not read a test's words


def test_a_program_run_wrongly_is_run_another_way_each_attempt(tmp_path):
    # its source says --help in a message; given any argument it reads it as a file and crashes
    root = _write(
        tmp_path / "crashy",
        {
            "Makefile": "all: crashy\ncrashy: main.c\n\t$(CC) -o crashy main.c\n",
            "main.c": '#include <stdio.h>\nstatic const char *none[] = {"--help"};\n'
            'int main(int c, char **v) { if (c > 1) { FILE *f = fopen(v[1], "r"); return fgetc(f); }'
            " puts(none[0] + 2); return 0; }\n",
        },
    )
    text = _recipe(analyze(root, "crashy"))
    assert 'exe("--help", output=str' in text and 'input="/dev/null", timeout=120' in text
    tried = []
    for status in ("-11", "timed out (120 s)", "-6", "134", "1"):
        shown = "no argument" if "exe(output=str" in text else text.split('exe("', 1)[1].split('"', 1)[0]
        tried.append(shown)
        said = "AssertionError: r3 run of crashy (%s): exit status %s\n" % (shown, status)
        found = testfixes.diagnose_test(said)
        if status == "1":  # a plain failure is an answer: the program started and said no
            assert found == []
            break
        new, done = testfixes.apply(text, found, str(tmp_path))
        assert validate(new).ok and done, said
        text = new
    # each way once, no argument first after the source's flag
    assert tried == ["--help", "no argument", "--version", "-h", "-help"]
    said = "AssertionError: r3 run of crashy (-help): exit status -11\n"
    assert testfixes.apply(text, testfixes.diagnose_test(said), str(tmp_path)) == (None, [])


def test_missing_auxiliary_files_regenerate_configure_then_copy_automakes(tmp_path):
    root = _write(
        tmp_path / "aux",
        {
            "configure.ac": "AC_INIT([aux], [1.0])\nAC_PROG_CC\nAC_PROG_INSTALL\nAC_CONFIG_FILES([Makefile])\n"
            "AC_OUTPUT\n",
            "Makefile.in": "all:\n\t@CC@ -o aux aux.c\ninstall:\n\tmkdir -p @prefix@/bin && cp aux @prefix@/bin\n",
            "configure": "#!/bin/sh\n# Generated by GNU Autoconf 2.71 for aux 1.0.\n",
            "aux.c": "int main(void) { return 0; }\n",
        },
    )
    text = _recipe(analyze(root, "aux"))
    assert "force_autoreconf" not in text  # configure is there: run as shipped
    said = "configure: error: cannot find required auxiliary files: install-sh\n"
    found = fixes.diagnose(said)
    assert [f.kind for f in found] == ["autotools-aux"]
    first, done = fixes.apply(text, found, None)
    assert "force_autoreconf = True" in first and validate(first).ok
    for tool in ("autoconf", "automake", "libtool", "m4"):
        assert 'depends_on("%s", type="build")' % tool in first
    # autoreconf ran and configure still lacks them (no automake in configure.ac): the next
    # diagnosis differs
    second, done2 = fixes.apply(first, found, None)
    assert "def autoreconf(self, spec, prefix):" in second and '"--print-libdir"' in second
    assert validate(second).ok and done2 != done
    assert fixes.apply(second, found, None) == (None, [])


def test_a_language_the_build_compiles_becomes_a_dependency(tmp_path):
    root = _write(tmp_path / "lang", {"CMakeLists.txt": "project(lang C)\nadd_executable(lang main.c)\n"})
    _write(tmp_path / "lang", {"main.c": "int main(void) { return 0; }\n"})
    text = _recipe(analyze(root, "lang"))
    assert 'depends_on("cxx"' not in text
    said = (
        "CMake Error at CMakeLists.txt:1 (project):\n  No CMAKE_CXX_COMPILER could be found.\n\n"
        "  Tell CMake where to find the compiler by setting either the environment\n"
    )
    new, done = fixes.apply(text, fixes.diagnose(said), None)
    assert 'depends_on("cxx", type="build")' in new and validate(new).ok and "cxx" in done[0]


HPCG_CONFIGURE = """#! /bin/sh
if test x"$#" != x"1" -o x"$1" = "x" ; then
  echo Please specify '"'arch'"' argument, for example:
  exit 127
fi
sed -e "s:UNKNOWN:${1}:" Makefile.ext > Makefile
"""


def test_a_configure_that_takes_the_architecture_is_not_autoconfs(tmp_path):
    # HPCG's shape: configure <arch>, a Makefile including setup/Make.$(arch) (UNKNOWN: a template)
    root = _write(
        tmp_path / "archy",
        {
            "configure": HPCG_CONFIGURE,
            "Makefile": "arch = UNKNOWN\nsetup_file = setup/Make.$(arch)\ninclude $(setup_file)\n\n"
            "bin/archy: src/main.o\n\t$(LINKER) src/main.o -o bin/archy\n\nclean:\n\trm -f src/main.o\n",
            "setup/Make.UNKNOWN": "CXX = UNKNOWN\n",
            "setup/Make.Mac_Serial": "CXX = /usr/bin/clang++\n",
            "setup/Make.MPI_ICPC": "CXX = mpiicpc\n",
            "setup/Make.Linux_MPI": "CXX = mpicxx\n",
            "setup/Make.Linux_Serial": "CXX = /usr/bin/g++\nLINKER = $(CXX)\n",
            "src/main.cpp": "int main() { return 0; }\n",
        },
    )
    assert detect_build_system(root) == "makefile"
    a = analyze(root, "archy")
    assert a.build["extra_args"] == ["arch=Linux_Serial"]
    assert a.build["compiler_vars"] == {"CXX": "cxx"}  # named by path in the chosen file
    text = _recipe(a)
    assert '"arch=Linux_Serial"' in text and '"CXX={0}".format(spack_cxx)' in text
    # Autoconf's own, or one that takes --prefix as Autoconf's does, stays autotools
    _write(tmp_path / "archy", {"configure": "#!/bin/sh\n# Generated by GNU Autoconf 2.71\n"})
    assert detect_build_system(root) == "autotools"


def test_each_program_in_bin_is_run_another_way_too(tmp_path):
    # a Makefile that names no program: the test runs whatever bin/ holds (HPCG's xhpcg)
    root = _write(
        tmp_path / "anyprog",
        {
            "Makefile": "bin/anyprog: main.o\n\t$(CC) main.o -o bin/anyprog\n",
            "main.c": "int main(void) { return 0; }\n",
        },
    )
    text = _recipe(analyze(root, "anyprog"))
    assert "def test_programs_run(self):" in text and 'exe("-h", output=str' in text
    for shown, nxt in (("-h", "no argument"), ("no argument", "--version")):
        said = "FAILED: Anyprog::test_programs_run: r3 run of anyprog (%s): no output\n" % shown
        new, done = testfixes.apply(text, testfixes.diagnose_test(said), str(tmp_path))
        assert validate(new).ok and ("(%s; tried " % nxt) in new, said
        text = new
    assert 'exe("--version", output=str' in text and "tried no argument, -h" in text


def test_a_tool_autoreconf_runs_becomes_a_build_dependency(tmp_path):
    root = _write(tmp_path / "gt", {"configure.ac": "AC_INIT([gt], [1.0])\nAM_GNU_GETTEXT\n", "gt.c": ""})
    text = _recipe(analyze(root, "gt"))
    said = 'Can\'t exec "autopoint": No such file or directory at /usr/share/autoconf/Autom4te/FileUtils.pm\n'
    new, done = fixes.apply(text, fixes.diagnose(said), None)
    assert new and 'depends_on("gettext", type="build")' in new and validate(new).ok
