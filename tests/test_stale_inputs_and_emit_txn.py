"""Issue 57, hostile input round 2, items 4 and 5.

4. A record is reused only while what its build read outside the tree is unchanged: a
   header through ``CPPFLAGS=-I/elsewhere``, a unit compiled from ``/elsewhere`` that the
   kernel calls into (its link unit). One changed or gone records again, saying which.
5. Emit is one transaction: an emit killed (SIGKILL, a real process) at any point leaves
   the tuned repository's package as it was or as the emit makes it, never a plan of one
   beside the package.py of the other; the next emit cleans what it left. ``r3 status``
   verifies the plan digests package.py names, and reports a mismatch as stale.
"""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO_ROOT
from spack_r3.data import Pipeline, Variant
from spack_r3.emit.plan import Plan
from spack_r3.record.session import RECORD_JSON, previous_record, record
from spack_r3.roundtrip import emit as spack_emit
from spack_r3.roundtrip import pkgtxn
from spack_r3.roundtrip.status import status
from spack_r3.search.results import KernelResult, save_results
from spack_r3.sourcepatch import make_patch
from spack_r3.workspace import Workspace
from r3cli import R3, r3_output, r3_subprocess

HEAT = os.path.join(REPO_ROOT, "repos", "r3", "sources", "heat")


# --- 4. inputs outside the tree --------------------------------------------------------

APP_C = """#include <stdio.h>
#include "params.h"
double helper(double x);
void scale(double *a, int n) { for (int i = 0; i < n; i++) a[i] = helper(a[i]) * SCALE; }
int main(void) { double a[64]; for (int i = 0; i < 64; i++) a[i] = i; scale(a, 64); printf("%g\\n", a[63]); return 0; }
"""
MAKEFILE = """app: app.o helper.o
\t$(CC) -o app app.o helper.o
app.o: app.c
\t$(CC) $(CPPFLAGS) -O1 -c -o app.o app.c
helper.o: $(EXT)/helper.c
\t$(CC) -O1 -c -o helper.o $(EXT)/helper.c
"""


def _outside_tree(tmp_path):
    """A tree whose build reads a header and compiles a unit from folders outside it."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "params.h").write_text("#define SCALE 2.0\n")
    (tmp_path / "ext").mkdir()
    (tmp_path / "ext" / "helper.c").write_text("double helper(double x) { return x + 1.0; }\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "app.c").write_text(APP_C)
    (tmp_path / "app" / "Makefile").write_text(MAKEFILE)
    build = 'make CC="$R3_CC" CPPFLAGS=-I%s EXT=%s' % (tmp_path / "inc", tmp_path / "ext")
    return str(tmp_path / "app"), build


def test_a_record_is_not_reused_once_a_file_outside_the_tree_changed(tmp_path, clang):
    src, build = _outside_tree(tmp_path)
    header, helper = str(tmp_path / "inc" / "params.h"), str(tmp_path / "ext" / "helper.c")
    ws = Workspace(str(tmp_path / "ws"))
    settings = dict(build=build, kernels=["scale"])
    first = record(ws, src, "./app", **settings)
    [capture] = first.captures
    assert header in capture.headers and capture.link_units  # helper.c's unit: a link unit
    kept = json.load(open(os.path.join(first.run_dir, RECORD_JSON)))["inputs"]
    assert sorted(kept) == [helper, header]  # the tree's own files are keyed by its digest
    said = []
    assert previous_record(ws, src, "./app", say=said.append, **settings).run_dir == first.run_dir and not said

    # a macro of the header outside the tree changed: recorded again, and the line says why
    with open(header, "w") as f:
        f.write("#define SCALE 3.0\n")
    assert previous_record(ws, src, "./app", say=said.append, **settings) is None
    assert said == ["recording again: %s changed since %s recorded it" % (header, first.run_dir)]
    second = record(ws, src, "./app", **settings)
    assert second.captures[0].id != capture.id  # (the rebuilt application differs)
    assert previous_record(ws, src, "./app", **settings).run_dir == second.run_dir

    # the header as it was: the first run holds those captures again (the second is stale)
    with open(header, "w") as f:
        f.write("#define SCALE 2.0\n")
    del said[:]
    assert previous_record(ws, src, "./app", say=said.append, **settings).run_dir == first.run_dir
    assert said == ["recording again: %s changed since %s recorded it" % (header, second.run_dir)]

    # the unit the kernel calls into, compiled from outside the tree: changed, then gone
    with open(helper, "a") as f:
        f.write("/* edited */\n")
    del said[:]
    assert previous_record(ws, src, "./app", say=said.append, **settings) is None
    assert said and said[0].startswith("recording again: %s changed since " % helper)
    (tmp_path / "ext" / "helper.c").write_text("double helper(double x) { return x + 1.0; }\n")
    assert previous_record(ws, src, "./app", **settings).run_dir == first.run_dir
    os.remove(header)
    del said[:]
    assert previous_record(ws, src, "./app", say=said.append, **settings) is None
    assert said[0].startswith("recording again: %s is gone since " % header)


def test_a_run_recorded_before_inputs_were_kept_is_checked_on_its_captures_headers(tmp_path, clang):
    src, build = _outside_tree(tmp_path)
    header = str(tmp_path / "inc" / "params.h")
    ws = Workspace(str(tmp_path / "ws"))
    first = record(ws, src, "./app", build=build, kernels=["scale"])
    path = os.path.join(first.run_dir, RECORD_JSON)
    data = json.load(open(path))
    del data["inputs"]  # as an older r3 wrote it: capture.json's headers are what is known
    json.dump(data, open(path, "w"))
    assert previous_record(ws, src, "./app", build=build, kernels=["scale"]).run_dir == first.run_dir
    with open(header, "a") as f:
        f.write("#define UNUSED 1\n")
    said = []
    assert previous_record(ws, src, "./app", build=build, kernels=["scale"], say=said.append) is None
    assert said == ["recording again: %s changed since %s recorded it" % (header, first.run_dir)]


def test_tune_says_which_header_outside_the_tree_changed(tmp_path, clang):
    src, build = _outside_tree(tmp_path)
    header = str(tmp_path / "inc" / "params.h")
    ws = tmp_path / "ws"
    argv = ["--workspace", ws, "record", "--source", src, "--run", "./app", "--kernel", "scale", "--build", build]
    argv += ["--instances", 1]  # (as tune records: the same record)
    assert r3_subprocess(*argv).returncode == 0
    with open(header, "w") as f:
        f.write("#define SCALE (this does not compile)\n")
    argv[2:3] = ["tune"]
    proc = r3_subprocess(*argv, "--budget", 1)
    assert "reusing" not in proc.stdout
    assert "recording again: %s changed since " % header in proc.stdout, proc.stdout
    assert proc.returncode == 2 and "the record build failed" in proc.stderr  # it did record again


# --- 5. emit as one transaction ----------------------------------------------------------

PACKAGE = "r3-heat"


def _result(capture, variant):
    return KernelResult(capture.kernel, [capture.id], 0.9, 1e-3, 5e-4, 2.0, 1.9, 2.1, 8, {}, False, True, variant)


def _state(repo):
    """The package as a reader sees it: {file: contents} (a plan less when it was emitted),
    and what else lies in ``packages``."""
    directory = os.path.join(repo, "packages", PACKAGE)
    files = {}
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        if name.endswith(".json"):
            plan = json.loads(data)
            plan["facts"].pop("emitted", None)
            data = json.dumps(plan, sort_keys=True).encode()
        files[name] = data
    others = sorted(n for n in os.listdir(os.path.join(repo, "packages")) if n != PACKAGE)
    return files, others


@pytest.fixture(scope="module")
def emits(tmp_path_factory, clang):
    """A Spack-style record of heat, and its tuned package emitted twice: the old package
    (a pipeline alone) in ``old``, the new one (another pipeline and a source rewrite, so
    another plan digest and a patch) in ``new``; the workspace's result is the new one's."""
    tmp = tmp_path_factory.mktemp("emit-txn")
    src = tmp / "heat"
    shutil.copytree(HEAT, src)
    ws = Workspace(str(tmp / "ws"))
    recorded = record(ws, str(src), "./heat 32 2", kernels=["jacobi_step"])
    [capture] = recorded.captures
    path = os.path.join(recorded.run_dir, RECORD_JSON)
    data = json.load(open(path))
    data["spack"] = {
        "package": PACKAGE,
        "namespace": "r3",
        "spec": PACKAGE,
        "target": "zen3",
        "version": "1.0",
        "source_root": os.path.dirname(capture.source_file),
        "layout": "v1",
    }
    json.dump(data, open(path, "w"))
    repos = {}
    source = open(capture.source_file).read()
    patch = make_patch(source, source.replace("double *out =", "double *const out =", 1), "jacobi.c")
    for label, variant in (
        ("old", Variant(pipeline=Pipeline(opt="2"))),
        ("new", Variant(pipeline=Pipeline(opt="3", unroll=False), source_patch=patch, source_rule="test")),
    ):
        save_results(ws, [_result(capture, variant)])
        repos[label] = str(tmp / label)
        if label == "new":
            shutil.copytree(repos["old"], repos[label])
        spack_emit.emit(ws, PACKAGE, repo_root=repos[label])
    old, new = _state(repos["old"]), _state(repos["new"])
    assert old != new and set(new[0]) == {"package.py", "r3-zen3.json", "r3-zen3-0.patch"}
    assert old[1] == new[1] == []
    return {"ws": ws.root, "tmp": tmp, "old": repos["old"], "new": repos["new"], "states": (old, new)}


def _fresh_repo(emits, name):
    """A copy of the old package's repository to emit the new one into."""
    repo = str(emits["tmp"] / name)
    shutil.rmtree(repo, ignore_errors=True)
    shutil.copytree(emits["old"], repo)
    return repo


def _emit_process(emits, repo, pause=None, prelude=""):
    env = dict(os.environ)
    env.pop(pkgtxn.PAUSE_ENV, None)
    if pause:
        env[pkgtxn.PAUSE_ENV] = pause
    argv = [str(a) for a in ("--workspace", emits["ws"], "emit", PACKAGE, "--repo", repo)]
    cmd = R3 + argv
    if prelude:  # (a process whose file system cannot exchange directories)
        cmd = [sys.executable, "-c", prelude + "\nfrom spack_r3 import cli\nsys.exit(cli.main(%r))" % argv]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _stopped(proc, limit=60):
    """Wait until ``proc`` stopped itself (SIGSTOP at its pause point): True, or False when
    it exited instead."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with open("/proc/%d/stat" % proc.pid) as f:
            if f.read().rpartition(")")[2].split()[0] == "T":
                return True
        time.sleep(0.02)
    raise AssertionError("the emit neither stopped nor ended in %ss" % limit)


def _kill(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _assert_one_version(emits, repo, expect=None):
    """The package is the old one or the new one (``expect``: which), never a mix, and
    status calls it current, having compared its plan's digest with package.py's."""
    old, new = emits["states"]
    files, _ = _state(repo)
    found = "old" if files == old[0] else "new" if files == new[0] else None
    assert found, "a mix: %s" % {k: v[:80] for k, v in files.items()}
    assert expect is None or found == expect, (found, expect)
    [row] = status(repo)
    assert row.stale == [], row.stale
    return found


def _assert_next_emit_cleans_up(emits, repo):
    assert spack_emit.emit(Workspace(emits["ws"]), PACKAGE, repo_root=repo).targets == ["zen3"]
    files, others = _state(repo)
    assert files == emits["states"][1][0] and others == []  # the new package, nothing left beside it


@pytest.mark.parametrize(
    "point, expect",
    [("copied", "old"), ("writing", "old"), ("staged", "old"), ("committed", "old"), ("swapped", "new")],
)
def test_an_emit_killed_at_each_point_leaves_the_old_or_the_new_package(emits, point, expect):
    repo = _fresh_repo(emits, "kill-" + point)
    proc = _emit_process(emits, repo, pause=point)
    try:
        assert _stopped(proc), proc.stderr.read() if proc.poll() is not None else ""
    finally:
        _kill(proc)
    _assert_one_version(emits, repo, expect)
    _assert_next_emit_cleans_up(emits, repo)


def test_an_emit_killed_between_two_renames_is_finished_by_the_next(emits):
    """Where directories cannot be exchanged in one rename (the swap is two): killed between
    them, no package is half of each; status says so, and the next emit puts the new one in place."""
    repo = _fresh_repo(emits, "kill-moved-aside")
    prelude = "import sys\nfrom spack_r3.roundtrip import pkgtxn\npkgtxn._exchange = lambda a, b: False"
    proc = _emit_process(emits, repo, pause="moved-aside", prelude=prelude)
    try:
        assert _stopped(proc), proc.stderr.read() if proc.poll() is not None else ""
    finally:
        _kill(proc)
    assert not os.path.exists(os.path.join(repo, "packages", PACKAGE))
    [row] = status(repo)
    assert row.package == PACKAGE and row.stale and row.stale[0].startswith("emit: killed while swapping")
    # the next rewrite finishes the swap first (here: the emit of the same plan again)
    _assert_next_emit_cleans_up(emits, repo)


def test_an_emit_killed_at_random_times_leaves_one_version(emits):
    """Kills at random times, wherever they land (before the emit began writing, in any
    step, after it ended): each leaves the old package or the new one, as status says."""
    repo = str(emits["tmp"] / "timing")
    shutil.rmtree(repo, ignore_errors=True)
    shutil.copytree(emits["old"], repo)
    start = time.monotonic()
    proc = _emit_process(emits, repo)
    assert proc.wait() == 0, proc.stderr.read()
    whole = time.monotonic() - start
    rng = random.Random(57)
    for trial in range(4):
        repo = _fresh_repo(emits, "random-%d" % trial)
        proc = _emit_process(emits, repo)
        time.sleep(rng.uniform(0.5, 1.1) * whole)
        _kill(proc)
        _assert_one_version(emits, repo)
        _assert_next_emit_cleans_up(emits, repo)


def test_a_kept_check_and_a_withdrawal_are_transactions_too(emits):
    """The check kept in the plan, and the plan withdrawn (the package going with its last
    plan), rewrite the package the same way: nothing is left beside it."""

    class Check:
        def to_json(self):
            return {"pairs": 2, "app_speedup": 1.5}

    repo = _fresh_repo(emits, "withdraw")
    done = spack_emit.emit(Workspace(emits["ws"]), PACKAGE, repo_root=repo)
    spack_emit.record_check(done, Check())
    [row] = status(repo)
    assert row.stale == [] and row.measured_app_speedup == 1.5
    assert _state(repo)[1] == []
    assert spack_emit.withdraw(done) == []
    assert os.listdir(os.path.join(repo, "packages")) == [] and status(repo) == []


def test_status_reports_a_plan_that_package_py_does_not_build(emits):
    """The state the issue found after a kill (the new plan, the old package.py): status
    recomputes the plan's digest, and says stale, not current."""
    repo = _fresh_repo(emits, "mixed")
    directory = os.path.join(repo, "packages", PACKAGE)
    for name in ("r3-zen3.json", "r3-zen3-0.patch"):
        shutil.copyfile(os.path.join(emits["new"], "packages", PACKAGE, name), os.path.join(directory, name))
    [row] = status(repo)
    digest = Plan.from_json(json.load(open(os.path.join(directory, "r3-zen3.json")))).build_digest()
    assert row.stale[0].startswith("digest: r3-zen3.json builds %s, package.py names " % digest), row.stale
    assert "patch: the plan names r3-zen3-0.patch, package.py does not apply it" in row.stale
    rc, out, _ = r3_output("--workspace", emits["ws"], "status", "--repo", repo)
    assert rc == 1 and "current" not in out and "stale" in out
    assert "r3-heat target=zen3 is stale: digest: r3-zen3.json builds %s" % digest in out

    # the old plan, the new package.py: the other way round, stale all the same
    repo = _fresh_repo(emits, "mixed2")
    directory = os.path.join(repo, "packages", PACKAGE)
    shutil.copyfile(
        os.path.join(emits["new"], "packages", PACKAGE, "package.py"), os.path.join(directory, "package.py")
    )
    [row] = status(repo)
    assert row.stale[0].startswith("digest: r3-zen3.json builds "), row.stale
    assert "patch: package.py applies r3-zen3-0.patch for target=zen3, the plan does not name it" in row.stale
    assert "patch: r3-zen3-0.patch is missing" in row.stale

    # a plan that package.py names and that is gone
    os.remove(os.path.join(directory, "r3-zen3.json"))
    [row] = status(repo)
    assert row.target == "zen3" and row.stale[0].startswith("plan: package.py builds r3-zen3.json (digest ")


def test_a_snapshot_is_of_one_version_while_rewrites_swap_it(tmp_path):
    """A reader of the package (status) reads one version of its directory, though rewrites
    swap it meanwhile (threads here, processes in use)."""
    import threading

    directory = str(tmp_path / "packages" / "p")
    with pkgtxn.rewrite(directory) as stage:
        for name in ("package.py", "r3-a.json", "r3-a-0.patch"):
            open(os.path.join(stage, name), "w").write("0")
    stop = threading.Event()

    def writer():
        n = 0
        while not stop.is_set():
            n += 1
            with pkgtxn.rewrite(directory) as stage:
                for name in os.listdir(stage):
                    open(os.path.join(stage, name), "w").write(str(n))

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(300):
            files = pkgtxn.snapshot(directory)
            assert len(set(files.values())) == 1 and len(files) == 3, files
    finally:
        stop.set()
        thread.join()
    assert sorted(os.listdir(tmp_path / "packages")) == ["p"]
