"""Record runs that go wrong in ways the application does not notice: a process that forks,
memory the program maps itself, a capture the disk cannot hold, a capture.json that is no
longer a capture. Record must neither count nor keep what is not the run's, and must say
when it could not keep what it should."""

import glob
import json
import os
import shutil

import pytest

from spack_r3.capture import list_captures
from spack_r3.data import OK, Variant
from spack_r3.replay.server import ReplayServer
from spack_r3.workspace import Workspace
from r3cli import flags, r3, r3_subprocess


def tree(tmp_path, name, source, flags=""):
    src = tmp_path / name
    src.mkdir()
    (src / "app.c").write_text(source)
    (src / "Makefile").write_text("app: app.c\n\t$(CC) -O1 %s -o app app.c\n" % flags)
    return src


def entries(ws, capsys):
    capsys.readouterr()
    assert r3("--workspace", ws, "kernels", "--json") == 0
    return json.loads(capsys.readouterr().out)


# --------------------------------------------------------------------------------------
# a program that forks and goes on running in both processes

FORKING_APP = r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

double dot(long n, const double *x, const double *y) {
  double s = 0;
  for (long i = 0; i < n; i++) s += x[i] * y[i];
  return s;
}

int main(void) {
  long n = 4096;
  double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), s = 0;
  for (long i = 0; i < n; i++) { x[i] = 1.0 / (i + 1); y[i] = i % 7; }
  pid_t child = fork();  /* both processes go on running the program */
  if (child < 0) return 1;
  for (int r = 0; r < 20; r++) s += dot(n, x, y);
  if (child == 0) _exit(0);
  int status;
  waitpid(child, &status, 0);
  printf("%.6f\n", s);
  return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
"""


def test_a_forked_process_adds_nothing_to_the_record(tmp_path, clang, capsys):
    ws = str(tmp_path / "ws")
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            *flags(source=tree(tmp_path, "fork", FORKING_APP), run="./app", instances=2),
        )
        == 0
    )
    dots = [e for e in entries(ws, capsys) if e["kernel"] == "dot"]
    # the parent's 20 calls and its two captured calls: the child's calls are not the run's
    assert [e["calls"] for e in dots] == [20, 20] and sorted(e["instance"] for e in dots) == [1, 2]
    assert dots[0]["share"] <= 1
    record_dir = glob.glob(os.path.join(ws, "runs", "*", "record"))[0]
    profiles = glob.glob(os.path.join(record_dir, "profile.*.json"))
    assert len(profiles) == 1  # one process: the one that started
    parent = json.load(open(profiles[0]))["pid"]
    # capture directories are named <kernel>-<call>-<pid>
    assert sorted(os.path.basename(d) for d in glob.glob(os.path.join(record_dir, "captures", "dot-*"))) == [
        "dot-1-%d" % parent,
        "dot-2-%d" % parent,
    ]


# --------------------------------------------------------------------------------------
# memory the program maps itself

MMAP_APP = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL line %d: %s\n", __LINE__, #c); exit(1); } } while (0)

void scale(long n, double *a, double f) {
  for (long i = 0; i < n; i++) a[i] = a[i] * f + 1.0;
}

double total(long n, const double *a) {
  double s = 0;
  for (long i = 0; i < n; i++) s += a[i];
  return s;
}

void bump(long n, double *a) {
  for (long i = 0; i < n; i++) a[i] += 0.5;
}

struct box { long n; double *data; };

void bump_box(struct box *b) {  /* reaches the shared memory through its data */
  for (long i = 0; i < b->n; i++) b->data[i] += 0.5;
}

void shift_box(struct box *b) {
  for (long i = 0; i < b->n; i++) b->data[i] += 0.25;
}

static void *worker(void *b) {  /* captured in a snapshot process */
  shift_box(b);
  return NULL;
}

int main(void) {
  long n = 100000;  /* 800 KB: 196 pages */
  size_t len = n * sizeof(double);
  double *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(a != MAP_FAILED);
  for (long i = 0; i < n; i++) CHECK(a[i] == 0.0);  /* a fresh mapping holds zeros */
  for (long i = 0; i < n; i++) a[i] = i % 13;
  scale(n, a, 1.5);

  /* grown in place or moved, the contents stay; the new part is zeros */
  a = mremap(a, len, 2 * len, MREMAP_MAYMOVE);
  CHECK(a != MAP_FAILED);
  CHECK(a[n - 1] == ((n - 1) % 13) * 1.5 + 1.0 && a[n] == 0.0 && a[2 * n - 1] == 0.0);
  /* unmapping the head, then the rest */
  CHECK(munmap(a, 4096) == 0);
  CHECK(a[n - 1] == ((n - 1) % 13) * 1.5 + 1.0);
  CHECK(munmap((char *)a + 4096, 2 * len - 4096) == 0);

  /* a file mapped whole: the kernel reads its contents */
  char path[] = "data.XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  double *buf = malloc(len);
  for (long i = 0; i < n; i++) buf[i] = 0.25 * (i % 11);
  CHECK(write(fd, buf, len) == (ssize_t)len);
  double *f = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
  CHECK(f != MAP_FAILED);
  close(fd);
  unlink(path);
  CHECK(memcmp(f, buf, len) == 0);
  printf("total %.3f\n", total(n, f));

  /* a custom allocator's reservation, opened a part at a time */
  char *arena = mmap(NULL, 64 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  CHECK(arena != MAP_FAILED && mprotect(arena, len, PROT_READ | PROT_WRITE) == 0);
  double *r = (double *)arena;
  for (long i = 0; i < n; i++) r[i] = i % 5;
  scale(n, r, 0.5);
  CHECK(r[3] == 2.5);

  /* memory shared with other processes stays the system's */
  double *s = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(s != MAP_FAILED);
  bump(n, s);
  struct box *b = malloc(sizeof *b);
  b->n = n;
  b->data = s;
  bump_box(b);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, worker, b) == 0 && pthread_join(t, NULL) == 0);
  /* each call once: the snapshot process's call wrote to a copy */
  CHECK(s[7] == 1.25 && s[n - 1] == 1.25);
  printf("shared %.2f\n", s[7]);
  return 0;
}
"""


@pytest.fixture(scope="module")
def mapped(tmp_path_factory, clang):
    tmp = tmp_path_factory.mktemp("mmap")
    ws = str(tmp / "ws")
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            *flags(source=tree(tmp, "mmap", MMAP_APP, "-pthread"), run="./app", instances=2),
        )
        == 0
    )
    return ws


def test_kernels_on_mmaped_memory_replay_exactly(mapped, capsys):
    # scale: on an anonymous mapping, then on a reservation opened with mprotect; total: on
    # a file's contents
    caps = [e for e in entries(mapped, capsys) if e["kernel"] in ("scale", "total")]
    assert sorted((e["kernel"], e["instance"]) for e in caps) == [("scale", 1), ("scale", 2), ("total", 1)]
    assert all(e["unreplayable"] is None for e in caps)
    with ReplayServer() as server:
        for e in caps:
            ev = server.submit(os.path.join(mapped, "captures", e["id"]), Variant(), repeat=2)
            assert ev.status == OK and ev.verified, (e["kernel"], e["instance"], ev.diagnostics)


def test_a_kernel_on_shared_memory_is_listed_as_not_replayable_naming_the_region(mapped, capsys):
    caps = {e["kernel"]: e for e in entries(mapped, capsys)}
    assert "argument 2 points into 0x" in caps["bump"]["unreplayable"]
    # reached through a pointer in its data, in this process and in a snapshot process
    assert caps["bump_box"]["unreplayable"].startswith("it reaches 0x")
    assert caps["shift_box"]["unreplayable"].startswith("it reaches 0x")
    assert all("/dev/zero" in caps[k]["unreplayable"] for k in ("bump", "bump_box", "shift_box"))
    assert r3("--workspace", mapped, "kernels") == 0
    assert "%s cannot replay: its argument 2 points into" % caps["bump"]["id"] in capsys.readouterr().out


def test_whole_heap_captures_of_kernels_on_shared_memory_say_so(tmp_path, clang, capsys):
    """Without page tracking (R3_CAPTURE_PAGES=0) nothing tells what a kernel reaches: a
    capture whose memory points into shared memory is refused for it; and the snapshot
    process's call (shift_box, on a thread) writes to a copy, as the app's check says."""
    ws = str(tmp_path / "ws")
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            "--source",
            tree(tmp_path, "mmap", MMAP_APP, "-pthread"),
            "--run",
            "R3_CAPTURE_PAGES=0 ./app",
        )
        == 0
    )
    caps = {e["kernel"]: e for e in entries(ws, capsys)}
    for kernel in ("bump_box", "shift_box"):
        assert "pointer(s) into memory the capture does not hold (0x" in caps[kernel]["unreplayable"], kernel
    assert caps["scale"]["unreplayable"] is None and caps["total"]["unreplayable"] is None


# --------------------------------------------------------------------------------------
# a capture the disk cannot hold

BIG_APP = r"""
#include <stdio.h>
#include <stdlib.h>
void fill(long n, double *a) { for (long i = 0; i < n; i++) a[i] = 2.0 * i; }
double small(long n, const double *a) { double s = 0; for (long i = 0; i < n; i++) s += a[i]; return s; }
int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1 << 18;  /* 2 MB: more than the file size limit */
  double *a = malloc(n * sizeof *a);
  printf("%.1f\n", small(8, a));
  fill(n, a);
  printf("%.1f\n", a[n - 1]);
  return 0;
}
"""


def test_a_capture_that_cannot_be_written_fails_the_record_with_the_kernel_and_reason(tmp_path, clang):
    ws = tmp_path / "ws"
    # a file size limit stands for a full disk: the runtime's write fails (EFBIG) part way
    proc = r3_subprocess(
        "--workspace", ws, "record", "--source", tree(tmp_path, "big", BIG_APP), "--run", "ulimit -f 512 && ./app"
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "capture of fill could not be written: File too large" in proc.stderr
    assert list_captures(Workspace(str(ws))) == []  # nothing of a failed record is used later
    record_dir = glob.glob(os.path.join(str(ws), "runs", "*", "record"))[0]
    assert [os.path.basename(p).split("-")[-3] for p in glob.glob(os.path.join(record_dir, "captures", "small-*"))] == [
        "small"
    ]  # what finished stays in the run directory
    assert not glob.glob(os.path.join(record_dir, "captures", ".tmp-*"))


def test_failures_with_no_room_left_even_for_their_marker_are_named(tmp_path, clang):
    """No byte may be written: the markers are empty, their names tell the kernel and errno
    (the two captures and the process's profile failed)."""
    proc = r3_subprocess(
        "--workspace",
        tmp_path / "ws",
        "record",
        "--source",
        tree(tmp_path, "none", BIG_APP),
        "--run",
        "ulimit -f 0 && ./app",
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "capture of fill could not be written: File too large (errno 27) (and 2 more)" in proc.stderr


# --------------------------------------------------------------------------------------
# capture.json that is no longer a capture


def test_corrupt_captures_are_listed_as_corrupt_and_the_rest_keep_working(mapped, tmp_path, capsys):
    ws = str(tmp_path / "ws")
    shutil.copytree(mapped, ws)
    good = {e["id"]: e["kernel"] for e in entries(ws, capsys)}
    bad = {}
    for name, text in (("total", "[]"), ("bump", "null"), ("bump_box", "{garbage")):
        ident = next(i for i, kernel in good.items() if kernel == name)
        with open(os.path.join(ws, "captures", ident, "capture.json"), "w") as f:
            f.write(text)
        bad[ident] = text
        del good[ident]
    listed = entries(ws, capsys)
    assert {e["id"] for e in listed if not e["corrupt"]} == set(good)
    corrupt = {e["id"]: e["corrupt"] for e in listed if e["corrupt"]}
    assert set(corrupt) == set(bad) and all(e["kernel"] is None for e in listed if e["corrupt"])
    assert "list" in corrupt[next(i for i, t in bad.items() if t == "[]")]
    assert "not JSON" in corrupt[next(i for i, t in bad.items() if t == "{garbage")]
    assert r3("--workspace", ws, "kernels") == 0
    out = capsys.readouterr().out
    for ident in bad:
        assert "%s is corrupt: capture.json" % ident in out
    # the others replay as before
    capsys.readouterr()
    assert r3("--workspace", ws, "replay", next(i for i, k in good.items() if k == "scale"), "--json") == 0
    assert json.loads(capsys.readouterr().out)["verified"] is True
    # a corrupt capture named directly is one clear line, not a traceback
    proc = r3_subprocess("--workspace", ws, "replay", next(iter(bad)))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "corrupt" in proc.stderr


def test_kernels_says_which_run_each_capture_is_from(tmp_path, clang, capsys):
    ws = str(tmp_path / "ws")
    src = tree(tmp_path, "twice", BIG_APP)
    for n in (100, 200):  # other data: other captures of the same kernels
        assert r3("--workspace", ws, "record", "--source", src, "--run", "./app %d" % n) == 0
    dots = [e for e in entries(ws, capsys) if e["kernel"] == "fill"]
    runs = sorted(os.listdir(os.path.join(ws, "runs")))
    assert len(dots) == 2 and sorted(e["run"] for e in dots) == runs
    assert [e["instances"] for e in dots] == [1, 1]  # one call of each run
    assert r3("--workspace", ws, "kernels") == 0
    out = capsys.readouterr().out
    assert " run " in out.splitlines()[0] and all(run in out for run in runs)
