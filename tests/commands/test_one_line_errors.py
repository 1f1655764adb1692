"""Whatever goes wrong, the user reads one line and gets a non-zero exit; a traceback, where
there is one, goes to a log file that the line names."""

import os
import resource
import signal
import subprocess
import sys

import pytest

from conftest import REPO_ROOT
from spack_r3 import cli
from spack_r3.commands import kernels as kernels_command
from r3cli import flags

HEAT = os.path.join(REPO_ROOT, "repos", "r3", "sources", "heat")


def r3_limited(*argv, file_bytes):
    """The CLI in a process whose files may not grow past ``file_bytes`` (as on a disk that
    fills up: writes past it fail with EFBIG)."""

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))

    return subprocess.run(
        [sys.executable, "-m", "spack_r3.cli"] + [str(a) for a in argv],
        capture_output=True,
        text=True,
        preexec_fn=limit,
    )


def test_a_bug_of_ours_is_one_line_and_a_log_with_its_traceback(tmp_path, monkeypatch, capsys):
    def broken(args):
        return {}["no such key"]

    monkeypatch.setattr(kernels_command, "kernels", broken)
    assert cli.main(["--workspace", str(tmp_path / "ws"), "kernels"]) == cli.INTERNAL_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("r3 kernels: internal error: KeyError: 'no such key'")
    log = err.split("traceback in ")[1].split(")")[0]
    assert log.startswith(str(tmp_path / "ws" / "logs"))
    with open(log) as f:
        assert "Traceback" in f.read() and "in broken" in open(log).read()


def test_a_disk_that_refuses_writes_is_one_line(tmp_path, clang):
    proc = r3_limited(
        "--workspace", tmp_path / "ws", "record", "--source", HEAT, "--run", "./heat 48 2", file_bytes=2000
    )  # the copy of the tree fails
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("r3 record: error: File too large")


def test_a_disk_that_fills_mid_tune_is_one_line_and_loses_nothing_finished(tmp_path, clang):
    ws = tmp_path / "ws"
    assert (
        r3_limited(
            "--workspace",
            ws,
            "record",
            *flags(source=HEAT, run="./heat 48 2", kernel="jacobi_step"),
            file_bytes=1 << 30,
        ).returncode
        == 0
    )
    for file_bytes in (0, 3000):  # nothing more fits; the search's first writes fit, later ones do not
        proc = r3_limited("--workspace", ws, "tune", "--budget", 4, "--mutator", "none", file_bytes=file_bytes)
        assert proc.returncode != 0 and proc.stderr.count("\n") == 1, proc.stderr
        assert "Traceback" not in proc.stderr
    listed = r3_limited("--workspace", ws, "kernels", file_bytes=1 << 30)
    assert listed.returncode == 0 and "jacobi_step" in listed.stdout


@pytest.mark.parametrize(
    "argv, message",
    [
        (["replay", "anything", "--pairs", "-1"], "--pairs must be at least 0"),
        (["replay", "anything", "--timeout", "-1"], "--timeout must be above 0"),
        (["replay", "anything", "--threads", "-4"], "--threads must be at least 1"),
        (["replay", "anything", "--tolerance", "-1"], "--tolerance must be at least 0"),
        (["replay", "anything", "--pipeline", "O3,cpu=notacpu"], "cpu=notacpu: LLVM knows no such CPU"),
        (["replay", "anything", "--pipeline", "O3,features=+garbage"], "LLVM knows no feature garbage"),
        (["record", "--source", ".", "--run", "true", "--timeout", "-1"], "--timeout must be above 0"),
        (["record", "--source", ".", "--run", "true", "--tolerance", "-1"], "--tolerance must be at least 0"),
        (["tune", "--kernels-at-once", "0"], "--kernels-at-once must be at least 1"),
        (["tune", "--tolerance", "-1"], "--tolerance must be at least 0"),  # the same check as record's
        (["tune", "--timeout", "0"], "--timeout must be above 0"),
    ],
)
def test_values_out_of_range_are_refused_in_one_line(tmp_path, clang, argv, message, capsys):
    assert cli.main(["--workspace", str(tmp_path / "ws")] + argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("r3.journal", b"garbage{{{\n", "the study journal"),
        ("r3.journal", bytes(range(256)) * 4, "the study journal"),
        ("r3.db", b"SQLite format 3\x00" + b"\x07" * 500, "the study database"),
    ],
)
def test_a_damaged_study_store_is_one_line(tmp_path, name, content, message):
    from spack_r3.errors import R3Error
    from spack_r3.search.store import storage
    from spack_r3.workspace import Workspace

    ws = Workspace(str(tmp_path / "ws")).ensure()
    (tmp_path / "ws" / name).write_bytes(content)
    with pytest.raises(R3Error, match=message) as err:
        storage(ws)
    assert "\n" not in str(err.value) and "move it aside" in str(err.value)


def test_a_read_only_workspace_is_one_line(tmp_path, clang):
    """The workspace bound read-only in a mount namespace of the test's own (root only)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    if subprocess.run(["unshare", "-m", "mount", "--bind", str(ws), str(ws)], capture_output=True).returncode:
        pytest.skip("no mount namespace for this user here")
    r3 = "%s -m spack_r3.cli --workspace %s" % (sys.executable, ws)
    script = (
        "mount --bind {ws} {ws} && mount -o remount,ro,bind {ws} && {r3} record --source {heat} --run './heat 32 2'"
    ).format(ws=ws, r3=r3, heat=HEAT)
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("r3 record: error: Read-only file system (%s" % ws)
