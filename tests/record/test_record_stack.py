"""Kernels whose arguments point into their callers' stack frames.

C passes local arrays (``double a[256]; kernel(a)``) and struct-return buffers, C++ passes
local objects by reference (``std::vector<double>& y`` living in main's frame and holding
heap pointers). The record runtime snapshots the main thread's stack from the lowest such
argument up to the stack top as one kind-4 region, in pre.bin and post.bin alike; replay
maps it at its recorded address, restores it and compares it.
"""

import json
import os
import struct

import pytest

from spack_r3.capture import list_captures
from spack_r3.data import OK, WRONG_OUTPUT, Variant
from spack_r3.memimage import KIND_HEAP, KIND_STACK, find_region, read_regions, region_bytes
from spack_r3.replay.server import ReplayServer
from spack_r3.workspace import Workspace

from test_record_replay import _rewrite_image
from r3cli import flags, r3

LOCALS_APP = r"""
#include <stdio.h>
#include <stdlib.h>

struct stats { double sum, min, max, mean; long n; };   /* 40 bytes: returned through sret */

/* the kernel and main share a unit: the probe wrapper must not be inlined into main */
void scale_into(double *local, double *heap, int n, double s) {
    for (int i = 0; i < n; i++) {
        local[i] = local[i] * s + i;
        heap[i] += local[i];
    }
}

struct stats summarize(const double *v, int n) {
    struct stats r = {0.0, v[0], v[0], 0.0, n};
    for (int i = 0; i < n; i++) {
        r.sum += v[i];
        if (v[i] < r.min) r.min = v[i];
        if (v[i] > r.max) r.max = v[i];
    }
    r.mean = r.sum / n;
    return r;
}

int main(void) {
    double a[256];
    int n = 256;
    double *h = malloc(n * sizeof *h);
    for (int i = 0; i < n; i++) { a[i] = i * 0.5; h[i] = 1.0 / (i + 1); }
    scale_into(a, h, n, 1.5);
    struct stats st = summarize(a, n);
    double s = 0;
    for (int i = 0; i < n; i++) s += a[i] + h[i];
    printf("%.6f %.3f %.3f %.3f\n", s, st.sum, st.min, st.max);
    free(h);
    return 0;
}
"""

BIG_FRAME_APP = r"""
#include <stdio.h>
#define N (10 * 1024 * 1024)   /* 80 MiB of doubles in main's frame */
void touch(double *v, long n) { for (long i = 0; i < n; i += 4096) v[i] += 1.0; }
int main(void) {
    double big[N];
    for (long i = 0; i < N; i += 4096) big[i] = (double)i;
    touch(big, N);
    printf("%g\n", big[4096]);
    return 0;
}
"""

SAXPY_H = r"""
#include <vector>
void saxpy(std::vector<double>& y, const std::vector<double>& x, double a);
"""

# The kernel body, by how it indexes the vectors.
SAXPY_BODIES = {
    "data": r"""
    double *py = y.data();
    const double *px = x.data();
    for (std::size_t i = 0; i < y.size(); i++)
        py[i] += a * px[i];
""",
    "index": r"""
    for (std::size_t i = 0; i < y.size(); i++)
        y[i] += a * x[i];
""",
}

SAXPY_MAIN = r"""
#include <cstdio>
#include <vector>
#include "saxpy.h"
int main() {
    std::vector<double> x(1000), y(1000);   // objects on main's stack, elements in the heap
    for (std::size_t i = 0; i < x.size(); i++) { x[i] = 0.5 * i; y[i] = 1.0 / (i + 1); }
    saxpy(y, x, 2.5);
    double s = 0;
    for (double v : y) s += v;
    std::printf("%.6f\n", s);
    return 0;
}
"""

SAXPY_MAKEFILE = (
    "CXX ?= clang++\n"
    "saxpy_app: main.o saxpy.o\n\t$(CXX) -O2 -o saxpy_app main.o saxpy.o\n"
    "%.o: %.cpp saxpy.h\n\t$(CXX) -O2 -c $< -o $@\n"
)


def captures(ws):
    return {c.kernel: os.path.join(ws, "captures", c.id) for c in list_captures(Workspace(ws))}


def stack_region(path):
    regions = [r for r in read_regions(path) if r.kind == KIND_STACK]
    assert len(regions) == 1, regions
    return regions[0]


def run_log(ws):
    runs = os.listdir(os.path.join(ws, "runs"))
    assert len(runs) == 1
    return os.path.join(ws, "runs", runs[0])


@pytest.fixture(scope="module")
def c_locals(tmp_path_factory, clang):
    src = tmp_path_factory.mktemp("locals-src")
    (src / "app.c").write_text(LOCALS_APP)
    (src / "Makefile").write_text("app: app.c\n\t$(CC) -O2 -o app app.c\n")
    ws = str(tmp_path_factory.mktemp("locals-ws"))
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            *flags(source=src, run="./app", kernel=["scale_into", "summarize"]),
        )
        == 0
    )
    return ws


def test_pointer_to_a_local_array_is_recorded_as_a_stack_region(c_locals):
    cap = captures(c_locals)["scale_into"]
    meta = json.load(open(os.path.join(cap, "capture.json")))
    local, heap = int(meta["args"][0], 16), int(meta["args"][1], 16)
    pre, post = os.path.join(cap, "pre.bin"), os.path.join(cap, "post.bin")
    stack = stack_region(pre)
    # one region from the local array (rounded down to 16 bytes) to the top of the stack
    assert stack.addr == local & ~15 and stack.end > local + 256 * 8
    # ... that is, to the outermost frame: argv and the environment above it are not recorded
    assert stack.size < 64 << 10 and stack.end % 16 == 0
    assert b"R3_RECORD_DIR" not in region_bytes(pre, stack)
    post_stack = stack_region(post)
    assert (post_stack.addr, post_stack.size) == (stack.addr, stack.size)
    # the heap array is an arena chunk as before
    assert find_region(read_regions(pre), heap).kind == KIND_HEAP
    # the kernel's writes through the local pointer are in post.bin, not in pre.bin
    off = local - stack.addr
    before = struct.unpack_from("<256d", region_bytes(pre, stack), off)
    after = struct.unpack_from("<256d", region_bytes(post, post_stack), off)
    assert before[3] == 1.5 and after[3] == 1.5 * 1.5 + 3


def test_stack_capture_replays_and_verifies(c_locals):
    caps = captures(c_locals)
    with ReplayServer() as server:
        for kernel in ("scale_into", "summarize"):  # summarize returns its struct through sret
            ev = server.submit(caps[kernel], Variant(), repeat=2)
            assert ev.status == OK and ev.verified, (kernel, ev.diagnostics)


def test_sret_buffer_is_covered_by_the_stack_region(c_locals):
    cap = captures(c_locals)["summarize"]
    meta = json.load(open(os.path.join(cap, "capture.json")))
    sret = int(meta["args"][0], 16)
    post = os.path.join(cap, "post.bin")
    stack = stack_region(post)
    assert stack.addr <= sret < stack.end
    sum_, mn, mx, mean, n = struct.unpack_from("<4dq", region_bytes(post, stack), sret - stack.addr)
    assert n == 256 and mn == 0.0 and mx > mn and mean == pytest.approx(sum_ / 256)


def test_altered_stack_region_fails_verification(c_locals, tmp_path):
    import shutil

    cap = str(tmp_path / "scale_into")
    shutil.copytree(captures(c_locals)["scale_into"], cap)
    local = int(json.load(open(os.path.join(cap, "capture.json")))["args"][0], 16)

    def bump_local(regions):
        for addr, kind, data in regions:
            if kind == KIND_STACK:
                off = local - addr + 10 * 8
                data[off : off + 8] = struct.pack("<d", 1234.5)

    _rewrite_image(cap, "post.bin", bump_local)
    with ReplayServer() as server:
        ev = server.submit(cap, Variant(), repeat=1)
    assert ev.status == WRONG_OUTPUT and not ev.verified and ev.mismatched_bytes > 0, ev


def test_kernel_needing_over_64mib_of_stack_is_not_captured_with_one_warning(tmp_path, clang):
    src = tmp_path / "big"
    src.mkdir()
    (src / "big.c").write_text(BIG_FRAME_APP)
    (src / "Makefile").write_text("big: big.c\n\t$(CC) -O1 -o big big.c\n")
    ws = str(tmp_path / "ws")
    assert (
        r3("--workspace", ws, "record", "--source", src, "--run", "ulimit -s 262144 && ./big", "--kernel", "touch") == 0
    )
    with open(os.path.join(run_log(ws), "run.log")) as f:
        warnings = [l for l in f if "r3-record runtime" in l]
    assert len(warnings) == 1 and "64 MiB" in warnings[0] and "touch" in warnings[0]
    assert "touch" not in captures(ws)  # a capture without its stack would not replay


def _record_saxpy(tmp_path, body):
    src = tmp_path / "saxpy"
    src.mkdir()
    (src / "saxpy.h").write_text(SAXPY_H)
    (src / "saxpy.cpp").write_text(
        '#include "saxpy.h"\nvoid saxpy(std::vector<double>& y, const std::vector<double>& x, double a) {%s}\n' % body
    )
    (src / "main.cpp").write_text(SAXPY_MAIN)
    (src / "Makefile").write_text(SAXPY_MAKEFILE)
    ws = str(tmp_path / "ws")
    # R3_CXX: the launcher in front of the clang++ beside the record clang
    assert (
        r3("--workspace", ws, "record", "--source", src, "--run", "./saxpy_app", "--build", 'make CXX="$R3_CXX"') == 0
    )
    return ws


@pytest.mark.parametrize("body", ["data", "index"])  # index: std::vector::operator[] is a linkonce_odr callee
def test_cxx_vectors_passed_by_reference(tmp_path, capsys, clang, body):
    ws = _record_saxpy(tmp_path, SAXPY_BODIES[body])
    with open(os.path.join(run_log(ws), "build.log")) as f:
        build = f.read()
    assert "clang++" in build and "not recorded" not in build and "without probes" not in build
    capsys.readouterr()
    assert r3("--workspace", ws, "kernels", "--json") == 0
    kernels = [e["kernel"] for e in json.loads(capsys.readouterr().out)]
    assert kernels == ["_Z5saxpyRSt6vectorIdSaIdEERKS1_d"]  # only the plain external function
    cap = captures(ws)[kernels[0]]
    meta = json.load(open(os.path.join(cap, "capture.json")))
    y, x = int(meta["args"][0], 16), int(meta["args"][1], 16)
    stack = stack_region(os.path.join(cap, "pre.bin"))
    assert stack.addr <= min(x, y) and max(x, y) + 24 <= stack.end  # both vector objects
    with ReplayServer() as server:
        ev = server.submit(cap, Variant(), repeat=2)
    assert ev.status == OK and ev.verified, ev.diagnostics
