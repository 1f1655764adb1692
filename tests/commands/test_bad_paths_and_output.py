"""Hostile input, round 2 (issue 57, items 7 and 8): a child that prints without end costs r3
no memory beyond a bounded head and tail; a bad path the user gives, a count out of any sane
range, a run that records nothing, a corrupt file and a cluster nobody listens at are each
one line and exit 2, naming what to fix. Each test runs the real CLI on real files."""

import errno
import os
import socket
import subprocess
import sys

import pytest

from conftest import REPO_ROOT
from r3cli import R3, flags, r3_subprocess
from spack_r3 import cli
from spack_r3.childoutput import KEEP_BYTES, LINE_BYTES
from spack_r3.commands import kernels as kernels_command

HEAT = os.path.join(REPO_ROOT, "repos", "r3", "sources", "heat")
PRINTED = 100 << 20  # bytes a child prints: what r3 held whole before (it peaked ~4x this)
SLACK_KB = 48 << 10  # what the bounded head and tail, and the chunks in flight, may add

# --- item 7: a chatty child -----------------------------------------------------------

PEAK = r"""
import resource, subprocess, sys
with open(sys.argv[1], "wb") as err:
    rc = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=err).returncode
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def r3_peak(tmp_path, name, *argv):
    """The CLI in a process of its own: (exit code, its stderr's last line, the largest
    resident set of it and its children in KiB, the size of its stderr)."""
    err = tmp_path / (name + ".err")
    out = subprocess.run(
        [sys.executable, "-c", PEAK, str(err)] + R3 + [str(a) for a in argv],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    size = err.stat().st_size
    with open(err, "rb") as f:
        f.seek(max(0, size - 8192))
        last = f.read().decode(errors="replace").rstrip("\n").rsplit("\n", 1)[-1]
    return int(out[0]), last, int(out[1]), size


def make_empty_tree(directory):
    src = directory / "src"
    src.mkdir()
    (src / "Makefile").write_text("all:\n")
    return src


@pytest.fixture(scope="module")
def baseline_kb(tmp_path_factory, clang):
    """The peak of a record whose run fails at once, printing nothing."""
    tmp = tmp_path_factory.mktemp("baseline")
    argv = ("--workspace", tmp / "ws", "record", *flags(source=make_empty_tree(tmp), build="true", run="exit 1"))
    rc, _, peak, _ = r3_peak(tmp, "small", *argv)
    assert rc == 2
    return peak


ENDLESS_LINE = "head -c %d /dev/zero | tr '\\0' x; exit 1" % PRINTED
LINES_THEN_ERROR = "yes %s | head -c %d; echo; echo 'heat.c:3:1: error: the diagnostic at the end'; exit 3" % (
    "y" * 1999,
    PRINTED,
)


@pytest.mark.parametrize(
    "name, options, log, message",
    [
        ("build", dict(build=ENDLESS_LINE, run="true"), "build.log", "the record build failed with exit code 1: xxx"),
        ("run", dict(build="true", run=ENDLESS_LINE), "run.log", "the application run failed with exit code 1: xxx"),
        ("profiling", dict(build="true", run=ENDLESS_LINE, top=1), "profile.log", "run failed with exit code 1: xxx"),
        (
            "lines",
            dict(build="true", run=LINES_THEN_ERROR),
            "run.log",
            "failed with exit code 3: heat.c:3:1: error: the diagnostic at the end",
        ),
    ],
)
def test_a_child_that_prints_without_end_costs_bounded_memory(tmp_path, baseline_kb, name, options, log, message):
    """100 MB in one line with no newline (or in lines, then the error), shown as it comes
    (no --json): streamed whole to the log, and r3 grows by no more than the bounded head
    and tail it keeps for the one-line failure (before: ~4x the output, MemoryError at 300 MB)."""
    ws = tmp_path / "ws"
    rc, last, peak, err_size = r3_peak(
        tmp_path, name, "--workspace", ws, "record", *flags(source=make_empty_tree(tmp_path), **options)
    )
    assert rc == 2 and last.startswith("r3 record: error: ") and message in last, last
    assert len(last) < 1000  # the line cut to its ends
    assert peak - baseline_kb < SLACK_KB, "r3 grew by %d MiB printing %d MiB" % (
        (peak - baseline_kb) >> 10,
        PRINTED >> 20,
    )
    logs = [os.path.join(d, log) for d in (ws / "runs").iterdir() if os.path.exists(os.path.join(d, log))]
    assert max(os.path.getsize(p) for p in logs) >= PRINTED  # everything, in the log
    if "xxx" in message:  # the endless line, echoed cut to its first bytes
        assert err_size < 64 * LINE_BYTES


def test_output_captured_from_a_child_is_kept_within_bounds(tmp_path):
    """What a ``spack`` process or a timed application run prints (run_captured): the head
    and the tail of each stream, in memory no larger than those."""
    script = r"""
import resource, sys
from spack_r3.childoutput import run_captured
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cmd = "head -c %d /dev/zero | tr '\\0' o; head -c %d /dev/zero | tr '\\0' e >&2; echo; echo last words"
r = run_captured(cmd % (int(sys.argv[1]), int(sys.argv[1])), shell=True, stdout_head=int(sys.argv[2]))
print(r.returncode, len(r.stdout), len(r.stderr), r.stdout.endswith("last words\n"),
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""
    out = subprocess.run(
        [sys.executable, "-c", script, str(PRINTED), str(4 << 20)], capture_output=True, text=True, check=True
    ).stdout.split()
    rc, kept_out, kept_err, ends_with_last, grew_kb = int(out[0]), int(out[1]), int(out[2]), out[3], int(out[4])
    assert rc == 0 and ends_with_last == "True"
    assert kept_out <= (4 << 20) + KEEP_BYTES + 100 and kept_err <= 2 * KEEP_BYTES + 100
    assert grew_kb < SLACK_KB


def test_spack_output_is_kept_within_bounds(tmp_path, spack_root):
    """Spack.run (recipe builds, installs, tests) through a real ``spack python``."""
    script = r"""
import resource, sys
from spack_r3.spack.runner import MAX_STDOUT, Spack
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
r = Spack().run("python", "-c", "import sys; [sys.stdout.write('x' * (1 << 20)) for _ in range(%d)]; print('end')" % int(sys.argv[1]))
print(r.returncode, len(r.stdout) <= MAX_STDOUT + (2 << 20), r.stdout.endswith("end\n"),
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""
    out = subprocess.run(
        [sys.executable, "-c", script, str(2 * PRINTED >> 20)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[:3] == ["0", "True", "True"], out
    # the head of stdout a spec's JSON may need (16 MiB), as bytes and as text; before: ~3x 200 MiB
    assert int(out[3]) < SLACK_KB + (64 << 10), "r3 grew by %d MiB" % (int(out[3]) >> 10)


def test_a_build_log_of_an_endless_line_is_parsed_by_its_ends(tmp_path, spack_root):
    """A Spack build log (recipe builds, installs) longer than MAX_PARSED_LOG: Spack's log
    parser gets its two ends, and finds the error at the end."""
    from spack_r3.spack.runner import MAX_PARSED_LOG, Spack

    log = tmp_path / "spack-build-out.txt"
    with open(log, "wb") as f:
        for _ in range(2 * MAX_PARSED_LOG >> 20):
            f.write(b"x" * (1 << 20))
        f.write(b"\nmain.c:3:1: error: the diagnostic at the end\nmake: *** [all] Error 1\n")
    events = Spack().parse_log(str(log))
    assert any("the diagnostic at the end" in e.get("text", "") for e in events), events


# --- item 8 (a): paths the user gives -------------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A workspace with one capture of the heat demo (jacobi_step)."""
    from spack_r3.toolchain import find_clang
    from spack_r3.errors import ToolchainError

    try:
        find_clang()
    except ToolchainError as err:
        pytest.skip(str(err))
    ws = tmp_path_factory.mktemp("recorded") / "ws"
    proc = r3_subprocess("--workspace", ws, "record", *flags(source=HEAT, run="./heat 48 2", kernel="jacobi_step"))
    assert proc.returncode == 0, proc.stderr
    (cid,) = os.listdir(ws / "captures")
    return ws, cid


def copy_of(recorded, tmp_path):
    import shutil

    ws, cid = recorded
    shutil.copytree(ws, tmp_path / "ws", symlinks=True)
    return tmp_path / "ws", cid


def one_line(proc):
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    return proc.stderr


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--workspace", "/proc/x/ws", "record", "--source", HEAT, "--run", "true"], "--workspace /proc/x/ws"),
        (["--workspace", "{file}/ws", "record", "--source", HEAT, "--run", "true"], "--workspace {file}/ws"),
        (["--workspace", "/proc/x", "tune"], "--workspace /proc/x"),
        (["emit", "r3-heat", "--repo", "/proc/x"], "--repo /proc/x"),
        (["emit", "r3-heat", "--repo", "{file}"], "--repo {file} is not a directory"),
        (["mep", "jacobi_step", "-o", "/proc/x/y"], "-o /proc/x/y"),
        (["mep", "jacobi_step", "-o", "{file}"], "-o {file} is not a directory"),
        (["mep", "jacobi_step", "-o", "{file}/y"], "-o {file}/y cannot be created: {file} is not a directory"),
        (["tune", "--repo", "/proc/x"], "--repo /proc/x"),
        (["recipe", "somepkg", "--repo", "/proc/x"], "--repo /proc/x"),
        (["status", "--repo", "/proc/x"], "--repo /proc/x does not exist"),
    ],
)
def test_a_path_the_user_gives_that_cannot_be_used_is_one_line(recorded, tmp_path, argv, named):
    """/proc/x (no directory can be made there, by root either), a regular file where a
    directory goes: one line naming the path, before any work, not an internal error."""
    ws, _ = recorded
    (tmp_path / "file").write_text("a regular file\n")
    argv = [a.format(file=tmp_path / "file") for a in argv]
    if argv[0] != "--workspace":
        argv = ["--workspace", str(ws)] + argv
    err = one_line(r3_subprocess(*argv))
    assert named.format(file=tmp_path / "file") in err
    assert not os.path.exists(tmp_path / "file" / "y")


@pytest.mark.parametrize(
    "where, under_path",
    [("{repo}", True), ("{repo}/packages/x", True), ("{ws}/captures/x", False)],
)
def test_an_os_error_on_a_path_the_user_gave_is_one_line(tmp_path, monkeypatch, capsys, where, under_path):
    """The command line's net for whatever a check before the work cannot foresee: an
    OSError on a path given (or under one) is the user's, one line naming it; one on the
    workspace's own files stays a bug of ours (exit 3, its traceback logged)."""
    repo, ws = tmp_path / "repo", tmp_path / "ws"
    filename = where.format(repo=repo, ws=ws)

    def refused(args):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), filename)

    monkeypatch.setattr(kernels_command, "kernels", refused)
    args = cli.argparse.Namespace(r3_command="kernels", workspace=str(ws), repo=str(repo))
    rc = cli.dispatch(args)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    if under_path:
        assert rc == 2 and err == "r3 kernels: error: Not a directory (%s): cannot use --repo %s\n" % (filename, repo)
    else:
        assert rc == cli.INTERNAL_ERROR and "internal error" in err


# --- item 8 (b): counts -------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["replay", "anything", "--threads", "100000000"],
            "--threads 100000000 is too many: at most %d" % (64 * os.cpu_count()),
        ),
        (["replay", "anything", "--repeat", "100000000"], "--repeat 100000000 is too many"),
        (["replay", "anything", "--pairs", "100000000"], "--pairs 100000000 is too many"),
        (["replay", "anything", "--teams", str(1 << 40)], "--teams %d is too many" % (1 << 40)),
        (["replay", "anything", "--thread-limit", "100000"], "--thread-limit 100000 is too many: at most 1024"),
        (["tune", "--budget", "100000000"], "--budget 100000000 is too many"),
        (["tune", "--confirm-rounds", "100000"], "--confirm-rounds 100000 is too many"),
        (["tune", "--kernels-at-once", "100000"], "--kernels-at-once 100000 is too many"),
        (["tune", "--check-pairs", "-1"], "--check-pairs must be at least 0"),
        (["tune", "--seed", str(1 << 40)], "--seed must be in [0, 2**32)"),
        (["tune", "--instances", "100000000"], "--instances 100000000 is too many calls"),
        (["record", "--source", ".", "--run", "true", "--top", "100000000"], "--top 100000000 is too many"),
        (["retarget", "--gpu", "sm_90", "--threads", "100000"], "--threads 100000 is too many: at most 1024"),
        (["recipe", "somepkg", "--max-attempts", "100000"], "--max-attempts 100000 is too many"),
    ],
)
def test_counts_beyond_any_sane_bound_are_refused_in_one_line(tmp_path, argv, message):
    err = one_line(r3_subprocess("--workspace", tmp_path / "ws", *argv))
    assert message in err


# --- item 8 (c): a run that records nothing ---------------------------------------------


@pytest.mark.parametrize(
    "run, why",
    [("true", "no process of 'true' loaded the record runtime"), ("./heat 0 0 || true", "called none of them")],
)
def test_a_run_that_executes_no_recorded_kernel_says_so_not_the_build(tmp_path, clang, run, why):
    err = one_line(r3_subprocess("--workspace", tmp_path / "ws", "record", *flags(source=HEAT, run=run)))
    assert "the run executed no recorded kernel: the build was fine" in err and why in err
    assert "did not compile and link" not in err


# --- item 8 (d): corrupt files ----------------------------------------------------------


def test_an_empty_capture_json_is_corrupt_not_unknown(recorded, tmp_path):
    ws, cid = copy_of(recorded, tmp_path)
    meta = ws / "captures" / cid / "capture.json"
    meta.write_text("")
    by_kernel = one_line(r3_subprocess("--workspace", ws, "replay", "jacobi_step"))
    assert "corrupt" in by_kernel and str(meta) in by_kernel and "capture.json is empty" in by_kernel
    by_prefix = one_line(r3_subprocess("--workspace", ws, "mep", cid[:6], "-o", tmp_path / "mep"))
    assert "capture %s is corrupt: capture.json is empty (%s)" % (cid, meta) in by_prefix


@pytest.mark.parametrize("content", ["", '{"kernel": ', "[]", "{}"])
def test_a_corrupt_results_file_is_corrupt_not_no_result(recorded, tmp_path, content):
    ws, cid = copy_of(recorded, tmp_path)
    (ws / "results").mkdir()
    result = ws / "results" / (cid + ".json")
    result.write_text(content)
    err = one_line(r3_subprocess("--workspace", ws, "mep", "jacobi_step", "-o", tmp_path / "mep", "--variant"))
    assert "the tuning result %s is corrupt" % result in err and "no tuning result" not in err


# --- item 8 (e): a cluster nobody listens at --------------------------------------------


def test_a_cluster_address_nothing_listens_at_fails_at_once(tmp_path):
    pytest.importorskip("distributed")
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = "tcp://127.0.0.1:%d" % port
    # (Dask's client asks again for 60 s; the limit here only keeps a regression from hanging)
    err = one_line(r3_subprocess("--workspace", tmp_path / "ws", "tune", "--cluster", spec, timeout=50))
    assert "--cluster %s: no Dask scheduler answers there (Connection refused)" % spec in err


def test_a_cluster_address_without_a_port_is_one_line(tmp_path):
    pytest.importorskip("distributed")
    err = one_line(r3_subprocess("--workspace", tmp_path / "ws", "tune", "--cluster", "tcp://127.0.0.1"))
    assert "give the scheduler as tcp://HOST:PORT" in err
