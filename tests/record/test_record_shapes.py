"""Shapes of real HPC code that record and replay must handle.

A benchmark file with its kernel next to ``main``, where ``main`` calls a timer
library and an allocator of another unit (as PolyBench's benchmarks call
polybench.c); C++ methods and functions with OpenMP regions, whose outlined code
calls the C++ runtime; and kernels whose result depends on library state the
recording does not keep (``rand``), which replay refuses with that reason; kernels
handed a string literal or another unit's global array (data of the executable, not of
the heap or a stack), and a kernel that returns memory it allocates, which replay refuses.
"""

import json
import os

import pytest

from spack_r3.capture import list_captures, load_capture_dir
from spack_r3.data import OK, Variant
from spack_r3.errors import R3Error
from spack_r3.memimage import KIND_CONST, KIND_GLOBAL, read_regions
from spack_r3.record.libstate import unreplayable_reason
from spack_r3.replay.libraries import cxx_runtime
from spack_r3.compile.module import declared_functions, extract_kernel
from spack_r3.replay.server import ReplayServer
from spack_r3.workspace import Workspace

from test_record_replay import r3, r3_subprocess

SUPPORT_H = r"""
void timer_start(void);
void timer_stop(void);
void timer_print(void);
double *bench_alloc(int n);
double bench_noise(void);
"""

SUPPORT_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "support.h"
static double t_start, t_stop;
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
void timer_start(void) { t_start = now(); }
void timer_stop(void) { t_stop = now(); }
void timer_print(void) { fprintf(stderr, "time %0.6f\n", t_stop - t_start); }
double *bench_alloc(int n) { return calloc((size_t)n, sizeof(double)); }
double bench_noise(void) { return rand() / (double)RAND_MAX; }
"""

# The benchmark file: its kernels and main share the unit, main calls support.c.
BENCH_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include "support.h"

/* random data: libc's generator state is not in the capture */
static void init_array(int n, double *a, double *x) {
    for (int i = 0; i < n; i++) {
        x[i] = (double)rand() / RAND_MAX;
        for (int j = 0; j < n; j++) a[i * n + j] = (double)((i * j + 1) % n) / n;
    }
}

/* the same, through a function of another unit */
static void perturb(int n, double *x) {
    for (int i = 0; i < n; i++) x[i] += 1e-3 * bench_noise();
}

static void kernel_gemv(int n, const double *a, const double *x, double *y) {
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int j = 0; j < n; j++) s += a[i * n + j] * x[j];
        y[i] = s;
    }
}

int main(void) {
    int n = 120;
    double *a = bench_alloc(n * n), *x = bench_alloc(n), *y = bench_alloc(n);
    srand(42);
    init_array(n, a, x);
    perturb(n, x);
    timer_start();
    kernel_gemv(n, a, x, y);
    timer_stop();
    timer_print();
    printf("%.6f\n", y[n / 2]);
    free(a); free(x); free(y);
    return 0;
}
"""

BENCH_MAKEFILE = (
    "bench: bench.o support.o\n\t$(CC) -O2 -o bench bench.o support.o\n%.o: %.c support.h\n\t$(CC) -O2 -c $< -o $@\n"
)

SMOOTH_H = r"""
#include <vector>
class Smoother {
  public:
    explicit Smoother(double w) : w_(w) {}
    // not noexcept: a call from an OpenMP region gets clang's terminate cleanup
    double mix(double left, double mid, double right) const { return w_ * mid + 0.5 * (1.0 - w_) * (left + right); }
    void apply(std::vector<double>& out, const std::vector<double>& in) const;
  private:
    double w_;
};
void rescale(std::vector<double>& v, double s);
"""

SMOOTH_CPP = r"""
#include "smooth.h"
void Smoother::apply(std::vector<double>& out, const std::vector<double>& in) const {
    const long n = (long)in.size();
#pragma omp parallel for
    for (long i = 1; i < n - 1; i++)
        out[i] = mix(in[i - 1], in[i], in[i + 1]);
}

void rescale(std::vector<double>& v, double s) {
#pragma omp parallel for
    for (long i = 0; i < (long)v.size(); i++)
        v.at(i) *= s;   // at() may throw std::out_of_range, from libstdc++
}
"""

SMOOTH_MAIN = r"""
#include <cstdio>
#include <vector>
#include "smooth.h"
int main() {
    std::vector<double> a(4096), b(4096);
    for (std::size_t i = 0; i < a.size(); i++) a[i] = (double)(i % 17) / 16.0;
    Smoother s(0.25);
    for (int step = 0; step < 3; step++) { s.apply(b, a); s.apply(a, b); }
    rescale(a, 2.0);
    double sum = 0;
    for (double v : a) sum += v;
    std::printf("%.6f\n", sum);
    return 0;
}
"""

SMOOTH_MAKEFILE = (
    "CXX ?= clang++\n"
    "smooth: main.o smooth.o\n\t$(CXX) -O2 -fopenmp -o smooth main.o smooth.o\n"
    "%.o: %.cpp smooth.h\n\t$(CXX) -O2 -fopenmp -c $< -o $@\n"
)

APPLY = "_ZNK8Smoother5applyERSt6vectorIdSaIdEERKS2_"
RESCALE = "_Z7rescaleRSt6vectorIdSaIdEEd"


def _tree(root, files):
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def captures(ws):
    return {c.kernel: os.path.join(ws, "captures", c.id) for c in list_captures(Workspace(ws))}


@pytest.fixture(scope="module")
def bench(tmp_path_factory, clang):
    src = _tree(
        tmp_path_factory.mktemp("bench") / "src",
        {"support.h": SUPPORT_H, "support.c": SUPPORT_C, "bench.c": BENCH_C, "Makefile": BENCH_MAKEFILE},
    )
    ws = str(tmp_path_factory.mktemp("bench-ws"))
    assert r3("--workspace", ws, "record", "--source", src, "--run", "./bench") == 0  # every loop kernel
    return ws


def test_kernel_next_to_main_replays_without_what_main_calls(bench, capsys):
    cap = captures(bench)["kernel_gemv"]
    with open(os.path.join(cap, "module.bc"), "rb") as f:
        ir = extract_kernel(f.read(), "kernel_gemv", [])
    # main's callees (timer_*, bench_alloc in support.c) are not what the kernel needs
    assert declared_functions(ir) == []
    capsys.readouterr()
    assert r3("--workspace", bench, "replay", cap, "--repeat", 2, "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == OK and out["verified"] is True


def test_kernel_calling_rand_is_recorded_but_refused_by_replay(bench, capsys):
    caps = captures(bench)
    for kernel in ("init_array", "perturb"):  # rand called directly, and from support.c
        cap = load_capture_dir(caps[kernel])
        assert cap.unreplayable == unreplayable_reason(["rand"])
        assert cap.app["calls"] == 1 and cap.app["share"] is not None  # its hotness still counts
        proc = r3_subprocess("--workspace", bench, "replay", caps[kernel])
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and "wrong" not in proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines() == [
            "r3 replay: error: capture %s: %s cannot replay: it calls rand, whose library state "
            "(the random-number generator) the recording does not keep" % (cap.id, kernel)
        ]
    # the unit's record says so for the kernel that calls rand itself
    tu_dirs = os.path.join(bench, "runs", os.listdir(os.path.join(bench, "runs"))[0], "record", "tus")
    reasons = {}
    for tu in os.listdir(tu_dirs):
        with open(os.path.join(tu_dirs, tu, "tu.json")) as f:
            reasons.update({k["name"]: k["unreplayable"] for k in json.load(f)["kernels"]})
    assert "rand" in reasons["init_array"] and reasons["kernel_gemv"] is None
    # r3 kernels shows which captures replay refuses
    capsys.readouterr()
    assert r3("--workspace", bench, "kernels") == 0
    refused = [l for l in capsys.readouterr().out.splitlines() if "cannot replay" in l]
    assert sorted(l.split()[0] for l in refused) == sorted(os.path.basename(caps[k]) for k in ("init_array", "perturb"))
    # and so does the API the search calls, before running anything
    with ReplayServer() as server, pytest.raises(R3Error, match="init_array cannot replay"):
        server.submit(caps["init_array"], Variant(), repeat=1)


def test_stateful_library_calls_are_named_with_their_state():
    assert unreplayable_reason(["sqrt", "memcpy", "printf", "rand_r"]) is None  # state in memory, or none
    reason = unreplayable_reason(["omp_get_wtime", "__isoc99_fscanf", "fopen"])
    assert reason == (
        "it calls __isoc99_fscanf, fopen, omp_get_wtime, whose library state "
        "(the clock, the input it reads) the recording does not keep"
    )


def test_cxx_runtime_follows_the_compile_command():
    assert cxx_runtime(["/usr/bin/clang-19", "-O2", "-c", "a.c"], "a.c") == []
    assert [s for s, _ in cxx_runtime(["clang++-19", "-O2", "-c", "a.cpp"])] == ["libstdc++.so.6", "libgcc_s.so.1"]
    libcxx = [s for s, _ in cxx_runtime(["clang++", "-stdlib=libc++", "-c", "a.cpp"])]
    assert "libc++.so.1" in libcxx and "libc++abi.so.1" in libcxx
    assert cxx_runtime(["cc", "-x", "c++", "-c", "a.inc"], "a.inc")  # a C++ unit by -x, not by its name


def test_cxx_openmp_kernels_replay_with_the_cxx_runtime(tmp_path, clang):
    src = _tree(
        tmp_path / "smooth",
        {"smooth.h": SMOOTH_H, "smooth.cpp": SMOOTH_CPP, "main.cpp": SMOOTH_MAIN, "Makefile": SMOOTH_MAKEFILE},
    )
    ws = str(tmp_path / "ws")
    assert r3("--workspace", ws, "record", "--source", src, "--run", "./smooth", "--build", 'make CXX="$R3_CXX"') == 0
    caps = captures(ws)
    assert set(caps) == {APPLY, RESCALE}
    with ReplayServer() as server:
        for kernel, cap in caps.items():
            with open(os.path.join(cap, "module.bc"), "rb") as f:
                needs = declared_functions(extract_kernel(f.read(), kernel, []))
            # what the outlined regions call: the C++ runtime, beside the OpenMP runtime
            assert "__gxx_personality_v0" in needs and "__cxa_begin_catch" in needs, needs
            ev = server.submit(cap, Variant(), repeat=2)
            assert ev.status == OK and ev.verified, (kernel, ev.diagnostics)


# XSBench's shapes: center_print("RESULTS", 79) gets a literal of the executable's read-only
# data, and grid_init_do_not_profile returns a struct of pointers to arrays it mallocs.
TABLES_C = "double coeffs[512];\n"

REPORT_C = r"""
#include <stdio.h>
#include <stdlib.h>
extern double coeffs[512];

typedef struct { double *grid; int *index; long n; } Grid;

int count_vowels(const char *s, int width) {
    int n = 0;
    for (const char *p = s; *p; p++)
        n += *p == 'a' || *p == 'e' || *p == 'i' || *p == 'o' || *p == 'u';
    return n * 100 + width;
}

void scale_table(double *t, int n, double s) {
    for (int i = 0; i < n; i++) t[i] = t[i] * s + 1.0;
}

Grid grid_init(long n) {
    Grid g = {malloc(n * sizeof(double)), aligned_alloc(64, n * sizeof(int)), n};
    for (long i = 0; i < n; i++) { g.grid[i] = 0.5 * i; g.index[i] = (int)(n - i); }
    return g;
}

typedef struct Node { struct Node *prev; double value; } Node;

Node *build_chain(long n) {  /* more blocks than the runtime's list of new blocks holds */
    Node *last = NULL;
    double **gaps = malloc(n * sizeof(double *));
    for (long i = 0; i < n; i++) {
        Node *node = malloc(sizeof(Node));
        node->prev = last;
        node->value = 0.5 * i;
        last = node;
        gaps[i] = malloc(3 * sizeof(double));  /* freed below: the nodes are not next to each other */
    }
    for (long i = 0; i < n; i++) free(gaps[i]);
    free(gaps);
    return last;
}

double smooth_sum(const double *x, long n) {  /* a scratch block, freed before it returns */
    double *tmp = malloc(n * sizeof(double)), s = 0.0;
    for (long i = 1; i < n - 1; i++) tmp[i] = (x[i - 1] + x[i] + x[i + 1]) / 3.0;
    for (long i = 1; i < n - 1; i++) s += tmp[i];
    free(tmp);
    return s;
}

int main(void) {
    for (int i = 0; i < 512; i++) coeffs[i] = 0.25 * i;
    Grid g = grid_init(4096);
    int v = count_vowels("Developed at Argonne National Laboratory", 79);
    scale_table(coeffs, 512, 1.5);
    Node *chain = build_chain(5000);
    printf("%d %.3f %.3f %d %.1f\n", v, coeffs[100], smooth_sum(g.grid, g.n), g.index[7], chain->prev->value);
    return 0;
}
"""

REPORT_MAKEFILE = (
    "report: report.o tables.o\n\t$(CC) -O2 -o report report.o tables.o\n%.o: %.c\n\t$(CC) -O2 -c $< -o $@\n"
)


@pytest.fixture(scope="module")
def report(tmp_path_factory, clang):
    src = _tree(
        tmp_path_factory.mktemp("report") / "src",
        {"report.c": REPORT_C, "tables.c": TABLES_C, "Makefile": REPORT_MAKEFILE},
    )
    ws = str(tmp_path_factory.mktemp("report-ws"))
    assert r3("--workspace", ws, "record", "--source", src, "--run", "./report") == 0
    return ws


def test_kernels_given_the_executables_own_data_replay(report):
    caps = captures(report)
    literal = [r for r in read_regions(os.path.join(caps["count_vowels"], "pre.bin")) if r.kind == KIND_CONST]
    assert len(literal) == 1 and literal[0].size >= len("Developed at Argonne National Laboratory") + 1
    assert not [r for r in read_regions(os.path.join(caps["count_vowels"], "post.bin")) if r.kind == KIND_CONST]
    scaled = load_capture_dir(caps["scale_table"])
    table = int(scaled.args[0], 16)
    assert any(
        r.kind == KIND_GLOBAL and r.addr == table and r.size >= 512 * 8
        for r in read_regions(os.path.join(caps["scale_table"], "post.bin"))
    )  # compared: the kernel writes it
    with ReplayServer() as server:
        for kernel in ("count_vowels", "scale_table", "smooth_sum"):
            ev = server.submit(caps[kernel], Variant(), repeat=2)
            assert ev.status == OK and ev.verified, (kernel, ev.diagnostics)


def test_a_kernel_returning_memory_it_allocates_is_refused_with_the_reason(report):
    caps = captures(report)
    cap = load_capture_dir(caps["grid_init"])
    assert cap.memory["left_blocks"] == 2 and cap.memory["left_bytes"] >= 4096 * 12
    assert cap.unreplayable.startswith("it leaves 2 pointer(s) to memory it allocated (2 block(s)")
    proc = r3_subprocess("--workspace", report, "replay", caps["grid_init"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "grid_init cannot replay: it leaves 2 pointer(s)" in proc.stderr
    # 5000 blocks, more than the runtime lists as it goes: found by walking the heap instead
    chain = load_capture_dir(caps["build_chain"])
    assert chain.memory["left_blocks"] == 5000 and chain.memory["left_bytes"] >= 5000 * 16
    assert len(chain.memory["left"]) > 256  # ranges apart from each other: the list grew
    assert chain.unreplayable.startswith("it leaves 1 pointer(s) to memory it allocated (5000 block(s)")
    # a block allocated and freed within the call leaves nothing behind
    smooth = load_capture_dir(caps["smooth_sum"])
    assert smooth.memory["left_blocks"] == 0 and smooth.unreplayable is None
