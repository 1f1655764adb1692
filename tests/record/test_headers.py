"""A unit's header closure (``record.headers``): what a capture keeps so a source variant
compiles where the application's tree is not.

Examples of use: the closure of a unit is its own headers (clang's ``-M`` on its compile
command), never the system's; a header included twice, or two with one content, is kept
once; the kept copies, through the generated VFS overlay, compile the unit once its tree
is gone, with its relative ``-I`` as recorded.
"""

import os
import shutil
import subprocess

import pytest

from spack_r3.record import headers

KERNEL_C = r"""
#include <math.h>
#include <stddef.h>
#include "local.h"
#include "inc/shared.h"
#include <shared.h>
#include <twin.h>
double kernel(double x) { return sqrt(x) * LOCAL * SHARED; }
"""


def unit(tmp_path):
    """A unit whose compile directory is its tree: local.h beside it, inc/shared.h found
    by a relative -I and by its path, inc/twin.h with shared.h's content."""
    src = tmp_path / "tree" / "src"
    (src / "inc").mkdir(parents=True)
    (src / "kernel.c").write_text(KERNEL_C)
    (src / "local.h").write_text('#include "inc/shared.h"\n#define LOCAL 2.0\n')
    shared = "#ifndef SHARED\n#define SHARED 3.0\n#endif\n"
    (src / "inc" / "shared.h").write_text(shared)
    (src / "inc" / "twin.h").write_text(shared)
    return str(src)


def test_the_closure_is_the_units_own_headers_each_kept_once(tmp_path, clang):
    src = unit(tmp_path)
    paths = headers.closure(clang, ["-Iinc", "-O2"], "kernel.c", src)
    assert sorted(paths) == [os.path.join(src, n) for n in ("inc/shared.h", "inc/twin.h", "local.h")]
    assert paths[os.path.join(src, "inc/shared.h")] == "inc/shared.h"  # (as clang named it: relative)
    kept = headers.keep(paths, str(tmp_path / "capture"))
    # shared.h (included three times) and twin.h (its content) are one file.
    assert len(set(kept.values())) == 2
    assert sorted(os.listdir(tmp_path / "capture" / "headers")) == sorted(set(kept.values()))


def test_the_kept_headers_compile_the_unit_where_its_tree_is_gone(tmp_path, clang):
    src = unit(tmp_path)
    kept = headers.keep(headers.closure(clang, ["-Iinc"], "kernel.c", src), str(tmp_path / "capture"))
    shutil.move(str(tmp_path / "tree"), str(tmp_path / "gone"))  # (as on a node that does not mount it)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    shutil.copy(tmp_path / "gone" / "src" / "kernel.c", scratch / "kernel.c")
    cmd = [clang, "-Iinc", "-iquote", src, "-emit-llvm", "-c", str(scratch / "kernel.c"), "-o", str(scratch / "k.bc")]
    bare = subprocess.run(cmd, cwd=scratch, capture_output=True, text=True)
    assert bare.returncode != 0 and "local.h' file not found" in bare.stderr
    flags = headers.overlay_flags(kept, str(tmp_path / "capture"), src, str(scratch))
    built = subprocess.run(cmd[:1] + flags + cmd[1:], cwd=scratch, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert (scratch / "k.bc").stat().st_size > 0
    # A copy that is missing: no overlay (the tree itself is needed, as before).
    os.unlink(tmp_path / "capture" / "headers" / kept[os.path.join(src, "local.h")])
    assert headers.overlay_flags(kept, str(tmp_path / "capture"), src, str(scratch)) == []


def test_dependency_lines_as_clang_writes_them():
    text = "unit: a.c /usr/include/stdio.h \\\n  my\\ dir/x.h cost$$.h \\\n  a.c\n"
    assert headers.parse_deps(text) == ["a.c", "/usr/include/stdio.h", "my dir/x.h", "cost$.h"]


def test_a_unit_that_does_not_preprocess_has_no_closure(tmp_path, clang):
    src = unit(tmp_path)
    os.unlink(os.path.join(src, "local.h"))
    with pytest.raises(headers.ClosureError, match="local.h"):
        headers.closure(clang, ["-Iinc"], "kernel.c", src)
