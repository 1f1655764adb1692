"""Several recorded calls of one kernel replayed in their order (``r3 replay --sequence``).

A lookup that searches a sorted table for a different key on every call: recorded at
its first calls (``--instances``), each call replays with its own key and is checked
against its own recording, and a timed run is a pass over all of them. A kernel whose
input the program changes between calls cannot form a sequence, and says where.
"""

import json

import pytest

from test_record_replay import source_tree
from r3cli import flags, r3, r3_subprocess

LOOKUP_C = r"""
#include <stdio.h>
#include <stdlib.h>

/* the index of the last entry <= x in a sorted table, and that entry */
void lookup(const double *table, long n, double x, double *out) {
  long lo = 0, hi = n - 1;
  while (lo < hi) {
    long mid = (lo + hi + 1) / 2;
    if (table[mid] <= x) lo = mid; else hi = mid - 1;
  }
  out[0] = (double)lo;
  out[1] = table[lo];
}

/* a sum over an array that main changes between calls */
double total(const double *a, long n) {
  double s = 0.0;
  for (long i = 0; i < n; i++) s += a[i];
  return s;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1 << 16;
  double *table = malloc(n * sizeof(double)), *res = calloc(8, sizeof(double)), acc = 0.0;
  for (long i = 0; i < n; i++) table[i] = i * 0.5 + (i % 3) * 0.1;
  for (long k = 0; k < 40; k++) {
    lookup(table, n, (double)((k * 7919) % n) * 0.5, res + 2 * (k % 4));
    acc += res[2 * (k % 4)];
  }
  for (long k = 0; k < 4; k++) {
    acc += total(table, n);
    table[k] += 1.0;
  }
  printf("%g\n", acc);
  return 0;
}
"""

MAKEFILE = "prog: lookup.c\n\t$(CC) -O1 -o $@ lookup.c\n"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, clang):
    src = source_tree(tmp_path_factory, "sequence", {"lookup.c": LOOKUP_C, "Makefile": MAKEFILE})
    ws = str(tmp_path_factory.mktemp("sequence-ws"))
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            *flags(source=src, run="./prog", kernel=["lookup", "total"], instances="6"),
        )
        == 0
    )
    return src, ws


def test_recorded_calls_replay_in_order_each_checked_against_its_own_recording(recorded):
    _, recorded = recorded
    proc = r3_subprocess(
        "--workspace", recorded, "replay", "lookup", "--sequence", "--pipeline", "O3", "--pairs", 3, "--json"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ev = json.loads(proc.stdout)
    assert ev["status"] == "ok" and ev["verified"] and ev["calls"] == 6
    assert ev["pairs"] == 3 and ev["speedup"] > 0 and ev["time_median_s"] > 0
    # One call alone, as before: the same kernel, one recorded call repeated.
    proc = r3_subprocess("--workspace", recorded, "replay", ev["capture"], "--pipeline", "O3", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["calls"] == 1


def test_a_sequence_whose_input_changed_between_calls_is_refused_with_where(recorded):
    _, recorded = recorded
    proc = r3_subprocess("--workspace", recorded, "replay", "total", "--sequence")
    assert proc.returncode != 0
    line = proc.stderr.strip()
    assert "Traceback" not in line and len(line.splitlines()) == 1, line
    assert "call 2 of total found memory at 0x" in line and "changed the kernel's input between its calls" in line


def test_a_sequence_needs_several_recorded_calls_and_warm_caches(recorded, tmp_path):
    src, ws = recorded
    proc = r3_subprocess("--workspace", ws, "replay", "lookup", "--sequence", "--cache", "cold")
    assert proc.returncode != 0 and "--sequence is timed in warm caches" in proc.stderr
    once = str(tmp_path / "ws")
    assert r3("--workspace", once, "record", "--source", src, "--run", "./prog", "--kernel", "lookup") == 0
    proc = r3_subprocess("--workspace", once, "replay", "lookup", "--sequence")
    assert proc.returncode != 0
    assert "lookup has one recorded call in its run: record it with --instances N" in proc.stderr
    # Recorded again at 3 calls: the first call, recorded before, is now the new run's first.
    assert (
        r3("--workspace", once, "record", "--source", src, "--run", "./prog", "--kernel", "lookup", "--instances", 3)
        == 0
    )
    proc = r3_subprocess("--workspace", once, "replay", "lookup", "--sequence", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["calls"] == 3, proc.stderr
    # A run on other data: which run to replay is the user's to say, by its first call.
    assert (
        r3(
            "--workspace",
            once,
            "record",
            *flags(source=src, run="./prog 4096", kernel="lookup", instances=2),
        )
        == 0
    )
    proc = r3_subprocess("--workspace", once, "replay", "lookup", "--sequence")
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1
    assert "'lookup' was recorded in 2 runs; name the first call of the one to replay:" in proc.stderr
    assert "(3 calls)" in proc.stderr and "(2 calls)" in proc.stderr


def test_tune_times_a_kernel_as_its_recorded_calls_when_they_form_a_sequence(recorded, tmp_path):
    src, _ = recorded
    ws = str(tmp_path / "ws")
    quick = flags(budget=4, pairs=3, confirm_pairs=3, confirm_rounds=1, mutator="none")
    kernels = flags(kernel=["lookup", "total"])
    tune = ["--workspace", ws, "tune", *kernels, *quick]
    proc = r3_subprocess(*tune, *flags(source=src, run="./prog", instances=4, seed=1), timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "lookup: timed as the sequence of its 4 recorded calls, in warm caches" in proc.stdout
    # total's input changes between its calls: timed as its first call, repeated, and why
    assert "total: timed as its first recorded call, repeated: call 2 of total found memory" in proc.stdout
    proc = r3_subprocess(*tune, "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    calls = {k["kernel"]: k["calls"] for k in json.loads(proc.stdout)["kernels"]}
    assert calls == {"lookup": 4, "total": 1}


PAGES_C = r"""
#include <stdio.h>
#include <stdlib.h>

#define PAGE_DOUBLES 512 /* 4 KB */
#define PAGES 4096

/* reads four pages of a 16 MB table far apart, different ones on every call */
double pick(const double *table, long k) {
  double s = 0.0;
  for (long j = 0; j < 4; j++) s += table[(k + j * (PAGES / 4)) * PAGE_DOUBLES];
  return s;
}

/* sums all of a 256 KB array on every call */
double sweep(const double *a, long n) {
  double s = 0.0;
  for (long i = 0; i < n; i++) s += a[i];
  return s;
}

int main(void) {
  double *table = malloc((size_t)PAGES * PAGE_DOUBLES * sizeof(double)), acc = 0.0;
  long n = 32768;
  double *a = malloc(n * sizeof(double));
  for (long i = 0; i < (long)PAGES * PAGE_DOUBLES; i++) table[i] = i % 7;
  for (long i = 0; i < n; i++) a[i] = i % 5;
  for (long k = 0; k < 200; k++) acc += pick(table, k) + sweep(a, n);
  printf("%g\n", acc);
  return 0;
}
"""


def test_instances_auto_records_calls_until_their_pages_outgrow_the_bytes_asked(tmp_path_factory, clang, monkeypatch):
    """--instances auto captures a kernel's calls until the pages they touch together reach
    R3_INSTANCE_BYTES (default: the last-level cache), or every page of the blocks they
    touch: pick reads four new pages a call (16 KB), so 512 KB take 32 calls; sweep reads
    its whole 256 KB array in each call, so one call is all there is to see."""
    src = source_tree(
        tmp_path_factory, "pages", {"pages.c": PAGES_C, "Makefile": "prog: pages.c\n\t$(CC) -O1 -o $@ pages.c\n"}
    )
    ws = str(tmp_path_factory.mktemp("pages-ws"))
    monkeypatch.setenv("R3_INSTANCE_BYTES", str(512 * 1024))
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            *flags(source=src, run="./prog", kernel=["pick", "sweep"], instances="auto"),
        )
        == 0
    )
    proc = r3_subprocess("--workspace", ws, "kernels", "--json")
    assert proc.returncode == 0, proc.stderr
    calls = {}
    for entry in json.loads(proc.stdout):
        calls[entry["kernel"]] = entry["instances"]
    assert calls == {"pick": 32, "sweep": 1}
    proc = r3_subprocess("--workspace", ws, "replay", "pick", "--sequence", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["calls"] == 32, proc.stderr
    proc = r3_subprocess("--workspace", ws, "record", "--source", src, "--run", "./prog", "--instances", "some")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "want a number of calls (at least 1), 'auto' or 'cover', not 'some'" in proc.stderr
