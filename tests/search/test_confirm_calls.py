"""A candidate that goes wrong only from its Nth call is not confirmed.

Each evaluation runs its candidate in a process of its own, a few calls long, and the
candidate keeps its own state (a static counter here) from call to call within it. So a
candidate that hangs from its 10th call passes an evaluation that makes fewer calls; the
recorded run called the kernel 12 times, and confirmation makes as many calls in a row in
one process before it measures a candidate: there it hangs, is killed at the timeout and
rejected with the reason, and the other candidates are confirmed as usual.
"""

import os

import pytest

from spack_r3.capture import list_captures
from spack_r3.data import OK, TIMEOUT, Variant
from spack_r3.compile.pipeline import parse
from spack_r3.replay.server import ReplayServer
from spack_r3.search.bayes import Target
from spack_r3.search.confirm import confirm, consecutive_calls
from spack_r3.workspace import Workspace
from r3cli import r3

# HANG_FROM, when defined, makes the kernel spin forever from that call of its process on.
SMOOTH_C = r"""
#include <stdio.h>
#include <stdlib.h>
void smooth(long n, double *restrict a, const double *restrict b) {
#ifdef HANG_FROM
    static int calls;
    if (++calls >= HANG_FROM)
        for (;;) __asm__ volatile("");
#endif
    for (long i = 1; i < n - 1; i++) a[i] = 0.25 * (b[i - 1] + 2.0 * b[i] + b[i + 1]);
}
int main(void) {
    long n = 1 << 16;
    double *a = calloc(n, sizeof *a), *b = malloc(n * sizeof *b), s = 0;
    for (long i = 0; i < n; i++) b[i] = i % 9;
    for (int k = 0; k < 12; k++) smooth(n, a, b);
    for (long i = 0; i < n; i++) s += a[i];
    printf("%g\n", s);
    return 0;
}
"""
TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def smooth_capture(tmp_path_factory, clang):
    """smooth recorded (its first call of 12) in a fresh workspace: (workspace, capture directory)."""
    src = tmp_path_factory.mktemp("smooth") / "src"
    src.mkdir()
    (src / "smooth.c").write_text(SMOOTH_C)
    (src / "Makefile").write_text("prog: smooth.c\n\t$(CC) -O3 -o $@ $<\n")
    ws = str(tmp_path_factory.mktemp("smooth-ws"))
    assert r3("--workspace", ws, "record", "--source", str(src), "--run", "./prog", "--kernel", "smooth") == 0
    [cap] = [c for c in list_captures(Workspace(ws)) if c.kernel == "smooth"]
    return ws, os.path.join(ws, "captures", cap.id)


def hangs_from(n):
    return Variant(pipeline=parse("O3"), source_defines={"HANG_FROM": n})


def test_a_hang_from_the_10th_call_passes_an_evaluation_of_fewer_calls(smooth_capture, tmp_path):
    ws, cap = smooth_capture
    with ReplayServer(timeout=TIMEOUT_S, cache_dir=str(tmp_path / "cache")) as server:
        fewer = server.submit(cap, hangs_from(10), repeat=3)  # a verification run and 3 runs: 4 calls
        more = server.submit(cap, hangs_from(10), repeat=12)
        again = server.submit(cap, hangs_from(10), repeat=3)  # a new process: its counter starts again
    assert fewer.status == OK and fewer.verified, fewer.diagnostics
    assert more.status == TIMEOUT
    assert again.status == OK, again.diagnostics


def test_confirmation_rejects_it_with_the_reason_and_confirms_the_others(smooth_capture, tmp_path):
    ws, cap = smooth_capture
    assert consecutive_calls(cap, timeout=TIMEOUT_S, pairs=2) == 12  # the recorded run's calls
    target = Target("smooth", [cap])
    plain = Variant(pipeline=parse("O2"))
    with ReplayServer(timeout=TIMEOUT_S, cache_dir=str(tmp_path / "cache")) as server:
        [[hang, other]] = confirm(
            [server], [(target, [(hangs_from(10), 1.5), (plain, 1.1)])], rounds=1, pairs=2, timeout=TIMEOUT_S
        )
    assert hang.rejected.startswith("instance 1 of 1, 12 calls in a row: timeout"), hang.rejected
    assert not hang.ratios and hang.speedup is None  # never measured, so never a winner
    assert not other.rejected, other.rejected
    assert len(other.ratios) == 2 and other.speedup > 0
