"""A variant becomes code through one function, ``stages.optimized_module``: IR edits, an
optional Polly stage (opt of the record clang's LLVM), then llvmlite's pipeline. Replay
compiles every candidate through it, and so will a build of a tuned unit.

Each test reads as one thing a user does: spell a Polly pipeline, replay a dense loop
nest with Polly, meet a machine without the Polly tools, and re-schedule an OpenMP loop.
Nothing here depends on the CPU's vector width or on timing.
"""

import os
import re

import llvmlite.binding as llvm
import pytest

from spack_r3 import toolchain
from spack_r3.capture import load_capture_dir
from spack_r3.data import COMPILE_ERROR, OK, Launch, Pipeline, Variant
from spack_r3.errors import PipelineError, ToolchainError
from spack_r3.compile.module import apply_launch_edits
from spack_r3.compile.pipeline import format_spec, parse
from spack_r3.replay.server import ReplayServer
from spack_r3.compile.stages import CompileError, KernelIR, dispatch_loops, optimized_module, polly_available

from test_record_replay import capture_of, r3

# A naive triple loop on fixed-size arrays: the loop nest Polly tiles (and recognizes as a
# matrix product). Its values are multiples of 1/8, so every summation order is exact.
MATMUL_C = r"""
#include <stdio.h>
#include <stdlib.h>
#define N 64
void matmul(double a[N][N], double b[N][N], double c[N][N]) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < N; k++) s += a[i][k] * b[k][j];
            c[i][j] = s;
        }
}
int main(void) {
    double (*a)[N] = malloc(sizeof(double[N][N])), (*b)[N] = malloc(sizeof(double[N][N]));
    double (*c)[N] = malloc(sizeof(double[N][N]));
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) { a[i][j] = (i + 2 * j) % 7 * 0.5; b[i][j] = (3 * i + j) % 5 * 0.25; }
    matmul(a, b, c);
    printf("%g\n", c[N - 1][N - 1]);
    return 0;
}
"""

# A reduction over a loop the OpenMP runtime schedules (schedule(dynamic): clang calls
# __kmpc_dispatch_init), and a static loop, whose code computes its own bounds. Integer
# values in doubles: the reduction is exact in any order, whatever the schedule.
OMP_C = r"""
#include <stdio.h>
#include <stdlib.h>
double dot(int n, const double *x, const double *y) {
    double s = 0.0;
#pragma omp parallel for schedule(dynamic) reduction(+ : s)
    for (int i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}
void scale(int n, double *x, double f) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) x[i] *= f;
}
int main(void) {
    int n = 100000;
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), total = 0.0;
    for (int i = 0; i < n; i++) { x[i] = i % 7; y[i] = i % 5; }
    scale(n, y, 2.0);
    total += dot(n, x, y);
    printf("%.1f\n", total);
    return 0;
}
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, clang):
    """One workspace with the matrix product and the OpenMP kernels (a team of two)."""
    root = tmp_path_factory.mktemp("stages")
    ws = str(root / "ws")
    for name, text, flags, kernels in (("mm", MATMUL_C, "", ["matmul"]), ("omp", OMP_C, "-fopenmp", ["dot", "scale"])):
        src = root / name
        src.mkdir()
        (src / (name + ".c")).write_text(text)
        (src / "Makefile").write_text("%s: %s.c\n\t$(CC) -O2 %s -o %s %s.c\n" % (name, name, flags, name, name))
        argv = ["--workspace", ws, "record", "--source", src, "--run", "./" + name]
        for k in kernels:
            argv += ["--kernel", k]
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("OMP_NUM_THREADS", "2")
            assert r3(*argv) == 0
    return ws


def kernel_ir(cap):
    """The kernel of a capture as the stages take it (what the replay worker builds too)."""
    capture = load_capture_dir(cap)
    with open(os.path.join(cap, "module.bc"), "rb") as f:
        bitcode = f.read()
    return KernelIR.from_bitcode(
        capture.kernel, bitcode, recorded_globals=[g["name"] for g in capture.globals], clang=capture.compile_command[0]
    )


@pytest.fixture(scope="module")
def native():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def test_polly_pipeline_specs_round_trip_and_errors():
    for spec in (
        "O3,polly=1",
        "O3,polly=1,polly_tile=64",
        "O3,polly=1,polly_tile=0,polly_matmul=0",
        "O2,vectorize=0,noalias=1,polly=1,polly_vec=stripmine",
    ):
        p = parse(spec)
        assert p.polly and format_spec(p) == spec
        assert Pipeline.from_json(p.to_json()) == p
    p = parse("O3,polly=1,polly_tile=32,polly_matmul=0,polly_vec=stripmine")
    assert (p.polly_tile, p.polly_matmul, p.polly_vectorizer) == (32, False, "stripmine")
    assert parse("O3,polly=1").polly_tile is None  # Polly's own tile size
    assert not parse("O3").polly and not Pipeline().polly
    for spec, needle in (
        ("O3,polly_tile=64", "need polly=1"),
        ("O3,polly=0,polly_matmul=0", "need polly=1"),
        ("O3,polly=1,polly_vec=avx", "expected none or stripmine"),
        ("O3,polly=1,polly_tile=-8", "expected 0..4096"),
        ("O3,polly=maybe", "expected 0 or 1"),
    ):
        with pytest.raises(PipelineError) as err:
            parse(spec)
        assert needle in str(err.value) and "\n" not in str(err.value)


def test_launch_schedule_and_chunk_travel_with_the_variant():
    v = Variant(launch=Launch(threads=4, schedule="guided", chunk=16))
    assert Variant.from_json(v.to_json()) == v
    assert Launch.from_json({"threads": 2}) == Launch(threads=2)  # older records: as compiled


def test_polly_variant_of_a_matrix_product_replays_verified(recorded, polly, native):
    cap = capture_of(recorded, "matmul")
    assert polly_available(load_capture_dir(cap).compile_command[0])  # what the search asks
    with ReplayServer() as server:
        for spec in ("O3,polly=1", "O3,polly=1,polly_tile=16,polly_matmul=0", "O2,polly=1,polly_tile=0"):
            ev = server.submit(cap, Variant(pipeline=parse(spec)), repeat=1)
            assert ev.status == OK and ev.verified and ev.compiled, (spec, ev.diagnostics)
    # The same function gives a build the module replay measured: Polly's loops are in it.
    mod = optimized_module(kernel_ir(cap), parse("O3,polly=1,polly_matmul=0"))
    assert "polly." in str(mod)
    assert "polly." not in str(optimized_module(kernel_ir(cap), parse("O3")))


def test_polly_without_its_tools_is_a_compile_error(recorded, clang, monkeypatch, tmp_path, native):
    cap = capture_of(recorded, "matmul")
    version = toolchain.clang_major(load_capture_dir(cap).compile_command[0])

    def none_here(*args, **kw):
        raise ToolchainError("not found: opt-%d" % version)

    monkeypatch.setattr(toolchain, "find_llvm_tools", none_here)
    with pytest.raises(CompileError) as err:
        optimized_module(kernel_ir(cap), parse("O3,polly=1"))
    assert str(err.value).startswith("polly needs opt-%d" % version)
    assert not polly_available(load_capture_dir(cap).compile_command[0])  # the search leaves Polly out
    # The worker looks where R3_LLVM_TOOLS says: an empty directory holds no opt.
    empty = tmp_path / "no-llvm-tools"
    empty.mkdir()
    monkeypatch.setenv("R3_LLVM_TOOLS", str(empty))
    with ReplayServer() as server:
        ev = server.submit(cap, Variant(pipeline=parse("O3,polly=1")), repeat=1)
        assert ev.status == COMPILE_ERROR and not ev.compiled
        assert ev.diagnostics.startswith("polly needs opt-%d" % version) and "\n" not in ev.diagnostics
        assert "llvm-%d" % version in ev.diagnostics  # and what to install
        assert server.submit(cap, Variant(), repeat=1).ok  # nothing else needs them


def test_dynamic_schedule_loop_replays_under_other_schedules(recorded, native):
    dot, scale = capture_of(recorded, "dot"), capture_of(recorded, "scale")
    unit = kernel_ir(dot)
    assert dispatch_loops(unit.ir) == 1  # schedule(dynamic): the runtime decides, editable
    assert dispatch_loops(kernel_ir(scale).ir) == 0  # schedule(static): compiled in, left alone

    def schedule_of(module):
        """(kind, chunk) the loop asks the runtime for; the modifier bits (monotonic,
        nonmonotonic: 1 << 29, 1 << 30) stay as compiled."""
        call = re.search(r"@__kmpc_dispatch_init_4\((.*)\)", str(module)).group(1).split(", ")
        return int(call[2].split()[-1]) & ~(3 << 29), int(call[6].split()[-1])

    # kmp_sch_guided_chunked (36) with chunks of 4; a chunked static schedule is kind 33
    assert schedule_of(optimized_module(unit, Pipeline(), Launch(schedule="guided", chunk=4))) == (36, 4)
    assert schedule_of(optimized_module(unit, Pipeline(), Launch(schedule="static", chunk=16))) == (33, 16)
    assert schedule_of(apply_launch_edits(unit.ir, "static")) == (34, 1)  # static, even split
    assert schedule_of(unit.ir) == (35, 1)  # as compiled: dynamic, chunks of 1
    with pytest.raises(CompileError) as err:
        optimized_module(unit, Pipeline(), Launch(schedule="fastest"))
    assert "schedule=fastest" in str(err.value)
    with ReplayServer() as server:
        for launch in (
            Launch(schedule="guided", chunk=4),
            Launch(schedule="static", chunk=16),
            Launch(schedule="static"),
            Launch(chunk=64),
            Launch(schedule="dynamic", threads=1),
        ):
            ev = server.submit(dot, Variant(launch=launch), repeat=1)
            assert ev.status == OK and ev.verified, (launch, ev.diagnostics)
        ev = server.submit(dot, Variant(launch=Launch(schedule="fastest")), repeat=1)  # the launch reached it
        assert ev.status == COMPILE_ERROR and ev.diagnostics.startswith("schedule=fastest: expected static")
        # a kernel without such loops takes a schedule as a no-op
        ev = server.submit(scale, Variant(launch=Launch(schedule="guided", chunk=4)), repeat=1)
        assert ev.status == OK and ev.verified, ev.diagnostics
