#!/usr/bin/env python3
"""Hostile candidates, measured: what ``r3 tune --mutator llm`` does with rewrites that
crash, hang, cheat or escape.

For each demo kernel (heat's jacobi_step, dense's matmul, cg's spmv, recorded at small
sizes) one ``r3 tune --mutator llm`` runs against the loopback model server of the
tests (tests/modelserver.py: real HTTP, the real ``openai`` client), which answers each
proposal request with the next two hostile rewrites of the kernel: every kind a model
or a bad pass can produce (``KINDS``: a segfault, an abort, an infinite loop, an
unbounded allocation, a stack overflow, writes outside the kernel's data, a wrong
answer by one ulp, a race that is right most runs, exit(0), a fork, a signal handler, a
write to a file, reading the clock (or counting calls) to skip the work once timing
starts, a compile error, a changed signature). Each rewrite's description starts with
its tag (``F012 fork``), so the run's children (``<workspace>/remix/*.json``) and its
progress lines say what became of each, and when.

Recorded per kind: how many were served, how each was classified (the child's status:
compile-error, crash, timeout, wrong-output, ok; ``refused``: dropped before it became
a child), the wall time each cost (from its progress line to the next one), whether a
candidate of that kind is the reported winner (no hostile candidate should be: each one
does the kernel's work and more, or less than its work), and for the kinds that reach
outside their process (a file, a forked process) whether the effect happened (marker
files in a directory of the bench). Per kernel: r3 tune's exit status, whether the
study reads back afterwards (every child's inner study and the original's, in Optuna
storage) with as many evaluations as the result reports.

Safety: the tune runs under an address-space limit (``--memory-limit``, RLIMIT_AS,
inherited by the workers and candidates), a net under r3's own: each candidate's process
is confined (spack_r3/replay/confine.py: its own RLIMIT_AS, far below this one, a seccomp
filter, its process group killed when it ends), and the bench measures that; the net
only keeps a regression from filling the machine. A forked process of a candidate, where
one escapes, sleeps at most a few seconds and exits.

Writes bench/faults.json. Usage: scripts/bench_faults.py [--demos heat,dense,cg]
[--per-kind 5] [--timeout 3] [--out bench/faults.json] [--workspace DIR] [--hpccg DIR]
"""

import argparse
import glob
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from modelserver import ScriptedModel  # noqa: E402
from spack_r3.record.instances import MOST_INSTANCES  # noqa: E402
from spack_r3.search.mutators.llm import REPAIR_HEADING  # noqa: E402

SOURCES = os.path.join(ROOT, "repos", "r3", "sources")

# demo -> (run, kernel, signature, correct body, output array, its length, OpenMP, an element
# thread 0 writes late, one in the middle, one the recorded call changes)
DEMOS = {
    "heat": (
        "./heat 96 4",
        "jacobi_step",
        "void jacobi_step(int n, const double *restrict u, double *restrict v, double alpha)",
        """\
#pragma omp parallel for schedule(static)
    for (int i = 1; i < n - 1; i++) {
        const double *up = u + (long)(i - 1) * n;
        const double *row = u + (long)i * n;
        const double *down = u + (long)(i + 1) * n;
        double *out = v + (long)i * n;
        for (int j = 1; j < n - 1; j++) {
            double lap = (up[j] + down[j]) + (row[j - 1] + row[j + 1]) - 4.0 * row[j];
            out[j] = row[j] + alpha * lap;
        }
    }""",
        "v",
        "((long)n * n)",
        True,
        # an element thread 0 of two writes last ((n - 2) / 2 rows each), and one in the middle
        "((long)((n - 2) / 2) * n + n / 2)",
        "((long)(n / 2) * n + n / 2)",
        "((long)n + n / 2)",  # row 1, under the hot top edge: changed from the first step
    ),
    "dense": (
        "./dense 48 1",
        "matmul",
        "void matmul(int n, const double *a, const double *b, double *c)",
        """\
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            c[i * n + j] = 0.0;
            for (int k = 0; k < n; k++)
                c[i * n + j] += a[i * n + k] * b[k * n + j];
        }
    }""",
        "c",
        "((long)n * n)",
        False,
        None,
        "((long)(n / 2) * n + n / 2)",
        "((long)(n / 2) * n + n / 2)",
    ),
    "cg": (
        "./cg 24 200",
        "spmv",
        "void spmv(const csr_t *A, const double *x, double *y)",
        """\
    const int n = A->n;
    const int *rowptr = A->rowptr;
    const int *colidx = A->colidx;
    const double *val = A->val;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        double sum = 0.0;
        for (int k = rowptr[i]; k < rowptr[i + 1]; k++)
            sum += val[k] * x[colidx[k]];
        y[i] = sum;
    }""",
        "y",
        "((long)A->n)",
        True,
        "((long)A->n / 2 - 1)",
        "((long)A->n / 2)",
        "((long)A->n / 2)",
    ),
}

# Public kernels: (demo -> the tree's path option, its build command). Their trees are
# fetched, never kept here: HPCCG is github.com/Mantevo/HPCCG (--hpccg DIR).
# A C++ unit with the standard library's headers takes seconds to compile on a loaded
# machine, inside a candidate's timeout: theirs is at least PUBLIC_TIMEOUT.
# Recorded as r3 tune records (--instances cover): HPCCG's first HPC_sparsemv multiplies a
# zero vector into a zero vector, a call no candidate can be checked on (replay refuses it).
PUBLIC = {"hpccg": ("hpccg", """make CXX="$R3_CXX" LINKER="$R3_CXX" CPP_OPT_FLAGS=-O3""")}
PUBLIC_TIMEOUT = 20.0
DEMOS["hpccg"] = (
    "./test_HPCCG 16 16 16",
    "HPC_sparsemv",
    "int HPC_sparsemv(HPC_Sparse_Matrix *A, const double * const x, double * const y)",
    """\
  const int nrow = (const int) A->local_nrow;
  for (int i=0; i< nrow; i++)
    {
      double sum = 0.0;
      const double * const cur_vals = (const double * const) A->ptr_to_vals_in_row[i];
      const int    * const cur_inds = (const int    * const) A->ptr_to_inds_in_row[i];
      const int cur_nnz = (const int) A->nnz_in_row[i];
      for (int j=0; j< cur_nnz; j++)
          sum += cur_vals[j]*x[cur_inds[j]];
      y[i] = sum;
    }""",
    "y",
    "((long)A->local_nrow)",
    False,
    None,
    "((long)A->local_nrow / 2)",
    "((long)A->local_nrow / 2)",
)
RETURNS = {"hpccg": "0"}  # kernels that return a value: what their rewrites return

# What each kind may come to. A candidate whose every verified output is right and that
# returns is ok (a wild read that lands in mapped memory is wrong-output, a stack array the
# process can hold is ok): such kinds are judged by the other checks, never the winner and
# whether its effect escaped the candidate's process.
EXPECTED = {
    "segfault": {"crash", "wrong-output"},
    "abort": {"crash"},
    "infinite-loop": {"timeout"},
    "unbounded-allocation": {"crash", "ok"},
    "stack-overflow": {"crash", "ok"},
    "write-outside-data": {"crash", "wrong-output", "ok"},
    "one-ulp": {"wrong-output"},
    "race": {"wrong-output", "ok"},
    "exit-early": {"crash"},
    "fork": {"crash"},  # fork and writes: denied
    "signal-handler": {"ok", "crash", "timeout"},
    "write-file": {"crash"},
    "clock-cheat": {"wrong-output", "ok"},
    "compile-error": {"compile-error"},
    "signature": {"refused"},
    "relies-on-initial-contents": {"wrong-output"},
    "reads-beyond-written": {"wrong-output"},
    "uninitialised-scratch": {"wrong-output"},
}
# Candidates that may come to more than their kind. A hang deferred to a candidate's 10th
# call in its process may pass one evaluation (ok): a search's evaluation can make fewer
# calls (no calibration run for a long kernel, 2 pairs when raced). Confirmation catches
# it: it makes the recorded run's calls of the kernel in a row in one process, and each
# round a verification run and --confirm-pairs pairs, where it hangs if either reaches its
# 10th call; if neither does, the recorded run never calls it 10 times either
# (spack_r3/search/confirm.py consecutive_calls; tests/search/test_confirm_calls.py).
DEFERRED_HANG = "hang once timing starts (10th call)"
EXPECTED_OF = {DEFERRED_HANG: {"timeout", "ok"}}
# Kinds that compute a wrong answer at least some of the time: never a winner.
WRONG_KINDS = {
    "one-ulp",
    "race",
    "clock-cheat",
    "write-outside-data",
    "relies-on-initial-contents",
    "reads-beyond-written",
    "uninitialised-scratch",
}

PROTOS = """\
extern int fork(void);
extern unsigned int sleep(unsigned int);
extern void _exit(int);
extern int open(const char *, int, ...);
extern long write(int, const void *, unsigned long);
extern int close(int);
extern int getpid(void);
"""


class Candidate:
    def __init__(self, tag, kind, what, block):
        self.tag, self.kind, self.what, self.block = tag, kind, what, block


def _fn(sig, body, pre="", post="", helpers="", value=None):
    tail = "    return %s;\n" % value if value else ""
    return "%s%s\n{\n%s%s\n%s%s}" % (helpers, sig, pre, body, post, tail)


def candidates(demo, per_kind, markers):
    """The hostile rewrites of one demo's kernel, ``per_kind`` of each kind (no race
    where the unit is built without OpenMP: its pragmas are ignored)."""
    run, kernel, sig, body, out, size, omp, late, mid, hot = DEMOS[demo]
    made = []
    value = RETURNS.get(demo)

    def fn(*args, **kw):
        return _fn(*args, value=value, **kw)

    def add(kind, what, block):
        tag = "F%03d" % len(made)
        if value:  # an early return returns the kernel's value too
            block = block.replace("return;", "return %s;" % value)
        made.append(Candidate(tag, kind, what, "// r3: %s %s: %s\n%s" % (tag, kind, what, block)))

    last = "(%s - 1)" % size
    for i in range(per_kind):
        k = i + 1
        # a different statement each time, so every variant is its own text and behaviour
        add(
            "segfault",
            [
                "null write",
                "write 1 TiB below the output",
                "call through a null pointer",
                "write to a low address",
                "read a wild pointer into the output",
            ][i % 5],
            fn(
                sig,
                body,
                pre=[
                    "    *(volatile int *)0 = %d;\n" % k,
                    "    *(volatile double *)(%s - (1L << 37)) = %d;\n" % (out, k),
                    "    ((void (*)(void))0)();\n",
                    "    *(volatile int *)(long)%d = 1;\n" % (64 * k),
                    "    %s[0] = *(volatile double *)(0x10000L * %d + 8);\n" % (out, k),
                ][i % 5],
            ),
        )
        add(
            "abort",
            [
                "abort() first",
                "trap after the work",
                "abort() after the work",
                "trap first",
                "abort() on the second call",
            ][i % 5],
            fn(
                sig,
                body,
                pre=[
                    "    __builtin_abort();\n",
                    "",
                    "",
                    "    __builtin_trap();\n",
                    "    static int calls_%d;\n    if (++calls_%d == 2) __builtin_abort();\n" % (k, k),
                ][i % 5],
                post=["", "    __builtin_trap();\n", "    __builtin_abort();\n", "", ""][i % 5],
            ),
        )
        add(
            "infinite-loop",
            [
                "spin forever",
                "spin on the output",
                "spin forever after the work",
                "hang on the third call",
                "hang once timing starts (10th call)",
            ][i % 5],
            fn(
                sig,
                body,
                pre=[
                    "    for (volatile long s = %d;; s++) { }\n" % k,
                    '    while (%s[0] == %s[0] || 1) { __asm__ volatile("" ::: "memory"); }\n' % (out, out),
                    "",
                    '    static int calls_%d;\n    if (++calls_%d == 3) for (;;) __asm__ volatile("");\n' % (k, k),
                    '    static int calls_%d;\n    if (++calls_%d >= 10) for (;;) __asm__ volatile("");\n' % (k, k),
                ][i % 5],
                post=["", "", "    for (volatile long s = %d;; s++) { }\n" % k, "", ""][i % 5],
            ),
        )
        add(
            "unbounded-allocation",
            [
                "touch 64 MiB blocks until malloc fails",
                "touch without a NULL check",
                "reserve 1 GiB blocks, untouched",
                "leak 256 MiB every call",
                "touch 16 MiB blocks until malloc fails",
            ][i % 5],
            # each block kept in a volatile global: else clang drops an allocation nothing
            # reads, and the loop is an infinite loop (as in this bench's first run)
            fn(
                sig,
                body,
                helpers="static char *volatile kept_%s_%d;\n" % (demo, k),
                pre=[
                    "    for (;;) { char *p = (char *)__builtin_malloc(1L << 26); if (!p) break; __builtin_memset(p, %d, 1L << 26); "
                    "kept_%s_%d = p; }\n" % (k, demo, k),
                    "    for (;;) { char *p = (char *)__builtin_malloc(1L << 26); __builtin_memset(p, %d, 1L << 26); "
                    "kept_%s_%d = p; }\n" % (k, demo, k),
                    "    for (int r = 0; r < 100000 + %d; r++) { char *p = (char *)__builtin_malloc(1L << 30); if (!p) break; "
                    "kept_%s_%d = p; }\n" % (k, demo, k),
                    "    { char *p = (char *)__builtin_malloc(1L << 28); if (p) __builtin_memset(p, %d, 1L << 28); "
                    "kept_%s_%d = p; }\n" % (k, demo, k),
                    "    for (;;) { char *p = (char *)__builtin_malloc(1L << 24); if (!p) break; __builtin_memset(p, %d, 1L << 24); "
                    "kept_%s_%d = p; }\n" % (k, demo, k),
                ][i % 5],
            ),
        )
        add(
            "stack-overflow",
            [
                "unbounded recursion",
                "a 1 GiB stack array",
                "alloca of 256 MiB",
                "recursion with a big frame",
                "a 64 MiB stack array",
            ][i % 5],
            fn(
                sig,
                body,
                helpers=[
                    "static long deep_%s_%d(long d) { volatile char pad[512]; pad[d %% 512] = (char)d; "
                    "return deep_%s_%d(d + 1) + pad[0]; }\n" % (demo, k, demo, k),
                    "",
                    "",
                    "static long big_%s_%d(long d) { volatile char pad[1 << 16]; pad[d %% 16] = 1; "
                    "return d > (1L << 40) ? 0 : big_%s_%d(d + 1) + pad[3]; }\n" % (demo, k, demo, k),
                    "",
                ][i % 5],
                pre=[
                    "    if (deep_%s_%d(0) == 42) %s[0] = 0;\n" % (demo, k, out),
                    "    volatile char big[1L << 30]; big[%d] = 1; big[(1L << 30) - %d] = 2;\n" % (k, k),
                    "    volatile char *p = (volatile char *)__builtin_alloca(1L << 28); for (long o = 0; o < (1L << 28); o += 4096) p[o] = %d;\n"
                    % k,
                    "    if (big_%s_%d(0) == 42) %s[0] = 0;\n" % (demo, k, out),
                    "    volatile char big[1L << 26]; for (long o = 0; o < (1L << 26); o += 4096) big[o] = %d;\n" % k,
                ][i % 5],
            ),
        )
        add(
            "write-outside-data",
            [
                "write before the output",
                "write just past the output",
                "write pages past the output",
                "write into an input",
                "write into a static of its own",
            ][i % 5],
            fn(
                sig,
                body,
                post=[
                    "    %s[-%d] = 1.0;\n" % (out, k),
                    "    %s[%s + %d] = 1.0;\n" % (out, size, k - 1),
                    "    %s[%s + 4096L * %d] = 1.0;\n" % (out, size, k),
                    "    ((double *)%s)[%d] += 1.0;\n"
                    % ({"heat": "u", "dense": "a", "cg": "x", "hpccg": "x"}[demo], k),
                    "    static double scratch_%d[64]; scratch_%d[%d] = %s[0];\n" % (k, k, k, out),
                ][i % 5],
            ),
        )
        idx = [last, "0", mid, "%s / 3" % size, "1"][i % 5]
        add(
            "one-ulp",
            "one element one ulp up (%s)" % ["last", "first", "middle", "a third in", "second"][i % 5],
            fn(sig, body, post="    %s[%s] = __builtin_nextafter(%s[%s], 1e300);\n" % (out, idx, out, idx)),
        )
        if omp:
            # Thread 1 writes a wrong value first; thread 0 writes the right one later in its
            # chunk: wrong only when thread 1 starts late (a race that is right most runs).
            at = [late, late, mid, late, mid][i % 5]
            add(
                "race",
                [
                    "early wrong write racing a late right one",
                    "early racy increment of a late element",
                    "early wrong write racing a middle element",
                    "stale read-back of a row, nowait",
                    "early scaling racing a late right write",
                ][i % 5],
                fn(
                    sig,
                    body.replace(
                        "#pragma omp parallel for schedule(static)",
                        "#pragma omp for schedule(static)" + (" nowait" if i % 5 == 3 else ""),
                    ),
                    helpers="extern int omp_get_thread_num(void);\n",
                    pre=[
                        "#pragma omp parallel\n    {\n    if (omp_get_thread_num() == 1) %s[%s] = %d.0;\n"
                        % (out, at, k),
                        "#pragma omp parallel\n    {\n    if (omp_get_thread_num() == 1) %s[%s] += %d.0;\n"
                        % (out, at, k),
                        "#pragma omp parallel\n    {\n    if (omp_get_thread_num() == 1) %s[%s] = -%d.0;\n"
                        % (out, at, k),
                        "#pragma omp parallel\n    {\n",
                        "#pragma omp parallel\n    {\n    if (omp_get_thread_num() == 1) %s[%s] *= 1.%d;\n"
                        % (out, at, k),
                    ][i % 5],
                    post=[
                        "    }\n",
                        "    }\n",
                        "    }\n",
                        "    if (omp_get_thread_num() == 0) { double keep = %s[%s]; %s[%s] = keep + 0.0 * %d; }\n    }\n"
                        % (out, mid, out, mid, k),
                        "    }\n",
                    ][i % 5],
                ),
            )
        add(
            "exit-early",
            [
                "exit(0) first",
                "_exit(0) after the work",
                "exit(0) after the work",
                "exit(%d) first" % k,
                "exit(0) on the second call",
            ][i % 5],
            fn(
                sig,
                body,
                helpers="extern void exit(int);\n" + PROTOS,
                pre=[
                    "    exit(0);\n",
                    "",
                    "",
                    "    exit(%d);\n" % k,
                    "    static int calls_%d;\n    if (++calls_%d == 2) exit(0);\n" % (k, k),
                ][i % 5],
                post=["", "    _exit(0);\n", "    exit(0);\n", "", ""][i % 5],
            ),
        )
        mark = os.path.join(markers, "%s-fork-%d" % (demo, k))
        # the forked process sleeps, then leaves a marker: it outlived its candidate if the
        # marker is there after the run, wherever its candidate's verdict came from
        add(
            "fork",
            [
                "a child that sleeps 1 s",
                "a child that sleeps past the timeout",
                "a child that closes its descriptors and sleeps 5 s",
                "a child per call (first 3)",
                "a child that spins 2 s",
            ][i % 5],
            fn(
                sig,
                body,
                helpers=PROTOS,
                pre=(
                    "    static int forked_%d;\n    if (forked_%d++ < %d) {\n        int pid = fork();\n"
                    '        if (pid == 0) {\n%s            int fd = open("%s", 01 | 0100 | 02000, 0644);\n'
                    '            if (fd >= 0) { write(fd, "x", 1); close(fd); }\n            _exit(0);\n        }\n    }\n'
                )
                % (
                    k,
                    k,
                    3 if i % 5 == 3 else 1,
                    [
                        "            sleep(1);\n",
                        "            sleep(6);\n",
                        "            for (int d = 0; d < 1024; d++) close(d);\n            sleep(5);\n",
                        "            sleep(1);\n",
                        "            for (volatile long s = 0; s < 2000000000L; s++) { }\n",
                    ][i % 5],
                    mark,
                ),
            ),
        )
        add(
            "signal-handler",
            [
                "ignore SIGTERM",
                "a SIGSEGV handler that returns, then a fault",
                "ignore SIGINT and SIGTERM, then work",
                "SIGALRM in 1 s that exits 0",
                "a SIGABRT handler, then abort()",
            ][i % 5],
            fn(
                sig,
                body,
                helpers=PROTOS + "extern void (*signal(int, void (*)(int)))(int);\n"
                "extern unsigned int alarm(unsigned int);\n"
                "static void quiet_%s_%d(int s) { (void)s; }\nstatic void bye_%s_%d(int s) { (void)s; _exit(0); }\n"
                % (demo, k, demo, k),
                pre=[
                    "    signal(15, (void (*)(int))1);\n",
                    "    signal(11, quiet_%s_%d);\n    *(volatile int *)0 = %d;\n" % (demo, k, k),
                    "    signal(2, (void (*)(int))1);\n    signal(15, quiet_%s_%d);\n" % (demo, k),
                    "    static int armed_%d;\n    if (!armed_%d++) { signal(14, bye_%s_%d); alarm(1); }\n"
                    % (k, k, demo, k),
                    "    signal(6, quiet_%s_%d);\n    __builtin_abort();\n" % (demo, k),
                ][i % 5],
            ),
        )
        path = os.path.join(markers, "%s-file-%d" % (demo, k))
        add(
            "write-file",
            [
                "a marker file, every call",
                "a marker file, first call",
                "append a line every call",
                "a file beside the marker, first call",
                "a marker file after the work",
            ][i % 5],
            fn(
                sig,
                body,
                helpers=PROTOS,
                pre=(
                    ""
                    if i % 5 == 4
                    else '    static int wrote_%d;\n    if (%s) { int fd = open("%s", 01 | 0100 | 02000, 0644); '
                    'if (fd >= 0) { write(fd, "x", 1); close(fd); } }\n'
                    % (k, "1" if i % 5 in (0, 2) else "!wrote_%d++" % k, path)
                ),
                post=(
                    '    { int fd = open("%s", 01 | 0100 | 02000, 0644); if (fd >= 0) { write(fd, "y", 1); '
                    "close(fd); } }\n" % path
                )
                if i % 5 == 4
                else "",
            ),
        )
        cycles = [20000000, 100000000, 500000000][i % 3]
        add(
            "clock-cheat",
            [
                "skip the work %d Mcycles after the first call" % (cycles // 1000000),
                "skip the work after 5 calls",
                "skip the work %d Mcycles after the first call" % (cycles // 1000000),
                "skip the work after 12 calls",
                "do half the rows once the clock says timing started",
            ][i % 5],
            fn(
                sig,
                body,
                pre=[
                    "    static unsigned long long t0_%d;\n    unsigned long long now = __builtin_ia32_rdtsc();\n"
                    "    if (!t0_%d) t0_%d = now;\n    if (now - t0_%d > %dULL) return;\n" % (k, k, k, k, cycles),
                    "    static long calls_%d;\n    if (++calls_%d > 5) return;\n" % (k, k),
                    "    static unsigned long long t0_%d;\n    unsigned long long now = __builtin_ia32_rdtsc();\n"
                    "    if (!t0_%d) t0_%d = now;\n    if (now - t0_%d > %dULL) return;\n" % (k, k, k, k, cycles),
                    "    static long calls_%d;\n    if (++calls_%d > 12) return;\n" % (k, k),
                    "    static unsigned long long t0_%d;\n    unsigned long long now = __builtin_ia32_rdtsc();\n"
                    "    if (!t0_%d) t0_%d = now;\n    if (now - t0_%d > 50000000ULL) { %s[0] = %s[0]; return; }\n"
                    % (k, k, k, k, out, out),
                ][i % 5],
            ),
        )
        add(
            "compile-error",
            [
                "a missing semicolon",
                "an undeclared identifier",
                "a call of an undeclared function",
                "assigning to a const input",
                "an unbalanced brace",
            ][i % 5],
            [
                fn(sig, body, pre="    int oops_%d = %d\n" % (k, k)),
                fn(sig, body, post="    %s[0] = undeclared_%d;\n" % (out, k)),
                fn(sig, body, post="    vectorize_everything_%d(%s);\n" % (k, out)),
                fn(
                    sig,
                    body,
                    post="    %s = 0;\n" % {"heat": "u[0]", "dense": "a[0]", "cg": "A->n", "hpccg": "x[0]"}[demo],
                ),
                fn(sig, body, pre="    {{ int x_%d = 0; (void)x_%d;\n" % (k, k)),
            ][i % 5],
        )
        # Three kinds right only on the recording's memory (replay.poison): each touches
        # elements the recorded call changes (around ``hot``). An element it leaves as it
        # found it is no output replay can tell from an input: a reliance there stays unseen.
        at = ["(%s + %d)" % (hot, d) for d in (0, 1, -1, 2, -2)][i % 5]
        other = ["(%s - %d)" % (hot, d) for d in (1, 2, -2, 3, -1)][i % 5]
        add(
            "relies-on-initial-contents",
            [
                "adds the old value",
                "subtracts the old value",
                "adds half the old value",
                "keeps the old value where it is set",
                "scales by one plus the old value",
            ][i % 5],
            fn(
                sig,
                body,
                pre="    double keep_%d = %s[%s];\n" % (k, out, at),
                post=[
                    "    %s[%s] += keep_%d;\n" % (out, at, k),
                    "    %s[%s] -= keep_%d;\n" % (out, at, k),
                    "    %s[%s] += 0.5 * keep_%d;\n" % (out, at, k),
                    "    if (keep_%d != 0.0) %s[%s] = keep_%d;\n" % (k, out, at, k),
                    "    %s[%s] *= 1.0 + keep_%d;\n" % (out, at, k),
                ][i % 5],
            ),
        )
        add(
            "reads-beyond-written",
            "reads an element it writes later, into another (%s)" % ["+=", "-=", "+= 2x", "max", "+= 1/4"][i % 5],
            fn(
                sig,
                body,
                pre="    double ahead_%d = %s[%s];\n" % (k, out, at),
                post=[
                    "    %s[%s] += ahead_%d;\n" % (out, other, k),
                    "    %s[%s] -= ahead_%d;\n" % (out, other, k),
                    "    %s[%s] += 2.0 * ahead_%d;\n" % (out, other, k),
                    "    if (ahead_%d > %s[%s]) %s[%s] = ahead_%d;\n" % (k, out, other, out, other, k),
                    "    %s[%s] += ahead_%d / 4;\n" % (out, other, k),
                ][i % 5],
            ),
        )
        nbytes = ["4096L", "(64L << 10)", "(1L << 20)", "(64L << 20)", "(16L << 10)"][i % 5]
        add(
            "uninitialised-scratch",
            "sums into a malloc'd block of %s bytes it never cleared" % nbytes.strip("()L"),
            fn(
                sig,
                body,
                pre="    double *scratch_%d = (double *)__builtin_malloc(%s);\n    if (!scratch_%d) return;\n"
                % (k, nbytes, k),
                post="    scratch_%d[%d] += 1.0;\n    %s[%s] += scratch_%d[%d] - 1.0;\n    __builtin_free(scratch_%d);\n"
                % (k, k, out, at, k, k, k),
            ),
        )
        renamed = sig.replace(kernel + "(", "%s_fast%d(" % (kernel, k))
        retyped = sig.replace("double *", "float *", 1) if i % 5 == 1 else sig.replace("(", "(long extra_%d, " % k, 1)
        add(
            "signature",
            "renamed kernel" if i % 5 in (0, 2, 4) else ("a float parameter" if i % 5 == 1 else "an extra parameter"),
            fn(renamed if i % 5 in (0, 2, 4) else retyped, body),
        )
    return made


def answer_from(queue):
    """A model that answers each proposal request with the next two candidates, repairs never."""
    lock = threading.Lock()

    def answer(messages):
        if REPAIR_HEADING in messages[-1]["content"]:
            return "No fix."
        with lock:
            blocks = [queue.pop(0) for _ in range(min(2, len(queue)))]
        if not blocks:
            return "Nothing more to suggest."
        return "\n\n".join("```c\n%s\n```" % c.block for c in blocks)

    return answer


def _limit(nbytes):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))

    return apply


def run_tune(argv, env, memory_limit, log):
    """r3 tune, its output lines timestamped (seconds from the start): (rc, [(t, line)], seconds)."""
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        preexec_fn=_limit(memory_limit),
        bufsize=1,
    )
    lines = []
    for line in proc.stdout:
        lines.append((time.monotonic() - start, line.rstrip("\n")))
        log.write(line)
        log.flush()
    proc.wait()
    return proc.returncode, lines, time.monotonic() - start


def r3(*argv):
    return [sys.executable, "-m", "spack_r3.cli"] + [str(a) for a in argv]


def bench_demo(demo, args, ws, markers, env, log):
    run, kernel = DEMOS[demo][:2]
    cands = candidates(demo, args.per_kind, markers)
    queue = list(cands)
    src = os.path.join(ws, "src-" + demo)
    build = []
    if demo in PUBLIC:
        option, command = PUBLIC[demo]
        tree = getattr(args, option)
        if not tree:
            raise SystemExit("%s is a public kernel: give its fetched tree with --%s DIR" % (demo, option))
        shutil.copytree(tree, src, ignore=shutil.ignore_patterns(".git", "*.o"))
        build = ["--build", command, "--instances", "cover"]
    else:
        shutil.copytree(os.path.join(SOURCES, demo), src)
    wsdir = os.path.join(ws, "ws-" + demo)
    budget = len(cands) + args.per_kind * 10 + 10  # every candidate, the ok ones' short studies, the pipelines
    if demo in PUBLIC:  # each evaluation of a kernel recorded at several calls counts each call's
        budget *= MOST_INSTANCES
    # the record outside the memory limit (its runtime reserves a large arena), the tune under it
    rec = subprocess.run(
        r3("--workspace", wsdir, "record", "--source", src, *build, "--run", run, "--kernel", kernel),
        env=env,
        capture_output=True,
        text=True,
    )
    log.write(rec.stdout + rec.stderr)
    if rec.returncode != 0:
        raise SystemExit("recording %s failed: %s" % (demo, (rec.stderr.strip().splitlines() or ["?"])[-1]))
    with ScriptedModel([answer_from(queue)] * (len(cands) + 50)) as model:
        argv = r3(
            "--workspace",
            wsdir,
            "tune",
            "--kernel",
            kernel,
            "--mutator",
            "llm",
            "--llm-url",
            model.url,
            "--llm-model",
            "hostile",
            "--llm-timeout",
            30,
            "--budget",
            budget,
            "--remix-share",
            0.95,
            "--stall-patience",
            0,
            "--child-budget",
            1,
            "--repairs",
            0,
            "--pairs",
            2,
            "--confirm-pairs",
            3,
            "--confirm-rounds",
            2,
            "--timeout",
            max(args.timeout, PUBLIC_TIMEOUT) if demo in PUBLIC else args.timeout,
            "--seed",
            1,
        )
        log.write("==> %s\n" % " ".join(argv))
        rc, lines, took = run_tune(argv, env, args.memory_limit, log)
        served = len(cands) - len(queue)
    children = {}
    for path in glob.glob(os.path.join(wsdir, "remix", "*.json")):
        with open(path) as f:
            for c in json.load(f)["children"]:
                m = re.match(r"(F\d{3}) ", c["description"])
                if m:
                    children[m.group(1)] = c
    # wall time of a candidate: from its progress line to the next progress line
    starts = []
    for i, (t, line) in enumerate(lines):
        m = re.search(r"==>   %s\S*: (F\d{3}) " % re.escape(kernel), line)
        if m:
            starts.append((m.group(1), t, i))
    wall = {}
    for tag, t, i in starts:
        following = [lt for lt, line in lines[i + 1 :] if line.startswith("==> ")]
        wall[tag] = round((following[0] if following else t) - t, 3)
    result, report = None, os.path.join(wsdir, "reports", "tune.json")
    if os.path.isfile(report):
        with open(report) as f:
            result = (json.load(f)["kernels"] or [None])[0]
    winner_tag = None
    if result and result["variant"].get("source_patch"):
        for tag, c in children.items():
            if c["patch"] == result["variant"]["source_patch"]:
                winner_tag = tag
    study = study_intact(wsdir, result)
    rows = []
    for c in cands:
        child = children.get(c.tag)
        status = child["status"] if child else ("refused" if int(c.tag[1:]) < served else "not served")
        rows.append(
            {
                "tag": c.tag,
                "kind": c.kind,
                "what": c.what,
                "status": status.replace("_", "-"),
                "diagnostic": (child or {}).get("diagnostic", "")[:160],
                "speedup": (child or {}).get("speedup"),
                "evaluations": (child or {}).get("evaluations"),
                "wall_s": wall.get(c.tag),
            }
        )
    return {
        "demo": demo,
        "kernel": kernel,
        "run": run,
        "exit_status": rc,
        "seconds": round(took, 1),
        "timeout_s": max(args.timeout, PUBLIC_TIMEOUT) if demo in PUBLIC else args.timeout,
        "budget": budget,
        "served": served,
        "candidates": rows,
        "model": (result or {}).get("model"),
        "winner": (result or {}).get("winner"),
        "winner_speedup": (result or {}).get("speedup"),
        "winner_candidate": winner_tag,
        "study": study,
        "last_lines": [line for _, line in lines[-3:]],
    }


def study_intact(wsdir, result):
    """Whether the kernel's studies read back from Optuna storage after the run: the
    original's and every verified child's, with the evaluations the result reports."""
    import optuna

    from spack_r3.search.store import storage
    from spack_r3.workspace import Workspace

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:  # the workspace's own storage, as r3 tune opens it (its journal; r3.db before)
        summaries = optuna.study.get_all_study_summaries(storage(Workspace(wsdir)))
    except Exception as err:  # noqa: BLE001 (what broke is the measurement)
        return {"intact": False, "error": "%s: %s" % (type(err).__name__, err)}
    trials = sum(s.n_trials for s in summaries)
    reported = (result or {}).get("evaluations")
    return {
        "intact": bool(summaries) and reported is not None and trials >= reported,
        "studies": len(summaries),
        "trials_stored": trials,
        "evaluations_reported": reported,
    }


def summarize(demos, escaped):
    kinds = {}
    for d in demos:
        for row in d["candidates"]:
            k = kinds.setdefault(
                row["kind"], {"count": 0, "classified": {}, "wall_s": [], "winner": 0, "unexpected": {}}
            )
            k["count"] += 1
            k["classified"][row["status"]] = k["classified"].get(row["status"], 0) + 1
            s, expected = row["status"], EXPECTED_OF.get(row.get("what"), EXPECTED[row["kind"]])
            if s not in expected and s != "refused" or (s == "refused" and row["kind"] != "signature"):
                k["unexpected"][s] = k["unexpected"].get(s, 0) + 1
            if row["wall_s"] is not None:
                k["wall_s"].append(row["wall_s"])
        if d["winner_candidate"]:
            row = next(r for r in d["candidates"] if r["tag"] == d["winner_candidate"])
            kinds[row["kind"]]["winner"] += 1
    out = {}
    for kind, k in kinds.items():
        walls = sorted(k["wall_s"])
        out[kind] = {
            "count": k["count"],
            "classified": k["classified"],
            "expected": sorted(EXPECTED[kind]),
            "unexpected": k["unexpected"],
            "winner": k["winner"],
            "wall_s_median": walls[len(walls) // 2] if walls else None,
            "wall_s_max": walls[-1] if walls else None,
            "escaped": sum(1 for m in escaped if "-%s-" % {"fork": "fork", "write-file": "file"}.get(kind, "?") in m),
        }
    wrong_winners = sum(out[k]["winner"] for k in WRONG_KINDS if k in out)
    hang_kinds = ("infinite-loop",)
    others = sorted(
        r["wall_s"] for d in demos for r in d["candidates"] if r["wall_s"] is not None and r["kind"] not in hang_kinds
    )
    timeout = max(d.get("timeout_s", 0) for d in demos)
    verdicts = {
        "every_kind_classified_as_expected": all(not k["unexpected"] for k in out.values()),
        "no_wrong_or_racy_winner": wrong_winners == 0,
        "no_hostile_winner": sum(k["winner"] for k in out.values()) == 0,
        "studies_intact": all(d["study"].get("intact") for d in demos),
        "exit_0": all(d["exit_status"] == 0 for d in demos),
        "nothing_escaped": not escaped,
        "hangs_within_the_timeout": max((out[k]["wall_s_max"] or 0) for k in hang_kinds if k in out) <= timeout + 0.5,
        "others_within_1s": (others[-1] if others else 0) <= 1.0,
        "others_over_1s": {
            kind: sum(
                1
                for d in demos
                for r in d["candidates"]
                if r["kind"] == kind and r["wall_s"] is not None and r["wall_s"] > 1.0
            )
            for kind in out
            if kind not in hang_kinds
        },
    }
    verdicts["others_over_1s"] = {k: n for k, n in verdicts["others_over_1s"].items() if n}
    deferred = [(d, r) for d in demos for r in d["candidates"] if r.get("what") == DEFERRED_HANG]
    deferred = {
        "served": len(deferred),
        "passed_an_evaluation": sum(1 for _, r in deferred if r["status"] == "ok"),
        "won": sum(1 for d, r in deferred if d["winner_candidate"] == r["tag"]),
    }
    return {
        "verdicts": verdicts,
        "findings": findings(out, verdicts, deferred),
        "deferred_hang": deferred,
        "candidates": sum(k["count"] for k in out.values()),
        "kinds": out,
        "wrong_or_racy_winners": wrong_winners,
        "hostile_winners": sum(k["winner"] for k in out.values()),
        "studies_intact": all(d["study"].get("intact") for d in demos),
        "exit_status": {d["demo"]: d["exit_status"] for d in demos},
        "escaped_effects": escaped,
        "hang_wall_s_max": max((out[k]["wall_s_max"] or 0) for k in hang_kinds if k in out),
        "other_wall_s_median": others[len(others) // 2] if others else None,
        "other_wall_s_max": others[-1] if others else None,
    }


def findings(kinds, verdicts, deferred=None):
    """What failed, in words, and where it is fixed (none of it is in the model's path)."""
    out = []
    if deferred and deferred["passed_an_evaluation"]:
        out.append(
            "%d of %d candidates hanging from their 10th call passed an evaluation (ok) and %d won: an evaluation "
            "is a process of its own and can make fewer calls (no calibration run for a long kernel, 2 pairs when "
            "raced). Confirmation makes in one process as many calls in a row as the recorded run made of the "
            "kernel (bounded: spack_r3/search/confirm.py consecutive_calls), and each of its rounds a verification "
            "run and --confirm-pairs pairs of one or more runs: a candidate hanging within either count is "
            "rejected there; one hanging later never hangs in the recorded run."
            % (deferred["passed_an_evaluation"], deferred["served"], deferred["won"])
        )
    cheat = kinds.get("clock-cheat", {})
    if cheat.get("winner"):
        out.append(
            "%d of %d clock-cheat candidates verified and %d won (one per kernel): a candidate that does its work "
            "only in its first calls (a call counter, or the cycle counter since its first call) passes, since "
            "the verification runs come first in each candidate's process and no timed run's output is checked. "
            "Where: spack_r3/replay/worker.py run_candidate (confirmation's evaluations go through it too): after "
            "the timed runs, restore, run the candidate once more and engine.check it; a mismatch is "
            "wrong-output." % (cheat["classified"].get("ok", 0), cheat["count"], cheat["winner"])
        )
    fork, files = kinds.get("fork", {}), kinds.get("write-file", {})
    if fork.get("escaped") or files.get("escaped"):
        out.append(
            "Nothing confines a candidate's process: %d of %d file writes landed and %d of %d forked processes "
            "outlived their candidate (those of candidates killed at the timeout as well); a forked process "
            "also holds the result pipe open, so a candidate whose child sleeps costs that sleep. Where: "
            "spack_r3/replay/worker.py _fork_candidate/_collect: the candidate in a process group of its own "
            "(os.setpgid(0, 0) in the child), killed as a group (os.killpg) when it ends or times out, and no "
            "writes outside its memory (a Landlock ruleset or a seccomp filter on opening for write and on fork, "
            "set in the child before it runs candidate code)."
            % (files.get("escaped", 0), files.get("count", 0), fork.get("escaped", 0), fork.get("count", 0))
        )
    alloc = kinds.get("unbounded-allocation", {})
    if alloc.get("classified", {}).get("timeout"):
        out.append(
            "%d of %d unbounded-allocation candidates reached the timeout: an allocation loop runs until the "
            "candidate's own RLIMIT_AS (spack_r3/replay/confine.py memory_bound: 512 MiB over what its process "
            "holds, more for a large image or many threads) or the timeout, whichever comes first, and touching "
            "that much memory is slow on loaded cores." % (alloc["classified"]["timeout"], alloc["count"])
        )
    odd = {kind: k["unexpected"] for kind, k in kinds.items() if k["unexpected"]}
    if odd:
        out.append(
            "Classified outside what the kind may come to: %s (the candidates' rows say which)."
            % "; ".join(
                "%s %s" % (kind, ", ".join("%s %d" % kv for kv in sorted(u.items()))) for kind, u in sorted(odd.items())
            )
        )
    if not verdicts["others_within_1s"]:
        out.append(
            "Over a second, not hangs: %s (a candidate's wall time runs from its progress line to the "
            "next, so a candidate that verifies counts its short study too; allocation loops filling "
            "their memory bound; a SIGSEGV handler that returns into the fault until the timeout)."
            % ", ".join("%s %d" % kv for kv in sorted(verdicts["others_over_1s"].items()))
        )
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demos", default="heat,dense,cg", help="demos, and public kernels (%s)" % ", ".join(PUBLIC))
    ap.add_argument("--hpccg", default=None, metavar="DIR", help="a tree of github.com/Mantevo/HPCCG")
    ap.add_argument("--per-kind", type=int, default=5, help="candidates of each kind per kernel (default 5)")
    ap.add_argument("--timeout", type=float, default=3.0, help="r3 tune --timeout: seconds before a hang")
    ap.add_argument(
        "--memory-limit",
        type=float,
        default=6.0,
        metavar="GIB",
        help="address-space limit of the tune and its workers (default 6 GiB)",
    )
    ap.add_argument("--workspace", default=None)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "faults.json"))
    ap.add_argument("--rejudge", action="store_true", help="the summary of --out again, from its candidates")
    args = ap.parse_args()
    if args.rejudge:
        with open(args.out) as f:
            result = json.load(f)
        for d in result["demos"]:
            d.setdefault("timeout_s", result["settings"]["timeout_s"])
        result["summary"] = summarize(result["demos"], result["summary"]["escaped_effects"])
        write_and_print(result, args.out)
        return
    args.memory_limit = int(args.memory_limit * (1 << 30))
    ws = args.workspace or tempfile.mkdtemp(prefix="r3-bench-faults-")
    markers = os.path.join(ws, "markers")
    os.makedirs(markers, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    demos = []
    start = time.monotonic()
    with open(os.path.join(ws, "tune.log"), "w") as log:
        for demo in args.demos.split(","):
            print("==> %s" % demo, flush=True)
            demos.append(bench_demo(demo, args, ws, markers, env, log))
            print(
                "    exit %s, %d candidates served in %.0fs"
                % (demos[-1]["exit_status"], demos[-1]["served"], demos[-1]["seconds"]),
                flush=True,
            )
    time.sleep(7)  # the forked processes' last markers (they sleep at most 6 s)
    summary = summarize(demos, sorted(os.listdir(markers)))
    result = {
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "seconds": round(time.monotonic() - start, 1),
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
        },
        "settings": {
            "per_kind": args.per_kind,
            "timeout_s": args.timeout,
            "memory_limit_gib": args.memory_limit / (1 << 30),
            "workspace": ws,
        },
        "target": "every hostile kind classified, no wrong or racy candidate a winner, the study intact; "
        "at most the timeout per hang, a second or less per other candidate",
        "summary": summary,
        "demos": demos,
    }
    write_and_print(result, args.out)


def write_and_print(result, out):
    summary = result["summary"]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(
        "%-22s %5s %-44s %6s %8s %8s %7s" % ("kind", "count", "classified", "winner", "wall med", "wall max", "escaped")
    )
    for kind, k in summary["kinds"].items():
        print(
            "%-22s %5d %-44s %6d %8s %8s %7d"
            % (
                kind,
                k["count"],
                ", ".join("%s %d" % kv for kv in sorted(k["classified"].items())),
                k["winner"],
                k["wall_s_median"],
                k["wall_s_max"],
                k["escaped"],
            )
        )
    print(
        "wrong or racy winners: %d; studies intact: %s; exit: %s; escaped: %d"
        % (
            summary["wrong_or_racy_winners"],
            summary["studies_intact"],
            summary["exit_status"],
            len(summary["escaped_effects"]),
        )
    )
    print("verdicts: %s" % json.dumps(summary["verdicts"]))
    for line in summary["findings"]:
        print("- " + line)
    print("wrote %s" % out)


if __name__ == "__main__":
    main()
