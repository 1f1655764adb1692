"""A hostile candidate costs one candidate and nothing else.

Each test rewrites heat's jacobi_step (an OpenMP kernel), recorded once, into a
candidate that cheats on the clock, forks, writes a file or allocates without bound,
and replays it through a real worker (real clang, llvmlite): the candidate fails, its
effect does not outlive it, and the same worker goes on with the next candidate.
"""

import json
import os
import subprocess
import sys
import uuid

import pytest

from spack_r3.capture import load_capture_dir
from spack_r3.data import CRASH, OK, WRONG_OUTPUT, Variant
from spack_r3.replay import confine
from spack_r3.replay.server import ReplayServer
from spack_r3.search.remix import kernel_source
from spack_r3.sourcepatch import make_patch

from test_record_replay import DEMOS, capture_of
from r3cli import flags, r3
from conftest import REPO_ROOT

# Where a container forbids seccomp the worker says so once and goes on with the process
# group and the memory limit only: a fork then outlives nothing, but is not refused.
SECCOMP = not confine.seccomp_missing(confine.probe())
OPENING = "void jacobi_step(int n, const double *restrict u, double *restrict v, double alpha)\n{\n"
PROTOS = (
    "extern int fork(void);\nextern unsigned int sleep(unsigned int);\nextern void _exit(int);\n"
    "extern int open(const char *, int, ...);\nextern long write(int, const void *, unsigned long);\n"
    "extern int close(int);\nextern int prctl(int, ...);\nextern void *malloc(unsigned long);\n"
)


@pytest.fixture(scope="module")
def heat(tmp_path_factory, clang):
    ws = str(tmp_path_factory.mktemp("confine-ws"))
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            *flags(source=os.path.join(DEMOS, "heat"), run="./heat 96 4", kernel="jacobi_step"),
        )
        == 0
    )
    directory = capture_of(ws, "jacobi_step")
    with ReplayServer(timeout=30, cache_dir=os.path.join(ws, "cache")) as server:
        yield directory, kernel_source(load_capture_dir(directory), directory), server


def rewrite(src, first_lines, helpers=""):
    """The kernel's unit with ``first_lines`` at the top of jacobi_step's body."""
    assert OPENING in src.text
    text = src.text.replace(OPENING, helpers + OPENING + first_lines, 1)
    return Variant(source_patch=make_patch(src.text, text, src.filename))


def alive(name):
    """Processes named (comm) ``name`` that still run: not a zombie, a killed process
    that its new parent has not reaped yet."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % pid) as f:
                stat = f.read()
        except OSError:
            continue
        comm, state = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2]
        if comm == name and state not in "ZX":
            found.append((int(pid), state))
    return found


def test_normal_candidates_still_verify_and_time(heat):
    directory, src, server = heat
    ev = server.submit(directory, rewrite(src, "    /* the same work, said again */\n"), pairs=3)
    assert ev.status == OK, ev.diagnostics
    assert ev.verified and len(ev.ratios) == 3 and ev.speedup > 0
    ev = server.submit(directory, Variant(), repeat=4, verify_runs=2)
    assert ev.status == OK and ev.repeat == 4, ev.diagnostics


@pytest.mark.parametrize(
    "cheat",
    [
        "    static long calls;\n    if (++calls > 1) return;\n",  # right on its first call only
        "    static unsigned long long t0;\n    unsigned long long now = __builtin_ia32_rdtsc();\n"
        # right until the cycle counter moves on from its first call (which a restore and a
        # check in Python, between any two calls, take far longer than)
        "    if (!t0) t0 = now;\n    if (now - t0 > 1000ULL) return;\n",
    ],
)
def test_a_candidate_right_only_while_verified_is_wrong_output(heat, cheat):
    directory, src, server = heat
    if "rdtsc" in cheat and os.uname().machine != "x86_64":
        pytest.skip("the cycle counter is x86's")
    for pairs, repeat in ((3, 5), (0, 5)):  # the search's paired timing, and plain timed runs
        ev = server.submit(directory, rewrite(src, cheat), pairs=pairs, repeat=repeat)
        assert ev.status == WRONG_OUTPUT, ev.diagnostics
        # caught at its first timed run's check, or before: at the checks with what it
        # only writes poisoned, which are runs after the first (replay.poison)
        assert ("once timed" in ev.diagnostics or "initial contents" in ev.diagnostics) and ev.speedup is None


def test_a_candidate_that_forks_leaves_no_process_behind(heat):
    directory, src, server = heat
    name = "r3t-" + uuid.uuid4().hex[:8]  # what the forked process would be called
    forks = (
        '    static int forked;\n    if (!forked++ && fork() == 0) {\n        prctl(15, "%s");\n'
        "        sleep(30);\n        _exit(0);\n    }\n" % name
    )
    ev = server.submit(directory, rewrite(src, forks, PROTOS), pairs=2)
    assert alive(name) == []
    if SECCOMP:
        assert ev.status == CRASH and "denied" in ev.diagnostics, ev.diagnostics
    assert server.submit(directory, Variant(), repeat=2).status == OK


@pytest.mark.skipif(not SECCOMP, reason="this kernel refuses a seccomp filter")
def test_a_candidate_that_writes_a_file_writes_nothing(heat, tmp_path):
    directory, src, server = heat
    path = tmp_path / "written-by-a-candidate"
    writes = (
        '    int fd = open("%s", 01 | 0100 | 01000, 0644);\n    if (fd >= 0) { write(fd, "x", 1); close(fd); }\n' % path
    )
    ev = server.submit(directory, rewrite(src, writes, PROTOS), pairs=2)
    assert ev.status == CRASH and "denied" in ev.diagnostics, ev.diagnostics
    assert not path.exists()


def test_an_unbounded_allocation_fails_that_candidate_only(heat):
    directory, src, server = heat
    grows = (
        "    for (;;) {  /* 64 MiB at a time, never freed, no NULL check */\n"
        "        char *p = malloc(1L << 26);\n"
        "        for (long o = 0; o < (1L << 26); o += 4096) p[o] = 1;\n    }\n"
    )
    ev = server.submit(directory, rewrite(src, grows, PROTOS), repeat=2)
    assert ev.status == CRASH and "SIGSEGV" in ev.diagnostics, ev.diagnostics
    assert server.submit(directory, Variant(), repeat=2).status == OK  # the same worker, the next candidate


REFUSING = r"""
import ctypes, json, os, struct, sys, time
from spack_r3.data import Variant
from spack_r3.replay.server import ReplayServer

# A filter on this process that refuses the seccomp call, inherited by the worker it
# starts: a container that forbids seccomp, as far as the worker can tell.
nr = {"x86_64": 317, "aarch64": 277}[os.uname().machine]
rows = [(0x20, 0, 0, 0), (0x15, 0, 1, nr), (0x06, 0, 0, 0x00050000 | 1), (0x06, 0, 0, 0x7FFF0000)]
raw = b"".join(struct.pack("=HBBI", *r) for r in rows)
buf = ctypes.create_string_buffer(raw, len(raw))
prog = struct.pack("=HxxxxxxQ", len(rows), ctypes.addressof(buf))
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0 and libc.prctl(22, 2, ctypes.c_char_p(prog)) == 0
directory, patch, name = sys.argv[1:4]
with ReplayServer(timeout=30) as server:
    forked = server.submit(directory, Variant(source_patch=patch), pairs=2)
    again = server.submit(directory, Variant(), repeat=2)
    print(json.dumps({"forked": forked.status, "again": again.status}))
"""


def test_where_seccomp_is_refused_the_group_is_still_killed_and_it_is_said_once(heat, tmp_path):
    directory, src, _ = heat
    name = "r3t-" + uuid.uuid4().hex[:8]
    forks = (
        '    static int forked;\n    if (!forked++ && fork() == 0) {\n        prctl(15, "%s");\n'
        "        sleep(30);\n        _exit(0);\n    }\n" % name
    )
    script = tmp_path / "refusing.py"
    script.write_text(REFUSING)
    root = REPO_ROOT
    proc = subprocess.run(
        [sys.executable, str(script), directory, rewrite(src, forks, PROTOS).source_patch, name],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=root),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"forked": OK, "again": OK}  # the fork was not refused
    assert alive(name) == []  # but its process went with its candidate's group
    assert proc.stderr.count("without a seccomp filter") == 1, proc.stderr


def test_a_write_where_the_recorded_call_never_wrote_is_a_wrong_output():
    """Replay maps whole pages around what the recording holds, and compares what the call
    wrote. A page the recorded call never touched must be as replay mapped it (zeros) after
    a run, whatever the tolerance: a candidate that wrote there computed something else."""
    import ctypes
    import mmap as mmap_module

    from spack_r3.replay import engine

    pages = mmap_module.mmap(-1, 3 * engine.PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(pages))
    recorded = [(base + engine.PAGE, base + engine.PAGE + 16)]  # 16 bytes in the middle page
    untouched = engine._minus([(base, base + 3 * engine.PAGE)], engine.page_ranges(recorded))
    assert untouched == [(base, base + engine.PAGE), (base + 2 * engine.PAGE, base + 3 * engine.PAGE)]
    prepared = engine.Prepared(capture=None, ir="", pre=[], post=[], slots=[], byval=[], untouched=untouched)
    assert engine.check(prepared, None, tolerance=None).verified
    pages[2 * engine.PAGE + 100] = 1
    for tolerance in (None, 1e300):
        checked = engine.check(prepared, None, tolerance)
        assert (
            not checked.verified
            and "0x%x, which the recorded call never touched" % (base + 2 * engine.PAGE + 100) in checked.detail
        )
    del prepared
