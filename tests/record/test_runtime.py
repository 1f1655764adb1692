"""The record runtime (r3rt.c) with the real clang: arena heap, probes, captures, images."""

import json
import os
import shutil
import signal
import stat
import struct
import subprocess

import numpy as np
import pytest

from spack_r3 import memimage
from spack_r3.errors import CaptureError, ToolchainError
from spack_r3.record import runtime
from spack_r3.toolchain import find_libomp

ARENA = 0x100000000000
GiB = 1 << 30


@pytest.fixture(scope="session")
def rt_link(clang, tmp_path_factory):
    """Link arguments for the runtime, built once into a private cache."""
    cache = tmp_path_factory.mktemp("xdg-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(cache))
        return runtime.link_args(clang)


def build(clang, rt_link, tmp_path, name, source, extra=()):
    src = tmp_path / (name + ".c")
    src.write_text(source)
    exe = tmp_path / name
    cmd = [clang, "-O1", "-Wall", str(src)] + list(extra) + list(rt_link) + ["-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return str(exe)


def clean_env(**kw):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("R3_", "OMP_"))}
    env.update({k: str(v) for k, v in kw.items()})
    return env


def run(exe, args=(), cwd=None, **env):
    proc = subprocess.run(
        [exe] + [str(a) for a in args], capture_output=True, text=True, env=clean_env(**env), cwd=cwd, timeout=120
    )
    return proc


def parse_out(text):
    out = {}
    for line in text.splitlines():
        key, _, val = line.partition(" ")
        out[key] = val
    return out


# --------------------------------------------------------------------------------------
# building the runtime


def test_runtime_object_cached(clang, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    obj = runtime.runtime_object(clang)
    key = runtime.cache_key(clang)
    assert obj == str(tmp_path / "spack-r3" / "runtime" / key / "r3rt.o")
    assert len(key) == 64 and int(key, 16) >= 0
    mtime = os.stat(obj).st_mtime_ns
    assert runtime.runtime_object(clang) == obj
    assert os.stat(obj).st_mtime_ns == mtime  # reused, not rebuilt
    assert os.listdir(os.path.dirname(obj)) == ["r3rt.o"]  # no temporary left behind
    args = runtime.link_args(clang)
    assert args[0] == obj and "-lpthread" in args and all(a.startswith("-l") for a in args[1:])
    # the object defines the allocator and the probes
    nm_tool = shutil.which("llvm-nm-19") or shutil.which("llvm-nm") or shutil.which("nm")
    nm = subprocess.run([nm_tool, obj], capture_output=True, text=True) if nm_tool else None
    if nm and nm.returncode == 0:
        defined = {ln.split()[-1] for ln in nm.stdout.splitlines() if " T " in ln}
        for sym in (
            "malloc",
            "free",
            "calloc",
            "realloc",
            "posix_memalign",
            "aligned_alloc",
            "memalign",
            "valloc",
            "pvalloc",
            "reallocarray",
            "malloc_usable_size",
            "__r3_enter",
            "__r3_exit",
        ):
            assert sym in defined, sym


def test_runtime_build_failure_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    bad = tmp_path / "clang"
    bad.write_text(
        "#!/bin/sh\n"
        "if [ \"$1\" = --version ]; then echo 'clang version 19.1.0'; exit 0; fi\n"
        "echo 'r3rt.c:1:1: warning: meh' >&2\n"
        "echo 'r3rt.c:2:1: error: broken toolchain' >&2\nexit 1\n"
    )
    bad.chmod(bad.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(ToolchainError) as info:
        runtime.runtime_object(str(bad))
    msg = str(info.value)
    assert "\n" not in msg and "error: broken toolchain" in msg
    found = [f for _, _, files in os.walk(tmp_path / "cache") for f in files]
    assert found == []
    with pytest.raises(ToolchainError):
        runtime.runtime_object(str(tmp_path / "no-such-clang"))


# --------------------------------------------------------------------------------------
# the arena heap

HEAP_PROG = r"""
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

static uintptr_t lo, hi;
static int global_int;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL line %d: %s\n", __LINE__, #c); exit(1); } } while (0)
#define IN(p) CHECK((uintptr_t)(p) >= lo && (uintptr_t)(p) < hi)

static void *worker(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  unsigned char tagb = (unsigned char)(0x40 + (uintptr_t)arg);
  unsigned char *slot[64] = {0};
  size_t size[64] = {0};
  for (int i = 0; i < 20000; i++) {
    int j = rand_r(&seed) % 64;
    if (slot[j]) {
      for (size_t b = 0; b < size[j]; b++) CHECK(slot[j][b] == tagb);
      if (rand_r(&seed) % 3 == 0) {  /* grow or shrink */
        size_t n = (size_t)(rand_r(&seed) % 3000) + 1;
        unsigned char *q = realloc(slot[j], n);
        CHECK(q != NULL); IN(q);
        for (size_t b = 0; b < (n < size[j] ? n : size[j]); b++) CHECK(q[b] == tagb);
        memset(q, tagb, n);
        slot[j] = q; size[j] = n;
      } else {
        free(slot[j]); slot[j] = NULL;
      }
    } else {
      size_t n = (i % 97 == 0) ? 300000 + rand_r(&seed) % 100000 : (size_t)(rand_r(&seed) % 2000);
      unsigned char *p = (i % 5 == 0) ? calloc(1, n) : malloc(n);
      CHECK(p != NULL); IN(p); CHECK(((uintptr_t)p & 15) == 0);
      CHECK(malloc_usable_size(p) >= n);
      if (i % 5 == 0) for (size_t b = 0; b < n; b++) CHECK(p[b] == 0);
      memset(p, tagb, n);
      slot[j] = p; size[j] = n;
    }
  }
  for (int j = 0; j < 64; j++) free(slot[j]);
  return NULL;
}

int main(void) {
  lo = (uintptr_t)strtoull(getenv("EXPECT_BASE"), NULL, 16);
  hi = lo + (64ull << 30);

  char *p = malloc(100);
  IN(p); CHECK(((uintptr_t)p & 15) == 0);
  CHECK(malloc_usable_size(p) >= 100);
  volatile uintptr_t first = (uintptr_t)p;  /* volatile: the compiler may assume q != p */
  free(p);
  char *q = malloc(100);
  CHECK((uintptr_t)q == first);  /* freed chunk reused */
  free(q);

  /* calloc after free must give zeros: small (memset) and large (pages given back) */
  unsigned char *s = malloc(64); memset(s, 0xcd, 64); free(s);
  unsigned char *z = calloc(4, 16); IN(z);
  for (int i = 0; i < 64; i++) CHECK(z[i] == 0);
  unsigned char *big = malloc(1 << 22); memset(big, 0xab, 1 << 22); free(big);
  unsigned char *bz = calloc(1 << 20, 4); IN(bz);
  for (int i = 0; i < (1 << 22); i++) CHECK(bz[i] == 0);
  memset(bz, 0x11, 1 << 22); free(bz);
  bz = calloc(1, (1 << 22) - 100);
  for (int i = 0; i < (1 << 22) - 100; i++) CHECK(bz[i] == 0);
  free(bz);
  volatile size_t huge_n = (size_t)1 << 62;  /* volatile: else clang folds the NULL checks */
  void *volatile no = calloc(huge_n, 16);
  CHECK(no == NULL);
  no = reallocarray(NULL, huge_n, 16);
  CHECK(no == NULL);
  no = malloc(huge_n);
  CHECK(no == NULL);

  /* realloc keeps contents */
  unsigned char *r = realloc(NULL, 16); IN(r);
  for (int i = 0; i < 16; i++) r[i] = (unsigned char)i;
  r = realloc(r, 100000); IN(r);
  for (int i = 0; i < 16; i++) CHECK(r[i] == i);
  r = realloc(r, 10); IN(r);
  for (int i = 0; i < 10; i++) CHECK(r[i] == i);
  r = reallocarray(r, 1000, 8); IN(r);
  for (int i = 0; i < 10; i++) CHECK(r[i] == i);
  free(r);

  /* the memalign family */
  void *a64 = NULL, *a4k = NULL;
  CHECK(posix_memalign(&a64, 64, 1000) == 0); IN(a64); CHECK(((uintptr_t)a64 & 63) == 0);
  CHECK(posix_memalign(&a4k, 4096, 10000) == 0); IN(a4k); CHECK(((uintptr_t)a4k & 4095) == 0);
  CHECK(malloc_usable_size(a4k) >= 10000);
  memset(a64, 1, 1000); memset(a4k, 2, 10000);
  void *bad = NULL;
  CHECK(posix_memalign(&bad, 24, 10) != 0);
  void *aa = aligned_alloc(256, 1024); IN(aa); CHECK(((uintptr_t)aa & 255) == 0);
  void *ma = memalign(128, 10); IN(ma); CHECK(((uintptr_t)ma & 127) == 0);
  void *va = valloc(10); IN(va); CHECK(((uintptr_t)va & 4095) == 0);
  void *pv = pvalloc(10); IN(pv); CHECK(((uintptr_t)pv & 4095) == 0);
  CHECK(malloc_usable_size(pv) >= 4096);
  void *huge = aligned_alloc(1 << 21, 3 << 20); IN(huge); CHECK(((uintptr_t)huge & ((1 << 21) - 1)) == 0);
  memset(huge, 3, 3 << 20);
  free(a64); free(a4k); free(aa); free(ma); free(va); free(pv); free(huge);

  /* a large block freed and allocated again, as a time step's temporaries are, is reused,
   * not faulted in again (glibc's dynamic mmap threshold); calloc still gives zeros */
  struct rusage ru0, ru1;
  for (int i = 0; i < 2; i++) { char *t = malloc(2 << 20); IN(t); memset(t, 7, 2 << 20); free(t); }
  getrusage(RUSAGE_SELF, &ru0);
  for (int i = 0; i < 20; i++) { char *t = malloc(2 << 20); IN(t); memset(t, 7, 2 << 20); free(t); }
  getrusage(RUSAGE_SELF, &ru1);
  CHECK(ru1.ru_minflt - ru0.ru_minflt < 512); /* each time faulted in again: 20 x 512 pages */
  unsigned char *cz = calloc(1, 2 << 20); IN(cz);
  for (int i = 0; i < 2 << 20; i++) CHECK(cz[i] == 0);
  free(cz);

  /* libc's own allocations come from the arena too */
  char *d = strdup("hello"); IN(d); free(d);

  /* pointers outside the arena are ignored */
  void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void *volatile gp = &global_int;
  free(m); free(gp); free(NULL);
  CHECK(malloc_usable_size(m) == 0);
  free(p + 1);  /* interior pointer: ignored */

  pthread_t t[4];
  for (long i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, worker, (void *)(i + 1)) == 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);

  printf("OK %p\n", (void *)p);
  return 0;
}
"""


def test_arena_heap(clang, rt_link, tmp_path):
    exe = build(clang, rt_link, tmp_path, "heap", HEAP_PROG, ["-pthread"])
    proc = run(exe, EXPECT_BASE="%x" % ARENA)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("OK 0x1000000")
    # another base, as hex with 0x and a smaller reservation
    other = 0x200000000000
    proc = run(exe, EXPECT_BASE="%x" % other, R3_ARENA_BASE="0x%x" % other, R3_ARENA_SIZE="64G")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("OK 0x2000000")


def test_arena_cannot_map(clang, rt_link, tmp_path):
    # a non-PIE executable's text is at 0x400000: an arena there collides with it
    exe = build(clang, rt_link, tmp_path, "heap", HEAP_PROG, ["-pthread", "-no-pie"])
    proc = run(exe, EXPECT_BASE="400000", R3_ARENA_BASE="0x400000")
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if "r3-record runtime" in ln]
    assert len(lines) == 1, proc.stderr
    assert "cannot map arena at 0x400000: File exists; set R3_ARENA_BASE" in lines[0]


# --------------------------------------------------------------------------------------
# probes and captures

R3_ABI = r"""
#include <stdint.h>

/* the ABI, spelled out as instrumented code sees it */
struct r3_global { const char *name; void *addr; int64_t size; };
struct r3_kinfo {
  const char *name; const char *tu_dir; int64_t nargs; const int64_t *byval_sizes;
  int64_t nglobals; const struct r3_global *globals; int64_t ret_size;
  int64_t calls, total_ns, self_ns, captured, registered;
  struct r3_kinfo *next;
  int64_t flags, id, sel;
};
void __r3_enter(struct r3_kinfo *k, const uint64_t *slots);
void __r3_exit(struct r3_kinfo *k, const void *ret);
"""

KERNEL_PROG = (
    R3_ABI
    + r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct params { double factor; int64_t tag; };
double table[8] = {1, 2, 3, 4, 5, 6, 7, 8};

static const int64_t scale_byval[3] = {0, 0, sizeof(struct params)};
static const struct r3_global scale_globals[1] = {{"table", table, sizeof table}};
static struct r3_kinfo K_scale = {"scale", "/tmp/tu \"dir\"\\x", 3, scale_byval, 1, scale_globals, 8};
static const int64_t outer_byval[2] = {0, 0};
static struct r3_kinfo K_outer = {"outer", "/tmp/tu", 2, outer_byval, 0, NULL, 0};

__attribute__((noinline)) static double scale_impl(double *a, long n, const struct params *p) {
  double s = 0;
  for (long i = 0; i < n; i++) { a[i] = a[i] * p->factor + table[i % 8]; s += a[i]; }
  return s;
}

static double scale(double *a, long n, struct params p) {
  uint64_t slots[3] = {(uint64_t)(uintptr_t)a, (uint64_t)n, (uint64_t)(uintptr_t)&p};
  __r3_enter(&K_scale, slots);
  double r = scale_impl(a, n, &p);
  __r3_exit(&K_scale, &r);
  return r;
}

static void outer(double *b, long n) {
  uint64_t slots[2] = {(uint64_t)(uintptr_t)b, (uint64_t)n};
  __r3_enter(&K_outer, slots);
  struct params p = {0.5, 9};
  scale(b, n, p);
  __r3_exit(&K_outer, NULL);
}

static uint64_t now(void) {
  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

int main(int argc, char **argv) {
  long n = 1000;
  long ballast_mib = argc > 1 ? atol(argv[1]) : 0;
  char *ballast = NULL;
  if (ballast_mib) { ballast = malloc(ballast_mib << 20); memset(ballast, 7, ballast_mib << 20); }
  double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double));
  for (long i = 0; i < n; i++) { a[i] = i * 0.5; b[i] = i * 0.25; }
  printf("A %p\nB %p\nT %p\nN %ld\n", (void *)a, (void *)b, (void *)table, n);
  uint64_t t0 = now();
  outer(b, n);
  printf("OUTER_WALL_NS %llu\n", (unsigned long long)(now() - t0));
  struct params p1 = {2.0, 7}, p2 = {3.0, 7};
  double r1 = scale(a, n, p1);
  double r2 = scale(a, n, p2);
  printf("R1 %a\nR2 %a\n", r1, r2);
  free(ballast);
  return 0;
}
"""
)


def captures(rec):
    d = rec / "captures"
    return sorted(os.listdir(d)) if d.exists() else []


def load_profile(rec, pid):
    with open(rec / ("profile.%d.json" % pid)) as f:
        prof = json.load(f)
    return prof, {k["name"]: k for k in prof["kernels"]}


def region_at(path, addr):
    regs = memimage.read_regions(path)
    hits = [r for r in regs if r.addr == addr]
    assert len(hits) == 1, (hex(addr), regs[:5])
    return hits[0], regs


def doubles(path, region, n):
    return np.frombuffer(memimage.region_bytes(path, region)[: n * 8], dtype="<f8")


@pytest.fixture(scope="module")
def kernel_exe(clang, rt_link, tmp_path_factory):
    return build(clang, rt_link, tmp_path_factory.mktemp("kprog"), "kern", KERNEL_PROG)


def test_capture_whole_heap(kernel_exe, tmp_path):
    """R3_CAPTURE_PAGES=0: the fallback that stores every live chunk of the heap."""
    rec = tmp_path / "rec"
    proc = run(kernel_exe, R3_RECORD_DIR=rec, R3_CAPTURE_PAGES=0)
    assert proc.returncode == 0, proc.stderr
    assert "r3-record runtime" not in proc.stderr
    out = parse_out(proc.stdout)
    A, B, T, n = int(out["A"], 16), int(out["B"], 16), int(out["T"], 16), int(out["N"])
    assert ARENA <= A < ARENA + 64 * GiB and ARENA <= B < ARENA + 64 * GiB
    names = captures(rec)
    assert len(names) == 2, names
    pid = int(names[0].rsplit("-", 1)[1])
    # outer captured at its first call; the nested scale call was not (outer was capturing),
    # so scale's first capture is the first direct call, on A
    assert names == ["outer-1-%d" % pid, "scale-1-%d" % pid]

    cap = rec / "captures" / ("scale-1-%d" % pid)
    assert sorted(os.listdir(cap)) == ["meta.json", "post.bin", "pre.bin"]
    with open(cap / "meta.json") as f:
        meta = json.load(f)
    assert meta["kernel"] == "scale"
    assert meta["tu_dir"] == '/tmp/tu "dir"\\x'
    assert meta["instance"] == 1 and meta["pid"] == pid
    assert int(meta["args"][0], 16) == A
    assert int(meta["args"][1], 16) == n
    assert meta["byval"][:2] == [None, None]
    assert bytes.fromhex(meta["byval"][2]) == struct.pack("<dq", 2.0, 7)
    table = np.arange(1, 9, dtype=float)
    inp = np.arange(n) * 0.5
    expected = inp * 2.0 + table[np.arange(n) % 8]
    assert struct.unpack("<d", bytes.fromhex(meta["ret"]))[0] == float.fromhex(out["R1"])
    assert np.isclose(float.fromhex(out["R1"]), expected.sum())
    assert meta["threads"] == 1
    assert meta["instance_ns"] > 0
    assert int(meta["arena_base"], 16) == ARENA
    assert int(meta["arena_end"], 16) > A + n * 8
    assert meta["globals"] == [{"name": "table", "addr": "0x%x" % T, "size": 64}]

    pre, post = cap / "pre.bin", cap / "post.bin"
    r_pre, pre_regs = region_at(pre, A)
    assert r_pre.kind == memimage.KIND_HEAP and r_pre.size >= n * 8
    assert np.array_equal(doubles(pre, r_pre, n), inp)
    r_post, post_regs = region_at(post, A)
    assert r_post.kind == memimage.KIND_HEAP and r_post.size == r_pre.size
    assert np.array_equal(doubles(post, r_post, n), expected)
    # B was already scaled by outer's nested call: unchanged by this kernel
    rb_pre, _ = region_at(pre, B)
    rb_post, _ = region_at(post, B)
    assert memimage.region_bytes(pre, rb_pre) == memimage.region_bytes(post, rb_post)
    assert np.array_equal(doubles(pre, rb_pre, n), np.arange(n) * 0.25 * 0.5 + table[np.arange(n) % 8])
    g, _ = region_at(pre, T)
    assert g.kind == memimage.KIND_GLOBAL and g.size == 64
    assert np.array_equal(np.frombuffer(memimage.region_bytes(pre, g), "<f8"), table)
    # every heap region lies in the arena, below arena_end, without overlaps
    heap = sorted((r for r in pre_regs if r.kind == 1), key=lambda r: r.addr)
    assert all(ARENA <= r.addr and r.end <= int(meta["arena_end"], 16) for r in heap)
    assert all(x.end <= y.addr for x, y in zip(heap, heap[1:]))

    outer_cap = rec / "captures" / ("outer-1-%d" % pid)
    with open(outer_cap / "meta.json") as f:
        ometa = json.load(f)
    assert int(ometa["args"][0], 16) == B and ometa["ret"] is None and ometa["globals"] == []
    ob_pre, _ = region_at(outer_cap / "pre.bin", B)
    ob_post, _ = region_at(outer_cap / "post.bin", B)
    assert np.array_equal(doubles(outer_cap / "pre.bin", ob_pre, n), np.arange(n) * 0.25)
    assert np.array_equal(
        doubles(outer_cap / "post.bin", ob_post, n), np.arange(n) * 0.25 * 0.5 + table[np.arange(n) % 8]
    )

    prof, ks = load_profile(rec, pid)
    assert prof["pid"] == pid and prof["app_ns"] > 0 and prof["arena_peak_bytes"] >= 2 * n * 8
    # Taking the two captures is time the application without probes would not spend.
    assert 0 < prof["paused_ns"] < prof["app_ns"]
    assert ks["scale"]["calls"] == 3 and ks["outer"]["calls"] == 1
    # scale is called twice on its own and once inside outer: two outermost calls
    assert ks["scale"]["main_top_calls"] == 2 and ks["outer"]["main_top_calls"] == 1
    assert ks["scale"]["captured"] == 1 and ks["outer"]["captured"] == 1
    assert ks["scale"]["tu_dir"] == '/tmp/tu "dir"\\x'
    for k in ks.values():
        assert 0 < k["self_ns"] <= k["total_ns"]
    assert ks["outer"]["self_ns"] < ks["outer"]["total_ns"]  # the nested scale is not self time
    assert not any(name.startswith(".tmp") for name in os.listdir(rec / "captures"))


def bytes_at(path, addr, n, kind=memimage.KIND_HEAP):
    """``n`` bytes at ``addr`` from the regions of ``kind`` that hold them, one after another
    (a run of touched pages is split where copied pages meet pages that were zeros)."""
    hits = sorted(
        (r for r in memimage.read_regions(path) if r.kind == kind and r.end > addr and r.addr < addr + n),
        key=lambda r: r.addr,
    )
    assert hits and hits[0].addr <= addr and hits[-1].end >= addr + n, (hex(addr), n, hits)
    assert all(a.end == b.addr for a, b in zip(hits, hits[1:])), (hex(addr), n, hits)
    whole = b"".join(memimage.region_bytes(path, r) for r in hits)
    return whole[addr - hits[0].addr : addr - hits[0].addr + n]


def test_capture_touched_pages(kernel_exe, tmp_path):
    """The default: a capture holds the pages the kernel touched, not the 24 MiB it did not."""
    rec = tmp_path / "rec"
    proc = run(kernel_exe, ["24"], R3_RECORD_DIR=rec)
    assert proc.returncode == 0, proc.stderr
    assert "r3-record runtime" not in proc.stderr
    out = parse_out(proc.stdout)
    A, B, T, n = int(out["A"], 16), int(out["B"], 16), int(out["T"], 16), int(out["N"])
    pid = int(captures(rec)[0].rsplit("-", 1)[1])
    assert captures(rec) == ["outer-1-%d" % pid, "scale-1-%d" % pid]
    cap = rec / "captures" / ("scale-1-%d" % pid)
    with open(cap / "meta.json") as f:
        meta = json.load(f)
    mem = meta["memory"]
    assert mem["mode"] == "pages" and mem["thread"] == "main"
    assert mem["live_bytes"] > 24 << 20
    # A (8000 bytes) spans two or three pages; nothing else of the application is touched
    assert n * 8 <= mem["touched_bytes"] <= n * 8 + 2 * 4096
    pre, post = cap / "pre.bin", cap / "post.bin"
    assert os.path.getsize(pre) < 64 << 10 and os.path.getsize(post) < 64 << 10
    table = np.arange(1, 9, dtype=float)
    inp = np.arange(n) * 0.5
    assert np.array_equal(np.frombuffer(bytes_at(pre, A, n * 8), "<f8"), inp)
    assert np.array_equal(np.frombuffer(bytes_at(post, A, n * 8), "<f8"), inp * 2.0 + table[np.arange(n) % 8])
    assert not [r for r in memimage.read_regions(pre) if r.kind == memimage.KIND_HEAP and r.addr <= B < r.end]
    assert np.array_equal(np.frombuffer(bytes_at(pre, T, 64, memimage.KIND_GLOBAL), "<f8"), table)
    # heap regions are whole pages in pre.bin; post.bin holds the same bytes at most
    pre_heap = [r for r in memimage.read_regions(pre) if r.kind == memimage.KIND_HEAP]
    assert all(r.addr % 4096 == 0 and r.size % 4096 == 0 for r in pre_heap)
    for r in memimage.read_regions(post):
        if r.kind == memimage.KIND_HEAP:
            assert any(p.addr <= r.addr and r.end <= p.end for p in pre_heap)
    # outer's nested scale ran on B: outer's capture holds B, before and after
    ocap = rec / "captures" / ("outer-1-%d" % pid)
    assert np.array_equal(np.frombuffer(bytes_at(ocap / "pre.bin", B, n * 8), "<f8"), np.arange(n) * 0.25)
    assert np.array_equal(
        np.frombuffer(bytes_at(ocap / "post.bin", B, n * 8), "<f8"), np.arange(n) * 0.25 * 0.5 + table[np.arange(n) % 8]
    )


STREAM_PROG = (
    R3_ABI
    + r"""
#include <stdio.h>
#include <stdlib.h>

static const int64_t byval[3] = {0, 0, 0};
static struct r3_kinfo K_total = {"total", "/tmp/tu", 3, byval, 0, NULL, 0};

/* reads 8 MiB front to back, writes one double */
__attribute__((noinline)) static void total_impl(const double *a, long n, double *out) {
  double s = 0;
  for (long i = 0; i < n; i++) s += a[i];
  *out = s;
}

static void total(const double *a, long n, double *out) {
  uint64_t slots[3] = {(uint64_t)(uintptr_t)a, (uint64_t)n, (uint64_t)(uintptr_t)out};
  __r3_enter(&K_total, slots);
  total_impl(a, n, out);
  __r3_exit(&K_total, NULL);
}

int main(void) {
  long n = 1 << 20;
  double *a = malloc(n * sizeof(double)), *out = malloc(sizeof(double));
  for (long i = 0; i < n; i++) a[i] = (double)(i % 1000);
  *out = -1;
  total(a, n, out);
  printf("A %p\nOUT %p\nN %ld\nS %a\n", (void *)a, (void *)out, n, *out);
  return 0;
}
"""
)


def test_streaming_kernel_capture_is_cheap(clang, rt_link, tmp_path):
    """A kernel reading 8 MiB front to back: its pages open a growing window at a time (not
    one fault a page), and post.bin leaves out what it only read (kind 5: pre.bin has it)."""
    exe = build(clang, rt_link, tmp_path, "stream", STREAM_PROG)
    rec = tmp_path / "rec"
    proc = run(exe, R3_RECORD_DIR=rec)
    assert proc.returncode == 0, proc.stderr
    out = parse_out(proc.stdout)
    A, OUT, n = int(out["A"], 16), int(out["OUT"], 16), int(out["N"])
    cap = rec / "captures" / captures(rec)[0]
    with open(cap / "meta.json") as f:
        mem = json.load(f)["memory"]
    pages = n * 8 // 4096
    assert mem["faults"] <= pages // 32  # 2048 pages in about 40 faults
    # a window opens at most a quarter of the stream before it, and 1 MiB, past what is read
    assert n * 8 <= mem["touched_bytes"] <= n * 8 + (1 << 20) + 2 * 4096
    pre, post = cap / "pre.bin", cap / "post.bin"
    assert os.path.getsize(pre) >= n * 8 and os.path.getsize(post) < 64 << 10
    # read back, post.bin has the array as it was (from pre.bin) and the sum written
    assert bytes_at(post, A, n * 8) == bytes_at(pre, A, n * 8)
    assert (
        struct.unpack("<d", bytes_at(post, OUT, 8))[0]
        == float.fromhex(out["S"])
        == 499500.0 * (n // 1000) + sum(range(n % 1000))
    )
    assert struct.unpack("<d", bytes_at(pre, OUT, 8))[0] == -1.0


FRESH_PROG = (
    R3_ABI
    + r"""
#include <stdio.h>
#include <stdlib.h>

static const int64_t byval[3] = {0, 0, 0};
static struct r3_kinfo K_fill = {"fill", "/tmp/tu", 3, byval, 0, NULL, 0};

/* writes a freshly calloc'ed 4 MiB array from a small table it reads */
__attribute__((noinline)) static void fill_impl(double *out, long n, const double *table) {
  for (long i = 0; i < n; i++) out[i] = table[i % 8] * (double)i;
}

static void fill(double *out, long n, const double *table) {
  uint64_t slots[3] = {(uint64_t)(uintptr_t)out, (uint64_t)n, (uint64_t)(uintptr_t)table};
  __r3_enter(&K_fill, slots);
  fill_impl(out, n, table);
  __r3_exit(&K_fill, NULL);
}

int main(void) {
  long n = 1 << 19;
  double *table = malloc(8 * sizeof(double));
  for (int i = 0; i < 8; i++) table[i] = i + 1;
  double *out = calloc(n, sizeof(double));
  fill(out, n, table);
  printf("OUT %p\nTABLE %p\nN %ld\n", (void *)out, (void *)table, n);
  return 0;
}
"""
)


@pytest.mark.parametrize("direct", ["1", "0"])
def test_fresh_memory_a_kernel_fills_is_recorded_as_zeros(clang, rt_link, tmp_path, direct):
    """Pages never written before the call (fresh calloc'ed memory) are a header in pre.bin
    (kind 7), read back as zeros; post.bin has what the kernel wrote. The same with the
    images written through the page cache (R3_DIRECT_IO=0) instead of O_DIRECT."""
    exe = build(clang, rt_link, tmp_path, "fresh", FRESH_PROG)
    rec = tmp_path / "rec"
    proc = run(exe, R3_RECORD_DIR=rec, R3_DIRECT_IO=direct)
    assert proc.returncode == 0, proc.stderr
    assert "r3-record runtime" not in proc.stderr
    out = parse_out(proc.stdout)
    OUT, TABLE, n = int(out["OUT"], 16), int(out["TABLE"], 16), int(out["N"])
    cap = rec / "captures" / captures(rec)[0]
    pre, post = cap / "pre.bin", cap / "post.bin"
    zeros = [r for r in memimage.read_regions(pre) if r.zero]
    assert sum(r.size for r in zeros) >= n * 8 - 2 * 4096
    assert all(r.kind == memimage.KIND_HEAP for r in zeros)
    assert os.path.getsize(pre) < 64 << 10  # 4 MiB of zeros are not in the file
    assert bytes_at(pre, OUT, n * 8) == bytes(n * 8)
    assert np.array_equal(np.frombuffer(bytes_at(pre, TABLE, 64), "<f8"), np.arange(1, 9.0))
    i = np.arange(n)
    assert np.array_equal(np.frombuffer(bytes_at(post, OUT, n * 8), "<f8"), (i % 8 + 1.0) * i)
    assert bytes_at(post, TABLE, 64) == bytes_at(pre, TABLE, 64)  # unchanged: kind 5 over pre.bin


SLOW_START_PROG = (
    R3_ABI
    + r"""
#include <stdio.h>
#include <time.h>

static struct r3_kinfo K_step = {"step", "/tmp/tu", 1, (const int64_t[1]){0}, 0, NULL, 0};

/* slow for its first 2000 calls (as under a capture that faults on every first touch), then fast */
__attribute__((noinline)) static void step(long i) {
  uint64_t slots[1] = {(uint64_t)i};
  __r3_enter(&K_step, slots);
  if (i < 2000) { struct timespec ts = {0, 20000}; nanosleep(&ts, NULL); }
  __r3_exit(&K_step, NULL);
}

int main(void) {
  for (long i = 0; i < 400000; i++) step(i);
  return 0;
}
"""
)


def test_a_kernel_slow_only_at_first_is_sampled_later(clang, rt_link, tmp_path):
    """Sampling is decided at 1024 calls and, while not sampled, again at each power of two."""
    exe = build(clang, rt_link, tmp_path, "slowstart", SLOW_START_PROG)
    rec = tmp_path / "rec"
    proc = run(exe, R3_RECORD_DIR=rec, R3_CAPTURE="none")
    assert proc.returncode == 0, proc.stderr
    _, ks = load_profile(rec, int(next(rec.glob("profile.*.json")).name.split(".")[1]))
    assert ks["step"]["calls"] == 400000 and ks["step"]["sampled"]


def test_memimage_unchanged_bytes_come_from_pre(tmp_path):
    """Kind 5 in post.bin: a header, no bytes; read as the kind-1 bytes pre.bin holds."""
    data = bytes(range(256)) * 32
    memimage.write_regions(tmp_path / "pre.bin", [(ARENA, memimage.KIND_HEAP, data)])
    hdr = struct.Struct("<QQQ")
    (tmp_path / "post.bin").write_bytes(
        memimage.MAGIC
        + hdr.pack(ARENA + 4096, 4096, memimage.KIND_SAME)
        + hdr.pack(ARENA, 8, memimage.KIND_HEAP)
        + b"changed!"
    )
    regs = memimage.read_regions(tmp_path / "post.bin")
    assert [(r.addr, r.size, r.kind) for r in regs] == [(ARENA + 4096, 4096, 1), (ARENA, 8, 1)]
    assert memimage.region_bytes(tmp_path / "post.bin", regs[0]) == data[4096:]
    assert bytes(memimage.region_view(tmp_path / "post.bin", regs[0])) == data[4096:]
    assert memimage.region_bytes(tmp_path / "post.bin", regs[1]) == b"changed!"
    # unchanged bytes that pre.bin does not hold: a corrupt capture, said so
    (tmp_path / "post.bin").write_bytes(memimage.MAGIC + hdr.pack(ARENA + 8000, 4096, memimage.KIND_SAME))
    with pytest.raises(CaptureError, match="not in .*pre.bin"):
        memimage.read_regions(tmp_path / "post.bin")


def test_memimage_unchanged_bytes_may_span_copied_and_zero_pages(tmp_path):
    """A kind-5 range over pre.bin's run of copied pages and the run of zero pages after it."""
    data = bytes(range(256)) * 16
    hdr = struct.Struct("<QQQ")
    (tmp_path / "pre.bin").write_bytes(
        memimage.MAGIC
        + hdr.pack(ARENA, 4096, memimage.KIND_HEAP)
        + data
        + hdr.pack(ARENA + 4096, 8192, memimage.KIND_ZERO)
    )
    (tmp_path / "post.bin").write_bytes(memimage.MAGIC + hdr.pack(ARENA + 4000, 4096, memimage.KIND_SAME))
    regs = memimage.read_regions(tmp_path / "post.bin")
    assert [(r.addr, r.size, r.zero) for r in regs] == [(ARENA + 4000, 96, False), (ARENA + 4096, 4000, True)]
    assert b"".join(memimage.region_bytes(tmp_path / "post.bin", r) for r in regs) == data[4000:] + bytes(4000)


def test_capture_instances_and_selection(kernel_exe, tmp_path):
    rec = tmp_path / "two"
    proc = run(kernel_exe, R3_RECORD_DIR=rec, R3_INSTANCES=2, R3_CAPTURE="scale")
    assert proc.returncode == 0, proc.stderr
    out = parse_out(proc.stdout)
    A, B = int(out["A"], 16), int(out["B"], 16)
    names = captures(rec)
    pid = int(names[0].rsplit("-", 1)[1])
    assert names == ["scale-1-%d" % pid, "scale-2-%d" % pid]
    metas = []
    for name in names:
        with open(rec / "captures" / name / "meta.json") as f:
            metas.append(json.load(f))
    # outer is not selected, so the nested call is scale's first instance (on B), then A
    assert [int(m["args"][0], 16) for m in metas] == [B, A]
    assert [m["instance"] for m in metas] == [1, 2]
    _, ks = load_profile(rec, pid)
    assert ks["scale"]["captured"] == 2 and ks["outer"]["captured"] == 0
    assert ks["outer"]["calls"] == 1 and ks["scale"]["calls"] == 3

    rec = tmp_path / "none"
    proc = run(kernel_exe, R3_RECORD_DIR=rec, R3_CAPTURE="none")
    assert proc.returncode == 0, proc.stderr
    assert captures(rec) == []
    profiles = [f for f in os.listdir(rec) if f.startswith("profile.")]
    assert len(profiles) == 1
    _, ks = load_profile(rec, int(profiles[0].split(".")[1]))
    assert ks["scale"]["calls"] == 3 and ks["scale"]["captured"] == 0

    rec = tmp_path / "toobig"
    proc = run(kernel_exe, R3_RECORD_DIR=rec, R3_MAX_CAPTURE_BYTES=1024)
    assert proc.returncode == 0, proc.stderr
    assert captures(rec) == []
    warned = [ln for ln in proc.stderr.splitlines() if "R3_MAX_CAPTURE_BYTES" in ln]
    assert len(warned) == 2  # one line per kernel, not per call

    rec = tmp_path / "budget"
    proc = run(kernel_exe, R3_RECORD_DIR=rec, R3_CAPTURE_BUDGET=1)
    assert proc.returncode == 0, proc.stderr
    assert captures(rec) == []
    warned = [ln for ln in proc.stderr.splitlines() if "R3_CAPTURE_BUDGET" in ln]
    assert len(warned) == 1  # one line for the whole run


def test_no_record_dir_writes_nothing(kernel_exe, tmp_path):
    proc = run(kernel_exe, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and os.listdir(tmp_path) == []
    # a relative R3_RECORD_DIR is taken from the working directory at start
    proc = run(kernel_exe, cwd=tmp_path, R3_RECORD_DIR="rel/rec", R3_CAPTURE="none")
    assert proc.returncode == 0, proc.stderr
    assert [f for f in os.listdir(tmp_path / "rel" / "rec") if f.startswith("profile.")]


def test_snapshot_time_excluded(kernel_exe, tmp_path):
    rec = tmp_path / "rec"
    proc = run(kernel_exe, ["24"], R3_RECORD_DIR=rec, R3_CAPTURE="outer", R3_CAPTURE_PAGES=0)
    assert proc.returncode == 0, proc.stderr
    out = parse_out(proc.stdout)
    names = captures(rec)
    assert len(names) == 1
    pid = int(names[0].rsplit("-", 1)[1])
    pre = rec / "captures" / names[0] / "pre.bin"
    assert os.path.getsize(pre) > 24 << 20  # the ballast is in the image
    wall = int(out["OUTER_WALL_NS"])  # two 24 MiB snapshots + the kernel
    _, ks = load_profile(rec, pid)
    assert ks["outer"]["total_ns"] < wall / 2, (ks["outer"], wall)


OMP_PROG = r"""
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "r3rt.h"  /* the ABI (R3_ABI spells it out instead) */
static struct r3_kinfo K = {"kern", "/tmp/tu", 1, NULL, 0, NULL, 0};

static void kern(double *a) {
  uint64_t s[1] = {(uint64_t)(uintptr_t)a};
  __r3_enter(&K, s);
  #pragma omp parallel for
  for (int i = 0; i < 1000; i++) a[i] += 1;
  __r3_exit(&K, NULL);
}
static void *thr(void *a) { kern(a); return NULL; }

int main(void) {
  double *x = calloc(1000, sizeof(double)), *y = calloc(1000, sizeof(double));
  double *z = calloc(1000, sizeof(double));
  pthread_t t;
  pthread_create(&t, NULL, thr, z);   /* not the main thread */
  pthread_join(t, NULL);
  #pragma omp parallel num_threads(2)
  kern(omp_get_thread_num() ? y : x);  /* inside a parallel region */
  kern(z);
  double sx = 0, sy = 0, sz = 0;
  for (int i = 0; i < 1000; i++) { sx += x[i]; sy += y[i]; sz += z[i]; }
  printf("X %p\nY %p\nZ %p\nPID %d\nSUMS %.0f %.0f %.0f\n", (void *)x, (void *)y, (void *)z, (int)getpid(), sx, sy, sz);
  return 0;
}
"""


def test_capture_threads_and_openmp(clang, rt_link, tmp_path):
    """Calls on other threads and inside parallel regions are captured in snapshot processes."""
    if not find_libomp(clang):
        pytest.skip("no LLVM OpenMP runtime (libomp)")
    libdir = os.path.dirname(find_libomp(clang))
    exe = build(
        clang,
        rt_link,
        tmp_path,
        "omp",
        OMP_PROG,
        ["-I" + runtime.RUNTIME_DIR, "-fopenmp", "-pthread", "-L" + libdir, "-Wl,-rpath," + libdir],
    )
    rec = tmp_path / "rec"
    proc = run(exe, R3_RECORD_DIR=rec, OMP_NUM_THREADS=2, R3_INSTANCES=2)
    assert proc.returncode == 0, proc.stderr
    assert "r3-record runtime" not in proc.stderr
    out = parse_out(proc.stdout)
    x, y, z = (int(out[v], 16) for v in "XYZ")
    names = captures(rec)
    assert len(names) == 2 and all(n.startswith("kern-") for n in names), names
    metas = {}
    for name in names:
        with open(rec / "captures" / name / "meta.json") as f:
            meta = json.load(f)
        metas[meta["instance"]] = (meta, rec / "captures" / name)
    # instance 1: the plain pthread's call (its parallel loop gets the default 2 threads)
    meta, cap = metas[1]
    assert int(meta["args"][0], 16) == z and meta["memory"]["thread"] == "worker" and meta["threads"] == 2
    assert meta["pid"] != int(out["PID"])  # taken in a snapshot process
    assert np.array_equal(np.frombuffer(bytes_at(cap / "pre.bin", z, 8000), "<f8"), np.zeros(1000))
    assert np.array_equal(np.frombuffer(bytes_at(cap / "post.bin", z, 8000), "<f8"), np.ones(1000))
    # instance 2: one thread's call inside the parallel region (its nested loop: 1 thread)
    meta, cap = metas[2]
    arg = int(meta["args"][0], 16)
    assert arg in (x, y) and meta["memory"]["thread"] == "worker" and meta["threads"] == 1
    assert np.array_equal(np.frombuffer(bytes_at(cap / "post.bin", arg, 8000), "<f8"), np.ones(1000))
    # the application's own results are untouched by the snapshots
    assert out["SUMS"] == "1000 1000 2000"
    _, ks = load_profile(rec, int(out["PID"]))
    assert ks["kern"]["calls"] == 4 and ks["kern"]["captured"] == 2


# --------------------------------------------------------------------------------------
# memory image files


def test_memimage_roundtrip_and_truncation(tmp_path):
    path = tmp_path / "pre.bin"
    arr = np.arange(5, dtype="<f8")
    memimage.write_regions(path, [(ARENA + 16, 1, b"abc"), (0x601000, 2, arr), (ARENA + 64, 1, b"")])
    regs = memimage.read_regions(path)
    assert [(r.addr, r.size, r.kind) for r in regs] == [(ARENA + 16, 3, 1), (0x601000, 40, 2), (ARENA + 64, 0, 1)]
    assert memimage.region_bytes(path, regs[0]) == b"abc"
    assert bytes(memimage.region_view(path, regs[1])) == arr.tobytes()
    assert memimage.find_region(regs, 0x601000 + 39) == regs[1]
    assert os.path.getsize(path) == 8 + 24 + 8 + 24 + 40 + 24
    assert [f for f in os.listdir(tmp_path)] == ["pre.bin"]

    data = path.read_bytes()
    for cut in (len(data) - 1, 8 + 24 + 2, 8 + 10):
        bad = tmp_path / ("cut%d.bin" % cut)
        bad.write_bytes(data[:cut])
        with pytest.raises(CaptureError, match="truncated at byte %d" % cut):
            memimage.read_regions(bad)
    bad = tmp_path / "magic.bin"
    bad.write_bytes(b"NOTANIMG" + data[8:])
    with pytest.raises(CaptureError, match="not a memory image"):
        memimage.read_regions(bad)


def test_truncated_capture_image(kernel_exe, tmp_path):
    rec = tmp_path / "rec"
    proc = run(kernel_exe, R3_RECORD_DIR=rec, R3_CAPTURE="scale")
    assert proc.returncode == 0, proc.stderr
    name = captures(rec)[0]
    pre = rec / "captures" / name / "pre.bin"
    assert len(memimage.read_regions(pre)) >= 2  # the kernel's global and the heap pages it touched
    size = os.path.getsize(pre)
    with open(pre, "r+b") as f:
        f.truncate(size - 5)
    with pytest.raises(CaptureError) as info:
        memimage.read_regions(pre)
    assert "truncated at byte %d" % (size - 5) in str(info.value)
    assert str(pre) in str(info.value)


SNAPSHOT_PROG = r"""
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "r3rt.h"  /* the ABI (R3_ABI spells it out instead) */
static struct r3_kinfo K = {"misbehave", "/tmp/tu", 1, NULL, 0, NULL, 0};
static pid_t app;

/* behaves in the application; hangs or crashes in a snapshot process */
static void misbehave(long *a) {
  uint64_t s[1] = {(uint64_t)(uintptr_t)a};
  __r3_enter(&K, s);
  if (getpid() != app) {
    if (getenv("HANG")) for (;;) pause();
    raise(SIGSEGV);
  }
  *a += 1;
  __r3_exit(&K, NULL);
}
static void *thr(void *a) { misbehave(a); return NULL; }

int main(void) {
  app = getpid();
  long *x = calloc(1, sizeof(long));
  pthread_t t;
  pthread_create(&t, NULL, thr, x);
  pthread_join(t, NULL);
  printf("X %ld\n", *x);
  return 0;
}
"""


@pytest.mark.parametrize("how", ["crash", "hang"])
def test_a_failed_snapshot_costs_one_capture_not_the_run(clang, rt_link, tmp_path, how):
    exe = build(clang, rt_link, tmp_path, "snap", SNAPSHOT_PROG, ["-I" + runtime.RUNTIME_DIR, "-pthread"])
    rec = tmp_path / "rec"
    env = {"HANG": "1"} if how == "hang" else {}
    proc = run(exe, R3_RECORD_DIR=rec, R3_CAPTURE_TIMEOUT=1, **env)
    assert proc.returncode == 0 and proc.stdout == "X 1\n", proc.stderr
    expect = "timed out" if how == "hang" else "killed by signal %d" % signal.SIGSEGV
    assert "capture of misbehave in a snapshot process failed: " + expect in proc.stderr
    assert captures(rec) == []
