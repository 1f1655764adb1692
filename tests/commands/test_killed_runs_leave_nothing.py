"""r3 killed with SIGKILL (an OOM killer, a batch system's walltime) takes what it started
with it: a record's build and application run, a Spack build. Nothing is left running:
each child leads a process group, watched by a shell that kills the group when r3 is gone
(``childoutput.GroupWatch``)."""

import os
import signal
import subprocess
import sys
import time

from conftest import REPO_ROOT
from r3cli import R3

HEAT = os.path.join(REPO_ROOT, "repos", "r3", "sources", "heat")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # (a zombie is gone for this purpose: it runs nothing)
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(predicate, most_s=60):
    """Polls until ``predicate()`` (a bound on a wait, not a measurement)."""
    end = time.monotonic() + most_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _kill_and_check(proc, pidfile, children):
    assert _wait_for(lambda: os.path.exists(pidfile) and len(open(pidfile).read().split()) == children)
    pids = [int(p) for p in open(pidfile).read().split()]
    assert all(_alive(p) for p in pids)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    try:
        assert _wait_for(lambda: not any(_alive(p) for p in pids)), [p for p in pids if _alive(p)]
    finally:
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def test_a_killed_record_leaves_no_build_running(tmp_path):
    pidfile = str(tmp_path / "pids")
    build = "echo $$ > %s; sleep 300 & echo $! >> %s; wait" % (pidfile, pidfile)
    proc = subprocess.Popen(
        R3 + ["--workspace", str(tmp_path / "ws"), "record", "--source", HEAT, "--build", build, "--run", "./heat 8 1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _kill_and_check(proc, pidfile, 2)


def test_a_killed_caller_of_a_grouped_child_leaves_it_nowhere(tmp_path):
    """The same for ``run_captured(group=True)``: Spack's calls and the check's runs."""
    pidfile = str(tmp_path / "pids")
    script = (
        "from spack_r3.childoutput import run_captured\n"
        "run_captured(['sh', '-c', 'echo $$ > %s; sleep 300 & echo $! >> %s; wait'], group=True)\n" % (pidfile, pidfile)
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    _kill_and_check(proc, pidfile, 2)


def test_a_replay_worker_goes_with_its_killed_r3(tmp_path):
    """A replay worker busy with a candidate sees no EOF on its requests until the candidate
    ends: it watches its parent instead, and takes its process group (the candidate) along.
    (Here a process forked from r3 keeps the worker's requests open, as a busy worker's
    would stay unread.)"""
    pidfile, holder = str(tmp_path / "pids"), str(tmp_path / "holder")
    script = (
        "import os, time\n"
        "from spack_r3.replay.server import ReplayServer\n"
        "server = ReplayServer()\n"
        "server.start()\n"
        "if os.fork() == 0:\n"
        "    open(%r, 'w').write(str(os.getpid()))\n"
        "    time.sleep(300)\n"
        "    os._exit(0)\n"
        "open(%r, 'w').write(str(server.proc.pid))\n"
        "time.sleep(300)\n" % (holder, pidfile)
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        _kill_and_check(proc, pidfile, 1)
    finally:
        if _wait_for(lambda: os.path.exists(holder) and open(holder).read(), 10):
            os.kill(int(open(holder).read()), signal.SIGKILL)
