"""The study journal under hostile input (issue 57): a torn last line, a file that is no
journal, a directory, a damaged line, a disk that fills mid-tune.

Every case runs the real ``r3`` in a process of its own on real files; the full disk is a
real one, a small tmpfs mounted in a mount namespace of the test's own (skipped where no
namespace may be made).
"""

import glob
import json
import os
import shutil
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

from spack_r3.search.store import journal
from r3cli import R3, r3_subprocess
from test_record_replay import r3, source_tree
from test_workspace_concurrency import MAIN_C, MAKEFILE, QUICK, SCALE_C

TUNE = ["tune", "--mutator", "none", "--workers", "1"] + QUICK


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, clang):
    """A workspace holding the capture of one small kernel (``scale``), never tuned."""
    tree = source_tree(tmp_path_factory, "scale", {"scale.c": SCALE_C, "main.c": MAIN_C, "Makefile": MAKEFILE})
    ws = str(tmp_path_factory.mktemp("scale-ws"))
    assert r3("--workspace", ws, "record", "--source", tree, "--run", "./scale", "--kernel", "scale") == 0
    return ws


def fresh_copy(recorded, tmp_path):
    ws = str(tmp_path / "ws")
    shutil.copytree(recorded, ws, symlinks=True)
    return ws


def lines_of(path):
    """The journal's lines, each checked whole and an entry."""
    with open(path, "rb") as f:
        data = f.read()
    assert data.endswith(b"\n")
    entries = [json.loads(line) for line in data.splitlines()]
    assert all("op_code" in e for e in entries)
    return entries


def trials_in(path):
    """{(study, number): (state, params, value)} of the journal at ``path`` (a copy: opening
    it may add a lock file beside it)."""
    store = journal(path)
    return {
        (s.study_name, t.number): (t.state, t.params or t.system_attrs.get("fixed_params"), t.value)
        for s in store.get_all_studies()
        for t in store.get_all_trials(s._study_id)
    }


def stamp(path):
    with open(path, "rb") as f:
        return f.read(), os.stat(path).st_mtime_ns


def one_error(proc, command="tune"):
    """The one error line of ``proc``'s stderr (progress lines aside)."""
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("r3 %s: " % command)]
    assert len(errors) == 1, proc.stderr
    return errors[0]


# --------------------------------------------------------------------------------------
# A torn last line is set aside, under the journal's lock, and the studies go on


def test_a_resumed_tune_sets_a_torn_tail_aside_and_goes_on(recorded, tmp_path):
    """The issue's case: 40 bytes cut off ``r3.journal`` (Optuna appended its next line to
    the torn one, and every run then failed). The torn bytes are kept beside the journal,
    one warning says so, and the study resumes from its whole lines."""
    ws = fresh_copy(recorded, tmp_path)
    first = r3_subprocess("--workspace", ws, *TUNE, "--budget", 2)
    assert first.returncode == 0, first.stderr
    path = os.path.join(ws, "r3.journal")
    with open(path, "rb") as f:
        cut = f.read()[:-40]
    with open(path, "wb") as f:
        f.write(cut)
    whole = cut[: cut.rfind(b"\n") + 1]

    again = r3_subprocess("--workspace", ws, *TUNE, "--budget", 3)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["kernels"][0]["evaluations"] == 3
    warned = [line for line in again.stderr.splitlines() if "torn line" in line]
    assert len(warned) == 1 and warned[0].startswith("r3: warning: the study journal %s" % path), again.stderr
    [aside] = glob.glob(path + ".torn-*")
    with open(aside, "rb") as f:
        assert f.read() == cut[len(whole) :]
    with open(path, "rb") as f:
        assert f.read().startswith(whole)
    lines_of(path)


def test_writers_at_once_on_a_torn_journal_set_it_aside_once_and_lose_nothing(tmp_path):
    """Four processes open a journal whose last line is torn and write to it at once: one
    sets the torn line aside (under the journal's lock), and every line each wrote is whole
    and kept, whatever order they ran in."""
    path = str(tmp_path / "s.journal")
    study = optuna.create_study(study_name="before", storage=journal(path))
    study.enqueue_trial({"x": 1})
    before = trials_in(path)
    torn = b'{"op_code":5,"worker_id":"gone","trial_id":0,"us'  # (a writer killed mid-line)
    with open(path, "ab") as f:
        f.write(torn)
    script = (
        "import sys, optuna\n"
        "from spack_r3.search.store import journal\n"
        "s = optuna.create_study(study_name=sys.argv[2], storage=journal(sys.argv[1]))\n"
        "for x in range(15):\n"
        "    s.enqueue_trial({'x': x})\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, path, "w%d" % i], stderr=subprocess.PIPE, text=True)
        for i in range(4)
    ]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errs
    assert sum(e.count("torn line") for e in errs) == 1, errs
    [aside] = glob.glob(path + ".torn-*")
    with open(aside, "rb") as f:
        assert f.read() == torn
    lines_of(path)
    after = trials_in(path)
    assert {k: v for k, v in after.items() if k[0] == "before"} == before
    for i in range(4):
        assert sorted(v[1]["x"] for k, v in after.items() if k[0] == "w%d" % i) == list(range(15))


def test_a_line_torn_after_the_journal_was_opened_is_set_aside_before_the_next_append(tmp_path):
    """A writer killed mid-line while another process has the journal open: that process's
    next change is not appended to the torn line (Optuna's own would be)."""
    path = str(tmp_path / "s.journal")
    study = optuna.create_study(study_name="s", storage=journal(path))
    study.enqueue_trial({"x": 1})
    with open(path, "ab") as f:
        f.write(b'{"op_code":5,"worker_id":"gone","study_id":0,"da')
    study.enqueue_trial({"x": 2})
    [aside] = glob.glob(path + ".torn-*")
    with open(aside, "rb") as f:
        assert f.read() == b'{"op_code":5,"worker_id":"gone","study_id":0,"da'
    lines_of(path)
    assert [v[1] for v in trials_in(path).values()] == [{"x": 1}, {"x": 2}]


# --------------------------------------------------------------------------------------
# What is no journal of ours is refused in one line, left as it is


def text_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"my own notes, no final newline..!")  # 33 bytes
    return str(path)


def json_lines(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": 2}\n')
    return str(path)


def fifo(tmp_path):
    path = str(tmp_path / "pipe")
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    "make, message",
    [
        (text_file, "is not a study journal of r3 (left as it is)"),
        (json_lines, "is not a study journal of r3 (left as it is)"),
        (fifo, "is not a regular file"),
        (lambda tmp_path: str(tmp_path), "is a directory: name a journal file"),
    ],
)
def test_a_storage_that_is_no_journal_is_refused_untouched(tmp_path, make, message):
    path = make(tmp_path)
    before = sorted(os.listdir(os.path.dirname(path)))
    kept = stamp(path) if os.path.isfile(path) else None
    proc = r3_subprocess("--workspace", tmp_path / "ws", "tune", "--storage", path, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("r3 tune: error: --storage %s " % path) and message in proc.stderr
    if kept:
        assert stamp(path) == kept
        assert sorted(os.listdir(os.path.dirname(path))) == before  # (no lock file, no journal beside it)


def test_a_damaged_line_inside_the_journal_is_one_line_and_the_journal_untouched(recorded, tmp_path):
    """A line in the middle that is no entry (not a torn tail): nothing can resume past
    it; the line says which, and the journal is left for the user to look at."""
    ws = fresh_copy(recorded, tmp_path)
    path = os.path.join(ws, "r3.journal")
    study = optuna.create_study(study_name="s", storage=journal(path))
    for x in range(3):
        study.enqueue_trial({"x": x})
    with open(path, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    lines[2] = lines[2][:20] + b"\x00garbage\n"
    with open(path, "wb") as f:
        f.write(b"".join(lines))
    kept, around = stamp(path), sorted(os.listdir(ws))
    proc = r3_subprocess("--workspace", ws, *TUNE, "--budget", 2, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert one_error(proc).startswith("r3 tune: error: the study journal %s does not read at line 3" % path)
    assert stamp(path) == kept and sorted(os.listdir(ws)) == around


# --------------------------------------------------------------------------------------
# A disk that fills mid-tune ends the run in one line, and the next run resumes


def namespace():
    """The ``unshare`` arguments of a mount namespace this process may make (root's own, or
    one in a user namespace), or None."""
    for argv in (["unshare", "-m"], ["unshare", "-Urm"]):
        try:
            if subprocess.run(argv + ["true"], capture_output=True, timeout=30).returncode == 0:
                return argv
        except (OSError, subprocess.TimeoutExpired):
            pass
    return None


# In the namespace: a tmpfs of 1 MiB holds the journal (--storage), filled up but for
# $ROOM bytes, room for the study and a few evaluations of the ten asked; once the run
# stops, the filler goes and the same tune runs again. ``timeout``: a run that spins is
# stopped and fails the test (it never decides a pass).
FULL_DISK = r"""
set -u
mount -t tmpfs -o size=1m tmpfs "$DISK" || exit 90
"$PY" -c 'import os, sys; s = os.statvfs(sys.argv[1]); open(os.path.join(sys.argv[1], "filler"), "wb").write(bytes(s.f_bavail * s.f_frsize - int(sys.argv[2])))' "$DISK" "$ROOM"
run() {
    timeout -s INT 120 "$PY" -m spack_r3.cli --workspace "$WS" $TUNE --storage "$DISK/s.journal" --budget 10 >"$OUT/$1.out" 2>"$OUT/$1.err"
    echo $? >"$OUT/$1.rc"
    cp "$DISK/s.journal" "$OUT/$1.journal"
}
run full
rm "$DISK/filler"
run resumed
ls -a "$DISK" >"$OUT/disk.ls"
"""


def test_a_disk_that_fills_mid_tune_ends_the_run_in_one_line_and_the_next_resumes(recorded, tmp_path):
    """The disk under the journal fills after a few evaluations: a thread of the study
    loop meets ENOSPC (claiming a trial, or telling one), and the run exits 2 in one line
    instead of asking again forever; the journal holds whole lines only (the append the
    disk refused is cut back off), every evaluation finished before is kept, and the run
    after, with room again, goes on from them to the budget."""
    unshare = namespace()
    if unshare is None:
        pytest.skip("no mount namespace may be made here (unshare -m, unshare -Urm)")
    ws, disk, out = fresh_copy(recorded, tmp_path), tmp_path / "disk", tmp_path / "out"
    disk.mkdir()
    out.mkdir()
    env = dict(os.environ, PY=sys.executable, WS=ws, DISK=str(disk), OUT=str(out), ROOM=str(16384), TUNE=" ".join(TUNE))
    proc = subprocess.run(unshare + ["sh", "-c", FULL_DISK], env=env, capture_output=True, text=True, timeout=700)
    if proc.returncode == 90:
        pytest.skip("no tmpfs may be mounted here: " + proc.stderr.strip())
    assert proc.returncode == 0, proc.stderr

    def result(name):
        with open(out / (name + ".rc")) as f:
            rc = int(f.read())
        with open(out / (name + ".out")) as f, open(out / (name + ".err")) as g:
            return subprocess.CompletedProcess(R3, rc, f.read(), g.read())

    full = result("full")
    assert full.returncode == 2, full.stderr
    assert one_error(full).startswith("r3 tune: error: No space left on device"), full.stderr
    lines_of(out / "full.journal")
    kept = {k: v for k, v in trials_in(str(out / "full.journal")).items() if v[0] == TrialState.COMPLETE}
    assert kept, "the disk filled before any evaluation: make ROOM larger"  # (so the loop's threads met it)

    resumed = result("resumed")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["kernels"][0]["evaluations"] == 10
    lines_of(out / "resumed.journal")
    after = trials_in(str(out / "resumed.journal"))
    assert {k: after[k] for k in kept} == kept
    with open(out / "disk.ls") as f:
        assert not [name for name in f.read().split() if ".torn-" in name]
