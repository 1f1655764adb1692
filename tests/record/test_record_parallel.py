"""Record the shapes of OpenMP proxy apps: a hot function called inside a parallel loop,
a driver whose parallel loop has a dynamic schedule and a reduction, a heap far larger
than what the kernels touch, and a kernel that reads input into the heap.

The hot function is captured in a snapshot process (one thread's call, with what it
touches, including the caller's locals on that thread's stack and the driver's locals on
the main thread's stack); the driver in the application's own process, its pages tracked.
"""

import json
import os
import subprocess

import pytest

from spack_r3.capture import list_captures
from spack_r3.data import Launch, Variant
from spack_r3.memimage import KIND_RUNTIME, KIND_STACK, read_regions
from spack_r3.record.instrument import KFLAG_RUNTIME_STATE, KernelInfo, kernel_flags
from spack_r3.replay.server import ReplayServer
from spack_r3.workspace import Workspace

from test_record_replay import r3

XS_C = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { long n; double *energy; double *xs; } grid_t;

static unsigned long hash(unsigned long x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdUL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53UL; x ^= x >> 33;
  return x;
}

/* binary search, then interpolate 5 channels into out[] (a local array of the caller) */
void lookup(const grid_t *g, double e, double *out) {
  long lo = 0, hi = g->n - 1;
  while (hi - lo > 1) {
    long mid = (lo + hi) / 2;
    if (g->energy[mid] > e) hi = mid; else lo = mid;
  }
  double f = (e - g->energy[lo]) / (g->energy[hi] - g->energy[lo]);
  for (int c = 0; c < 5; c++) out[c] = g->xs[lo * 5 + c] + f * (g->xs[hi * 5 + c] - g->xs[lo * 5 + c]);
}

void simulate(const grid_t *g, long lookups, double *results) {
  unsigned long verification = 0;
  omp_lock_t io;  /* an OpenMP lock: its kernel's capture keeps the OpenMP runtime's heap */
  omp_init_lock(&io);
  omp_set_lock(&io);
  printf("simulating %ld lookups on up to %d threads\n", lookups, omp_get_max_threads());  /* into stdout's buffer */
  omp_unset_lock(&io);
  omp_destroy_lock(&io);
#pragma omp parallel for schedule(dynamic, 100) reduction(+ : verification)
  for (long i = 0; i < lookups; i++) {
    double local[5];
    double e = (hash(i) % 1000000) / 1000000.0;
    lookup(g, e, local);
    double best = local[0]; int arg = 0;
    for (int c = 1; c < 5; c++) if (local[c] > best) { best = local[c]; arg = c; }
    results[i] = best;
    verification += arg + 1;
  }
  results[lookups] = (double)verification;
}

/* reads its input into the heap: the system writes there, so no page may be protected */
void load(const char *path, double *to, long n) {
  FILE *f = fopen(path, "rb");
  long got = 0;
  while (f && got < n) {
    size_t r = fread(to + got, sizeof(double), n - got, f);
    if (!r) break;
    got += (long)r;
  }
  if (f) fclose(f);
}

/* names a library global (stderr): replay binds it to its own process's */
void report(const double *results, long n) {
  for (long i = 0; i < n; i++)
    if (results[i] < 0) fprintf(stderr, "negative result at %ld\n", i);
}

int main(int argc, char **argv) {
  long n = atol(argv[1]), lookups = atol(argv[2]);
  grid_t g = {n, malloc(n * sizeof(double)), malloc(5 * n * sizeof(double))};
  for (long i = 0; i < n; i++) g.energy[i] = (double)i / (n - 1);
  FILE *f = fopen("xs.dat", "wb");
  for (long i = 0; i < 5 * n; i++) { double v = (hash(i + 7) % 1000) / 1000.0; fwrite(&v, 8, 1, f); }
  fclose(f);
  char *ballast = malloc(32 << 20);  /* live, never touched by a kernel */
  for (long i = 0; i < (32 << 20); i++) ballast[i] = (char)hash(i);
  load("xs.dat", g.xs, 5 * n);
  double *results = calloc(lookups + 1, sizeof(double));
  printf("grid of %ld points\n", n);
  simulate(&g, lookups, results);
  report(results, lookups);
  double s = 0;
  for (long i = 0; i < lookups; i++) s += results[i];
  printf("sum %.17g verification %.0f ballast %d\n", s, results[lookups], ballast[12345]);
  free(ballast);
  return 0;
}
"""

N, LOOKUPS = 20000, 200000


@pytest.fixture(autouse=True)
def two_threads(monkeypatch):
    """Parallel loops with a team of two, whatever the machine's core count."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")


def _record(tmp_path, ws):
    src = tmp_path / "xs"
    src.mkdir()
    (src / "xs.c").write_text(XS_C)
    (src / "Makefile").write_text("xs: xs.c\n\t$(CC) -O2 -fopenmp -o xs xs.c\n")
    assert r3("--workspace", ws, "record", "--source", src, "--run", "./xs %d %d" % (N, LOOKUPS)) == 0
    return {c.kernel: c for c in list_captures(Workspace(ws))}


def runtime_regions(ws, capture, image):
    return [
        r for r in read_regions(os.path.join(Workspace(ws).capture_dir(capture.id), image)) if r.kind == KIND_RUNTIME
    ]


def in_runtime_pool(capture, region):
    """Whether ``region`` lies in the heap pool of the OpenMP runtime (and the loader)."""
    return int(capture.arena["runtime_base"], 16) <= region.addr < int(capture.arena["runtime_end"], 16)


def capture_bytes(ws, capture):
    directory = Workspace(ws).capture_dir(capture.id)
    return sum(os.path.getsize(os.path.join(directory, n)) for n in ("pre.bin", "post.bin"))


def _replay(ws, capture, capsys):
    code = r3("--workspace", ws, "replay", capture.id, "--json")
    out = capsys.readouterr().out
    return code, (json.loads(out) if out.strip() else {})


def test_parallel_shapes_record_and_replay(tmp_path, clang, capsys):
    ws = str(tmp_path / "ws")
    caps = _record(tmp_path, ws)
    capsys.readouterr()
    assert {"lookup", "simulate", "report"} <= set(caps)

    # the hot function, called inside the parallel loop: one thread's call, in a snapshot process
    lookup = caps["lookup"]
    assert lookup.memory["thread"] == "worker" and lookup.memory["mode"] == "pages"
    assert lookup.app["calls"] == LOOKUPS  # every call counted, though timed on a sample
    # it touched a handful of pages of the grid, nothing of the 32 MiB ballast
    assert lookup.memory["touched_bytes"] <= 64 * 4096 < lookup.memory["live_bytes"]
    # ... pages apart (runs of touched pages), in the grid's two blocks (energy, cross sections)
    grid = N * 8 + 5 * N * 8
    assert grid <= lookup.memory["blocks_bytes"] <= 1.1 * grid
    assert 2 * lookup.memory["runs"] * 4096 >= lookup.memory["touched_bytes"]
    # Runtime state a capture cannot reach is left out: OpenMP's heap state (lookup calls no
    # OpenMP function) and the worker's TLS (no argument points into it). What is left is
    # the pages it touched, and the stack its pointer arguments reach (the grid's struct on
    # main's stack, the output on its own), held twice: as input and as compared output.
    assert not runtime_regions(ws, lookup, "pre.bin") and not runtime_regions(ws, lookup, "post.bin")
    stack = sum(
        r.size
        for r in read_regions(os.path.join(Workspace(ws).capture_dir(lookup.id), "pre.bin"))
        if r.kind == KIND_STACK
    )
    assert capture_bytes(ws, lookup) <= 1.2 * (lookup.memory["touched_bytes"] + 2 * stack)
    code, ev = _replay(ws, lookup, capsys)
    assert code == 0 and ev["verified"], ev

    # the driver: dynamic schedule and a reduction, replayed with OpenMP in the worker
    simulate = caps["simulate"]
    assert simulate.memory["thread"] == "main" and simulate.launch["openmp"]
    # it takes an OpenMP lock, so its capture keeps the runtime's heap state (restored, never compared)
    assert [r for r in runtime_regions(ws, simulate, "pre.bin") if in_runtime_pool(simulate, r)]
    reads_writes = (N + 5 * N + LOOKUPS + 1) * 8  # energy, xs, results
    assert simulate.memory["touched_bytes"] <= 1.2 * reads_writes
    assert simulate.memory["live_bytes"] > (32 << 20) + reads_writes
    code, ev = _replay(ws, simulate, capsys)
    assert code == 0 and ev["verified"], ev

    # a kernel naming stderr replays against the replay process's own stream
    code, ev = _replay(ws, caps["report"], capsys)
    assert code == 0 and ev["verified"], ev

    # OpenMP threads in paired timings: the baseline as recorded, the candidate as it asks,
    # neither above the worker's CPUs (a worker pinned to one CPU runs both with one thread).
    assert simulate.launch["threads"] == 2
    cpus = sorted(os.sched_getaffinity(0))
    directory = Workspace(ws).capture_dir(simulate.id)
    with ReplayServer(cpus=cpus[:1]) as pinned:
        ev = pinned.submit(directory, pairs=2)
    assert ev.ok and (ev.baseline_threads, ev.threads) == (1, 1), ev.diagnostics
    with ReplayServer() as server:
        ev = server.submit(directory, Variant(launch=Launch(threads=1)), pairs=2)
    assert ev.ok and (ev.baseline_threads, ev.threads) == (min(2, len(cpus)), 1), ev.diagnostics


def test_input_reader_is_not_captured_and_says_why(tmp_path, clang, capsys):
    """A capture of fread's kernel would need the whole heap (no page may be protected when
    the system writes into it), and replay would refuse it: it is not captured at all."""
    ws = str(tmp_path / "ws")
    caps = _record(tmp_path, ws)
    assert "load" not in caps
    out = capsys.readouterr().out
    assert "load: not captured, replay would refuse it: it calls fopen, fread, whose library state" in out


def test_snapshots_leave_the_application_run_unchanged(tmp_path, clang):
    """The recorded binary prints the same with captures (and snapshot processes) as without."""
    ws = str(tmp_path / "ws")
    _record(tmp_path, ws)
    runs = [d for d in os.listdir(os.path.join(ws, "runs"))]
    tree = os.path.join(ws, "runs", runs[0], "src")
    outputs = []
    for capture in ("*", "none"):
        env = dict(os.environ, R3_RECORD_DIR=str(tmp_path / ("rec-" + capture[0])), R3_CAPTURE=capture)
        proc = subprocess.run(["./xs", str(N), str(LOOKUPS)], cwd=tree, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert "r3-record runtime" not in proc.stderr
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1] and "\nsum " in outputs[0]
    assert len(os.listdir(tmp_path / "rec-*" / "captures")) == 3  # simulate, lookup, report
    assert not (tmp_path / "rec-n" / "captures").exists()


def test_only_kernels_that_may_reach_openmp_state_keep_it():
    def kernel(*calls):
        return KernelInfo("k", "void", 0, [], [], calls=list(calls))

    # a parallel region and queries run on the replay process's own OpenMP runtime
    assert (
        not kernel_flags(kernel("__kmpc_fork_call", "__kmpc_for_static_init_8", "omp_get_thread_num"))
        & KFLAG_RUNTIME_STATE
    )
    # locks, OpenMP allocators and threadprivate copies may live in the recorded runtime's heap
    for call in ("omp_set_lock", "omp_init_nest_lock", "omp_alloc", "__kmpc_threadprivate_cached"):
        assert kernel_flags(kernel("__kmpc_fork_call", call)) & KFLAG_RUNTIME_STATE, call
