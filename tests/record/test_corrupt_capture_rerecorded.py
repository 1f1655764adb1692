"""A capture torn on disk is recorded again, not an error that blocks every later record.

The same call recorded again lands in the same capture folder (its id is its content's
digest); where what is there no longer reads or verifies (a cut capture.json, module.bc,
source copy or header copy), it is set aside and this recording takes its place."""

import glob
import os

import pytest

from spack_r3.capture import list_captures
from spack_r3.workspace import Workspace

from test_record_replay import DEMOS
from r3cli import r3, r3_subprocess


@pytest.mark.parametrize(
    "victim,keep",
    [("capture.json", 0), ("capture.json", 700), ("module.bc", 100), ("source.c", 40), ("headers/*", 10)],
)
def test_a_torn_capture_is_recorded_again(tmp_path, clang, capsys, monkeypatch, victim, keep):
    # One thread: the first parallel region starts OpenMP's threads inside the recorded call,
    # and which heap pages their start touches there (what the capture holds, its id) can
    # differ from run to run on a loaded machine.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    ws = str(tmp_path / "ws")
    argv = ("--workspace", ws, "record", "--source", os.path.join(DEMOS, "heat"), "--run", "./heat 64 4")
    assert r3(*argv, "--kernel", "jacobi_step") == 0
    (cdir,) = glob.glob(os.path.join(ws, "captures", "*", "capture.json"))
    (path,) = glob.glob(os.path.join(os.path.dirname(cdir), victim))
    with open(path, "r+b") as f:
        f.truncate(keep)
    capsys.readouterr()
    # a changed run command: no run to reuse, the same call recorded again
    assert r3(*argv[:-1], "./heat 64 4 ", "--kernel", "jacobi_step") == 0
    out, err = capsys.readouterr()
    assert "was corrupt" in err and "recorded again" in err, (out, err, os.listdir(os.path.join(ws, "captures")))
    corrupt = []
    assert [c.kernel for c in list_captures(Workspace(ws), corrupt)] == ["jacobi_step"] and corrupt == []
    assert glob.glob(os.path.join(ws, "captures", ".corrupt-*"))


def test_a_cut_header_copy_is_one_line_for_tune_not_a_compile_error(tmp_path, clang):
    """A source variant compiles against the capture's copies of the unit's headers: one
    cut there would make every variant "fail to compile"; the capture is refused instead."""
    ws = str(tmp_path / "ws")
    heat = os.path.join(DEMOS, "heat")
    assert r3("--workspace", ws, "record", "--source", heat, "--run", "./heat 64 4", "--kernel", "jacobi_step") == 0
    (header,) = glob.glob(os.path.join(ws, "captures", "*", "headers", "*"))
    with open(header, "r+b") as f:
        f.truncate(10)
    proc = r3_subprocess("--workspace", ws, "tune", "--kernel", "jacobi_step", "--budget", "2", timeout=600)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if "not tuned" in line]
    assert "heat.h" in line and "corrupt (checksum mismatch)" in line, proc.stdout
    last = proc.stderr.strip().splitlines()[-1]  # (and why nothing was tuned, where errors go)
    assert last.startswith("r3 tune: no kernel was tuned: jacobi_step: capture ") and "heat.h" in last
