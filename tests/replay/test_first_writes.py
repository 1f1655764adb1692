"""A candidate may not rely on what the recorded call found in memory it only writes.

Replay restores a call's memory before every run, so an output the application handed
over as fresh zeros is zeros at every run. A rewrite of dense's matmul in i-k-j order
that leaves out ``c[i*n+j] = 0`` then verifies against the recording, and in the
application (whose later calls find the last product there) fails the self-check. The
worker learns, once per capture, which bytes the kernel as built writes before reading
(replay.poison) and checks every candidate once more with them poisoned.
"""

import json
import os

import pytest

from spack_r3.capture import load_capture_dir
from spack_r3.data import OK, WRONG_OUTPUT, Variant
from spack_r3.replay.server import ReplayServer
from spack_r3.search.remix import kernel_source
from spack_r3.sourcepatch import make_patch

from test_record_replay import DEMOS, capture_of
from r3cli import flags, r3, r3_output

MATMUL = """void matmul(int n, const double *a, const double *b, double *c)
{
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            c[i * n + j] = 0.0;
            for (int k = 0; k < n; k++)
                c[i * n + j] += a[i * n + k] * b[k * n + j];
        }
    }
}"""
IKJ = """void matmul(int n, const double *a, const double *b, double *c)
{
%s    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++)
            for (int j = 0; j < n; j++)
                c[i * n + j] += a[i * n + k] * b[k * n + j];
}"""
ZEROED = "    for (int i = 0; i < n * n; i++)\n        c[i] = 0.0;\n"
# reads a row of c beyond the part it has written in this call: the row above's old value
READS_AHEAD = """void matmul(int n, const double *a, const double *b, double *c)
{
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            double s = i + 1 < n ? 0.0 * c[(i + 1) * n + j] : 0.0;
            for (int k = 0; k < n; k++)
                s += a[i * n + k] * b[k * n + j];
            c[i * n + j] = s;
        }
    }
}"""
# sums into a block it allocates and never clears: a block over glibc's largest mmap
# threshold (32 MiB) is fresh zero pages at every call, in the application too, until a
# heap with such a block free serves it
SCRATCH = """extern void *malloc(unsigned long);
extern void free(void *);
void matmul(int n, const double *a, const double *b, double *c)
{
    double *sum = malloc(sizeof(double) * n * n + (64L << 20));
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++)
            for (int j = 0; j < n; j++)
                sum[i * n + j] += a[i * n + k] * b[k * n + j];
    for (int i = 0; i < n * n; i++)
        c[i] = sum[i];
    free(sum);
}"""
AXPY = "void axpy(int n, double a, const double *x, double *y)\n{\n"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, clang):
    ws = str(tmp_path_factory.mktemp("first-writes"))
    demos = (("dense", "./dense 40 1", "matmul"), ("cg", "./cg 32 200", "axpy"))
    for demo, run, kernel in demos:
        argv = ("--workspace", ws, "record", "--source", os.path.join(DEMOS, demo), "--run", run, "--kernel", kernel)
        assert r3(*argv) == 0
    with ReplayServer(timeout=60) as server:
        yield ws, server


def variant(directory, old, new):
    src = kernel_source(load_capture_dir(directory), directory)
    assert old in src.text
    return Variant(source_patch=make_patch(src.text, src.text.replace(old, new, 1), src.filename))


def test_a_matmul_that_relies_on_fresh_zeros_is_wrong_output(workspace):
    ws, server = workspace
    directory = capture_of(ws, "matmul")
    ev = server.submit(directory, variant(directory, MATMUL, IKJ % ""), pairs=3)
    assert ev.status == WRONG_OUTPUT and not ev.verified, ev.diagnostics
    assert "relies on the initial contents" in ev.diagnostics and ev.speedup is None


def test_the_same_loop_order_that_zeroes_first_verifies(workspace):
    ws, server = workspace
    directory = capture_of(ws, "matmul")
    ev = server.submit(directory, variant(directory, MATMUL, IKJ % ZEROED), pairs=3)
    assert ev.status == OK and ev.verified, ev.diagnostics


def test_reading_an_output_before_writing_it_is_wrong_output(workspace):
    """Multiplied by zero, the old value changes nothing unless it is NaN or huge: the
    poison is both, so even this reliance shows."""
    ws, server = workspace
    directory = capture_of(ws, "matmul")
    ev = server.submit(directory, variant(directory, MATMUL, READS_AHEAD), pairs=0, repeat=2)
    assert ev.status == WRONG_OUTPUT and "relies on the initial contents" in ev.diagnostics, ev.diagnostics


def test_summing_into_scratch_it_never_cleared_is_wrong_output(workspace):
    ws, server = workspace
    directory = capture_of(ws, "matmul")
    ev = server.submit(directory, variant(directory, MATMUL, SCRATCH), pairs=3)
    assert ev.status == WRONG_OUTPUT and "memory it allocates" in ev.diagnostics, ev.diagnostics


def test_an_output_the_kernel_reads_is_not_poisoned(workspace):
    """axpy reads y before it writes it: the probe finds that the built kernel itself
    fails with y poisoned, so y is left as recorded and a faithful rewrite verifies."""
    ws, server = workspace
    directory = capture_of(ws, "axpy")
    ev = server.submit(directory, variant(directory, AXPY, AXPY + "    /* the same work */\n"), pairs=3)
    assert ev.status == OK and ev.verified, ev.diagnostics


# A first call that multiplies into zeros what is zeros (HPCCG's first HPC_sparsemv: A
# times the zero initial guess), returning 0; a candidate that skips the work verifies.
IDLE_C = r"""
#include <stdio.h>
#include <stdlib.h>
int scale(long n, const double *x, double *y) {
  for (long i = 0; i < n; i++) y[i] = 2.0 * x[i];
  return 0;
}
int main(void) {
  long n = 1 << 14;
  double *x = calloc(n, sizeof(double)), *y = calloc(n, sizeof(double)), s = 0.0;
  for (int k = 0; k < 10; k++) {
    scale(n, x, y);
    for (long i = 0; i < n; i++) x[i] = y[i] + 1.0;
    s += y[n / 2];
  }
  printf("%g\n", s);
  return 0;
}
"""


SKIPS = "int scale(long n, const double *x, double *y) {\n  return 0;\n}"
SCALE = (
    "int scale(long n, const double *x, double *y) {\n  for (long i = 0; i < n; i++) y[i] = 2.0 * x[i];\n  return 0;\n}"
)


def test_a_call_that_changed_nothing_is_no_capture_to_check_a_rewrite_against(tmp_path_factory, clang):
    """A rewrite that skips the work would verify on it: refused, naming why; the code as
    written still replays (a kernel that only checks and prints is such a call, mostly)."""
    from test_record_replay import source_tree
    from spack_r3.errors import RewriteUncheckable

    tree = source_tree(tmp_path_factory, "idle", {"idle.c": IDLE_C, "Makefile": "idle: idle.c\n\t$(CC) -O1 -o $@ $<\n"})
    first, cover = (str(tmp_path_factory.mktemp(n)) for n in ("idle-ws", "idle-cover-ws"))
    argv = ("record", "--source", tree, "--run", "./idle", "--kernel", "scale")
    assert r3("--workspace", first, *argv) == 0
    # recorded as r3 tune records (--instances cover: a first call of 8 or more is left out)
    assert r3("--workspace", cover, *argv, "--instances", "cover") == 0
    with ReplayServer(timeout=60) as server:
        idle = capture_of(first, "scale")
        assert server.submit(idle, Variant(), pairs=3).status == OK
        with pytest.raises(RewriteUncheckable, match="changed no memory replay compares"):
            server.submit(idle, variant(idle, SCALE, SKIPS), pairs=3)
        working = capture_of(cover, "scale")
        ev = server.submit(working, variant(working, SCALE, SKIPS), pairs=3)
        assert ev.status == WRONG_OUTPUT, ev.diagnostics
    # r3 tune on it: its pipelines are searched and confirmed as any kernel's, the rewrites
    # are left out with the reason (LULESH's hourglass force lost its 1.34x here, skipped whole)
    rc, out, err = r3_output("--workspace", first, "tune", *flags(kernel="scale", budget=6, confirm_pairs=3, json=True))
    assert rc in (0, 1), err
    assert "scale: no source rewrite is tried: capture" in err
    [kernel] = json.loads(out)["kernels"]
    assert kernel["kernel"] == "scale" and kernel["evaluations"] >= 3  # (its pipeline search)
