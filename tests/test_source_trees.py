"""A user's source tree: recorded by its content, copied without ever being written."""

import os
import shutil

from conftest import REPO_ROOT
from spack_r3 import sourcetree
from spack_r3.record.session import previous_record, record
from spack_r3.spack.devpath import tree_digest
from spack_r3.workspace import Workspace
from r3cli import r3_subprocess

HEAT = os.path.join(REPO_ROOT, "repos", "r3", "sources", "heat")


def test_a_record_is_reused_only_for_the_same_content(tmp_path, clang):
    src = tmp_path / "heat"
    shutil.copytree(HEAT, src)
    ws = Workspace(str(tmp_path / "ws"))
    recorded = record(ws, str(src), "./heat 32 2", kernels=["jacobi_step"])
    assert previous_record(ws, str(src), "./heat 32 2", kernels=["jacobi_step"]).run_dir == recorded.run_dir

    # The same content elsewhere is the same recording; a touched file with its old bytes too.
    moved = tmp_path / "moved"
    shutil.copytree(src, moved)
    os.utime(moved / "jacobi.c", (0, 0))
    assert sourcetree.digest(str(moved)) == sourcetree.digest(str(src))

    # A changed byte, a new file, a removed one, a changed mode: another tree.
    digests = {sourcetree.digest(str(src))}
    with open(src / "jacobi.c", "a") as f:
        f.write("/* edited */\n")
    digests.add(sourcetree.digest(str(src)))
    assert previous_record(ws, str(src), "./heat 32 2", kernels=["jacobi_step"]) is None
    (src / "extra.h").write_text("#define X 1\n")
    digests.add(sourcetree.digest(str(src)))
    os.chmod(src / "extra.h", 0o755)
    digests.add(sourcetree.digest(str(src)))
    os.remove(src / "extra.h")
    digests.add(sourcetree.digest(str(src)))
    assert len(digests) == 4  # (removing extra.h gives back the edited tree's digest)


def test_tune_records_again_after_the_source_changed(tmp_path, clang):
    src = tmp_path / "heat"
    shutil.copytree(HEAT, src)
    ws = tmp_path / "ws"
    assert (
        r3_subprocess(
            "--workspace", ws, "record", "--source", src, "--run", "./heat 32 2", "--kernel", "jacobi_step"
        ).returncode
        == 0
    )
    with open(src / "jacobi.c", "a") as f:
        f.write("this line does not compile\n")
    proc = r3_subprocess(
        "--workspace", ws, "tune", "--source", src, "--run", "./heat 32 2", "--kernel", "jacobi_step", "--budget", 1
    )
    assert proc.returncode == 2
    assert "reusing" not in proc.stdout  # the code that was recorded no longer exists
    assert "the record build failed" in proc.stderr and "jacobi.c" in proc.stderr  # the compiler's own error


def test_a_link_out_of_the_tree_is_copied_as_what_it_points_to(tmp_path, clang):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "objdir").mkdir(parents=True)
    (elsewhere / "include").mkdir()
    (elsewhere / "include" / "scale.h").write_text("#define SCALE 2.0\n")
    src = tmp_path / "app"
    src.mkdir()
    os.symlink(elsewhere / "objdir", src / "obj")  # where the build writes its objects
    os.symlink(elsewhere / "include", src / "include")  # headers the build reads
    os.symlink("app.c", src / "main.c")  # a link within the tree stays a link
    os.symlink(tmp_path / "nowhere", src / "dangling")
    (src / "app.c").write_text(
        '#include <stdio.h>\n#include "scale.h"\n'
        "void scale(double *a, int n) { for (int i = 0; i < n; i++) a[i] *= SCALE; }\n"
        "int main(void) { double a[64]; for (int i = 0; i < 64; i++) a[i] = i; scale(a, 64);"
        ' printf("%g\\n", a[63]); return 0; }\n'
    )
    (src / "Makefile").write_text(
        "app: obj/main.o\n\t$(CC) -o app obj/main.o\nobj/main.o: main.c\n\t$(CC) -Iinclude -c -o obj/main.o main.c\n"
    )
    before = sourcetree.digest(str(src))

    ws = Workspace(str(tmp_path / "ws"))
    result = record(ws, str(src), "./app", kernels=["scale"])
    assert [c.kernel for c in result.captures] == ["scale"]
    assert os.listdir(elsewhere / "objdir") == []  # the user's directories are never written
    assert sorted(os.listdir(src)) == ["Makefile", "app.c", "dangling", "include", "main.c", "obj"]
    copy = os.path.join(result.run_dir, "src")
    assert os.path.isdir(os.path.join(copy, "obj")) and not os.path.islink(os.path.join(copy, "obj"))
    assert os.readlink(os.path.join(copy, "main.c")) == "app.c"
    assert not os.path.lexists(os.path.join(copy, "dangling"))
    assert sourcetree.digest(str(src)) == before


def test_a_dev_path_spec_is_keyed_on_its_tree(tmp_path):
    src = tmp_path / "heat"
    shutil.copytree(HEAT, src)
    spec = "r3-heat@1.0 dev_path=%s" % src
    first = tree_digest(spec)
    assert tree_digest(spec) == first and tree_digest("r3-heat@1.0") is None
    (src / "jacobi.o").write_text("a build output: not part of the source")
    assert tree_digest(spec) == first
    with open(src / "jacobi.c", "a") as f:
        f.write("/* edited */\n")
    assert tree_digest(spec) != first
