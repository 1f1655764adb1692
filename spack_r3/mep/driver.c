/* r3 mep driver: maps the recorded memory at its recorded addresses, calls the kernel
 * with the recorded arguments, checks the result against the recording and times it.
 *
 *   ./mep [RUNS [TOLERANCE]]   (default: 25 timed runs, the capture's tolerance;
 *                               exit 0: verified, 1: mismatch, 2: cannot run)
 *
 * data/pre.bin and data/post.bin are r3 memory images (magic "R3MEM1\0\0", then records
 * {uint64 addr, size, kind; bytes, zero-padded to 8}); kind 7 is zeros with no bytes.
 * mep.h (written by r3 mep) holds the ranges to map, the arguments and the kernel's
 * prototype. Compiles as C or C++. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "mep.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0
#endif
#define MOST_TRIES 16 /* new address-space layouts tried when ours covers a recorded range */

#ifdef __cplusplus
extern "C" {
#endif
/* Frees of recorded (arena) memory: the kernel's IR calls these instead of free(). */
void __r3_replay_free(void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (a >= MEP_ARENA_BASE && a < MEP_ARENA_END)
        return;
    free(p);
}
void __r3_replay_free_sized(void *p, unsigned long n)
{
    (void)n;
    __r3_replay_free(p);
}
#ifdef __cplusplus
}
#endif

struct region {
    uint64_t addr, size, kind;
    const unsigned char *data; /* NULL: zeros */
};

static struct region *read_image(const char *path, size_t *count)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "mep: cannot read %s: %s\n", path, strerror(errno));
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long total = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = (unsigned char *)malloc(total > 0 ? (size_t)total : 1);
    if (!buf || fread(buf, 1, (size_t)total, f) != (size_t)total || total < 8 || memcmp(buf, "R3MEM1\0\0", 8)) {
        fprintf(stderr, "mep: %s is not a memory image\n", path);
        exit(2);
    }
    fclose(f);
    size_t n = 0, cap = 64, pos = 8;
    struct region *out = (struct region *)malloc(cap * sizeof *out);
    while (pos + 24 <= (size_t)total) {
        uint64_t h[3];
        memcpy(h, buf + pos, 24);
        pos += 24;
        uint64_t stored = h[2] == 7 ? 0 : h[1];
        if (pos + stored > (size_t)total) {
            fprintf(stderr, "mep: %s is truncated\n", path);
            exit(2);
        }
        if (n == cap)
            out = (struct region *)realloc(out, (cap *= 2) * sizeof *out);
        out[n].addr = h[0];
        out[n].size = h[1];
        out[n].kind = h[2];
        out[n].data = h[2] == 7 ? NULL : buf + pos;
        n++;
        pos += stored + (8 - stored % 8) % 8;
    }
    *count = n;
    return out;
}

/* Map every recorded range at its address; 0, or -1 when one of ours is in the way. */
static int map_ranges(void)
{
    size_t n = sizeof mep_ranges / sizeof mep_ranges[0];
    for (size_t i = 0; i < n; i++) {
        uint64_t lo = mep_ranges[i][0], hi = mep_ranges[i][1];
        void *got = mmap((void *)(uintptr_t)lo, hi - lo, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | MAP_NORESERVE, -1, 0);
        if (got == (void *)(uintptr_t)lo)
            continue;
        if (got != MAP_FAILED)
            munmap(got, hi - lo);
        else if (errno != EEXIST) {
            fprintf(stderr, "mep: cannot map recorded memory at 0x%llx-0x%llx: %s\n", (unsigned long long)lo,
                    (unsigned long long)hi, strerror(errno));
            exit(2);
        }
        return -1;
    }
    return 0;
}

static void restore(const struct region *pre, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        void *at = (void *)(uintptr_t)pre[i].addr;
        if (pre[i].data)
            memcpy(at, pre[i].data, pre[i].size);
        else
            memset(at, 0, pre[i].size);
    }
}

static double rel_error(const void *got, const void *want, size_t size, int dbl)
{
    double worst = 0;
    size_t step = dbl ? 8 : 4;
    for (size_t i = 0; i + step <= size; i += step) {
        double a, b;
        if (dbl) {
            memcpy(&a, (const char *)got + i, 8);
            memcpy(&b, (const char *)want + i, 8);
        } else {
            float fa, fb;
            memcpy(&fa, (const char *)got + i, 4);
            memcpy(&fb, (const char *)want + i, 4);
            a = fa;
            b = fb;
        }
        if (a == b || (isnan(a) && isnan(b)))
            continue;
        double tiny = dbl ? 2.2250738585072014e-308 : 1.17549435e-38;
        double e = fabs(a - b) / (fabs(b) > tiny ? fabs(b) : tiny);
        if (isnan(e))
            e = INFINITY;
        if (e > worst)
            worst = e;
    }
    return worst;
}

/* Compare memory (and the return value) with the recording: 1 verified, 0 not. */
static int has_tolerance = MEP_HAS_TOLERANCE;
static double tolerance = MEP_TOLERANCE;

static int check(const struct region *post, size_t n, const unsigned char *ret, double *worst_out)
{
    double worst = 0;
    size_t bad = 0;
    const char *where = "";
    static char buf[128];
    for (size_t i = 0; i < n; i++) {
        const unsigned char *at = (const unsigned char *)(uintptr_t)post[i].addr;
        if (!memcmp(at, post[i].data, post[i].size))
            continue;
        for (size_t j = 0; j < post[i].size; j++)
            bad += at[j] != post[i].data[j];
        double e = 0;
        if (MEP_FP_DOUBLE && post[i].size % 8 == 0)
            e = rel_error(at, post[i].data, post[i].size, 1);
        if (MEP_FP_FLOAT && post[i].size % 4 == 0) {
            double f = rel_error(at, post[i].data, post[i].size, 0);
            e = f > e ? f : e;
        }
        if (!MEP_FP_DOUBLE && !MEP_FP_FLOAT)
            e = INFINITY;
        if (e >= worst || !*where) {
            snprintf(buf, sizeof buf, "memory at 0x%llx (%llu bytes) differs", (unsigned long long)post[i].addr,
                     (unsigned long long)post[i].size);
            where = buf;
        }
        worst = e > worst ? e : worst;
    }
    if (MEP_RET_SIZE && memcmp(ret, mep_ret, MEP_RET_SIZE)) {
        for (int j = 0; j < MEP_RET_SIZE; j++)
            bad += ret[j] != mep_ret[j];
        double e = MEP_RET_FP ? rel_error(ret, mep_ret, MEP_RET_SIZE, MEP_RET_SIZE == 8) : INFINITY;
        worst = e > worst ? e : worst;
        if (!*where)
            where = "the return value differs";
    }
    *worst_out = worst;
    if (!bad)
        return 1;
    int ok = has_tolerance && worst <= tolerance;
    if (!ok) {
        if (has_tolerance)
            fprintf(stderr, "mep: %s: %s; %zu bytes differ, max relative error %.3g (tolerance %g)\n", MEP_KERNEL,
                    where, bad, worst, tolerance);
        else
            fprintf(stderr, "mep: %s: %s; %zu bytes differ, max relative error %.3g (exact results expected)\n",
                    MEP_KERNEL, where, bad, worst);
    }
    return ok;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char *human(double s, char *buf)
{
    if (s < 1e-3)
        sprintf(buf, "%.2f us", s * 1e6);
    else if (s < 1)
        sprintf(buf, "%.3f ms", s * 1e3);
    else
        sprintf(buf, "%.3f s", s);
    return buf;
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 25;
    if (argc > 2) {
        char *end;
        tolerance = strtod(argv[2], &end);
        has_tolerance = 1;
        if (*end || !(tolerance >= 0))
            runs = 0;
    }
    if (runs < 1 || argc > 3) {
        fprintf(stderr, "usage: %s [RUNS [TOLERANCE]]\n", argv[0]);
        return 2;
    }
    /* The recorded ranges first, before anything of ours can land in them. */
    if (map_ranges() != 0) {
        /* our own stack, heap or code covers a recorded range: a new layout (ASLR) may not */
        const char *tries = getenv("MEP_TRIES");
        int t = tries ? atoi(tries) : 0;
        if (t >= MOST_TRIES) {
            fprintf(stderr, "mep: this process's own memory covers the recorded addresses (%d tries)\n", t);
            return 2;
        }
        char next[16];
        snprintf(next, sizeof next, "%d", t + 1);
        setenv("MEP_TRIES", next, 1);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "mep: cannot run again: %s\n", strerror(errno));
        return 2;
    }
    size_t npre, npost;
    struct region *pre = read_image("data/pre.bin", &npre);
    struct region *post = read_image("data/post.bin", &npost);
#ifdef _OPENMP
    if (MEP_THREADS > 0 && !getenv("OMP_NUM_THREADS")) /* the recorded threads, unless told otherwise */
        omp_set_num_threads(MEP_THREADS);
#ifdef MEP_SCHEDULE
    omp_set_schedule(MEP_SCHEDULE, MEP_CHUNK);
#endif
#endif
    unsigned char ret[32] = {0};
    double worst = 0;
    restore(pre, npre);
    mep_call(ret); /* the check run, untimed */
    int ok = check(post, npost, ret, &worst);
    double *times = (double *)malloc(runs * sizeof *times);
    for (int r = 0; ok && r < runs; r++) {
        restore(pre, npre);
        double t0 = now();
        mep_call(ret);
        times[r] = now() - t0;
    }
    if (ok) /* the last timed run must be right too */
        ok = check(post, npost, ret, &worst);
    if (!ok) {
        printf("%s: WRONG OUTPUT (max relative error %.3g)\n", MEP_KERNEL, worst);
        return 1;
    }
    qsort(times, runs, sizeof *times, by_value);
    char a[32], b[32], c[32], d[32];
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("%s: verified (max relative error %.3g%s); time median %s, quartiles %s - %s, min %s over %d runs, "
           "%d thread%s\n", MEP_KERNEL, worst, has_tolerance ? ", within the tolerance" : "", human(times[runs / 2], a), human(times[runs / 4], b),
           human(times[(3 * runs) / 4], c), human(times[0], d), runs, threads, threads == 1 ? "" : "s");
    printf("median_s=%.9g q1_s=%.9g q3_s=%.9g\n", times[runs / 2], times[runs / 4], times[(3 * runs) / 4]);
    return 0;
}
