/* dense: a chain of dense matrix products followed by a covariance matrix.
 *
 * A, B, C are n x n matrices filled from fixed integer formulas. Each of the reps
 * rounds computes T = X B and D = T C with the naive triple-loop matmul (X = A in the
 * first round) and feeds D, scaled to max |D| = 1, back as the next X. Finally the
 * covariance of the rows of X (n observations of n variables) is computed.
 *
 * Self-check, independent of the summation order the compiler picks:
 *  - every product P = L R satisfies P x = L (R x) for a fixed vector x, to a relative
 *    tolerance measured against |L| (|R| |x|);
 *  - the column means match a separate computation, the covariance is symmetric, its
 *    diagonal is non-negative and x' cov x equals the sample variance of the
 *    projections (X - mean) x, all to a relative tolerance.
 * The optional third argument injects an error of that relative size into one entry of
 * every product and of the covariance (a stand-in for a miscompiled kernel), which the
 * self-check must catch.
 *
 * usage: dense [n] [reps] [fault]     exit status 0 iff the self-check passes
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dense.h"

#define TOL 1e-10

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "dense: out of memory\n");
        exit(2);
    }
    return p;
}

static double maxabs(long len, const double *v)
{
    double m = 0.0;
    for (long i = 0; i < len; i++)
        if (!(fabs(v[i]) <= m)) m = fabs(v[i]); /* NaN propagates */
    return m;
}

/* y = M x and, with absolute values, ya = |M| xa (an error scale for y). */
static void matvec(int n, const double *m, const double *x, const double *xa, double *y,
                   double *ya)
{
    for (int i = 0; i < n; i++) {
        double s = 0.0, sa = 0.0;
        for (int j = 0; j < n; j++) {
            s += m[(long)i * n + j] * x[j];
            sa += fabs(m[(long)i * n + j]) * xa[j];
        }
        y[i] = s;
        ya[i] = sa;
    }
}

/* Relative error of p = l r, checked as max_i |(p x)_i - (l (r x))_i| / max_i (|l| |r| |x|)_i.
 * w is scratch of 5 n doubles. */
static double product_error(int n, const double *l, const double *r, const double *p,
                            const double *x, double *w)
{
    double *rx = w, *rxa = w + n, *lrx = w + 2 * n, *scale = w + 3 * n, *px = w + 4 * n;
    matvec(n, r, x, x, rx, rxa); /* x > 0, so |x| = x */
    matvec(n, l, rx, rxa, lrx, scale);
    matvec(n, p, x, x, px, rx); /* rx: unused scale */
    double err = 0.0, smax = 0.0;
    for (int i = 0; i < n; i++) {
        double e = fabs(px[i] - lrx[i]);
        if (!(e <= err)) err = e;
        if (scale[i] > smax) smax = scale[i];
    }
    return smax > 0.0 ? err / smax : err;
}

/* Relative error of the covariance of the m x n matrix data (see the header comment). */
static double covariance_error(int m, int n, const double *data, const double *mean,
                               const double *cov, const double *x, int *nonneg)
{
    double err = 0.0, dmax = 0.0;
    /* column means, and their scale */
    for (int j = 0; j < n; j++) {
        double s = 0.0, sa = 0.0;
        for (int k = 0; k < m; k++) {
            s += data[(long)k * n + j];
            sa += fabs(data[(long)k * n + j]);
        }
        double e = sa > 0.0 ? fabs(s / m - mean[j]) / (sa / m) : fabs(mean[j]);
        if (!(e <= err)) err = e;
    }
    /* symmetry and the diagonal, against the largest variance */
    *nonneg = 1;
    for (int i = 0; i < n; i++)
        if (!(fabs(cov[(long)i * n + i]) <= dmax)) dmax = fabs(cov[(long)i * n + i]);
    for (int i = 0; i < n; i++) {
        if (!(cov[(long)i * n + i] >= -TOL * dmax)) *nonneg = 0;
        for (int j = i + 1; j < n; j++) {
            double e = fabs(cov[(long)i * n + j] - cov[(long)j * n + i]);
            e = dmax > 0.0 ? e / dmax : e;
            if (!(e <= err)) err = e;
        }
    }
    /* x' cov x against the variance of the projections y = (data - mean) x */
    double q = 0.0, var = 0.0, scale = 0.0;
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int j = 0; j < n; j++)
            s += cov[(long)i * n + j] * x[j];
        q += x[i] * s;
    }
    for (int k = 0; k < m; k++) {
        double y = 0.0, ya = 0.0;
        for (int j = 0; j < n; j++) {
            y += (data[(long)k * n + j] - mean[j]) * x[j];
            ya += (fabs(data[(long)k * n + j]) + fabs(mean[j])) * x[j];
        }
        var += y * y;
        scale += ya * ya;
    }
    var /= m - 1;
    scale /= m - 1;
    double e = scale > 0.0 ? fabs(q - var) / scale : fabs(q - var);
    if (!(e <= err)) err = e;
    return err;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 512;
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    double fault = argc > 3 ? atof(argv[3]) : 0.0;
    if (n < 2 || n > 40000 || reps < 1 || !(fault >= 0.0)) {
        fprintf(stderr, "usage: dense [n in 2..40000] [reps>=1] [fault>=0]\n");
        return 2;
    }

    long nn = (long)n * n;
    double *a = xmalloc(nn * sizeof(double));
    double *b = xmalloc(nn * sizeof(double));
    double *c = xmalloc(nn * sizeof(double));
    double *t = xmalloc(nn * sizeof(double));
    double *d = xmalloc(nn * sizeof(double));
    double *cov = xmalloc(nn * sizeof(double));
    double *mean = xmalloc(n * sizeof(double));
    double *x = xmalloc(n * sizeof(double));
    double *w = xmalloc(5 * (size_t)n * sizeof(double));
    for (long i = 0; i < n; i++) {
        for (long j = 0; j < n; j++) {
            a[i * n + j] = (double)((i * j + 1) % n) / n;
            b[i * n + j] = (double)((i + 2 * j + 3) % n) / n - 0.5;
            c[i * n + j] = (double)((i * i + 3 * j + 1) % n) / n - 0.5;
        }
        x[i] = 0.5 + (double)((7 * i + 3) % n) / n; /* in [0.5, 1.5) */
    }

    long mid = (long)(n / 2) * n + n / 3;
    double mm_err = 0.0;
    double t0 = now();
    for (int r = 0; r < reps; r++) {
        matmul(n, a, b, t);
        if (fault > 0.0) t[mid] += fault * maxabs(nn, t);
        double e = product_error(n, a, b, t, x, w);
        if (!(e <= mm_err)) mm_err = e;

        matmul(n, t, c, d);
        if (fault > 0.0) d[mid] += fault * maxabs(nn, d);
        e = product_error(n, t, c, d, x, w);
        if (!(e <= mm_err)) mm_err = e;

        double s = maxabs(nn, d);
        s = s > 0.0 ? 1.0 / s : 1.0;
        for (long i = 0; i < nn; i++) /* the next round's left factor */
            a[i] = d[i] * s;
    }
    covariance(n, n, a, mean, cov);
    if (fault > 0.0) cov[n - 1] += fault * maxabs(nn, cov);
    double elapsed = now() - t0;

    int nonneg;
    double cov_err = covariance_error(n, n, a, mean, cov, x, &nonneg);
    double trace = 0.0, var = 0.0;
    for (long i = 0; i < n; i++) {
        trace += a[i * n + i];
        var += cov[i * n + i];
    }

    const char *fail = NULL;
    if (!(mm_err <= TOL))
        fail = "matrix product check (P x = L (R x)) failed";
    else if (!nonneg)
        fail = "covariance has a negative variance";
    else if (!(cov_err <= TOL))
        fail = "covariance check (means, symmetry, x' cov x) failed";

    printf("dense: n=%d reps=%d trace=%.10f variance=%.10e product_err=%.2e "
           "covariance_err=%.2e time=%.3fs %s\n",
           n, reps, trace, var, mm_err, cov_err, elapsed, fail ? "FAILED" : "PASSED");
    if (fail)
        fprintf(stderr, "dense: self-check failed: %s (product error %.3e, covariance error "
                "%.3e, tolerance %g)\n", fail, mm_err, cov_err, TOL);
    free(a);
    free(b);
    free(c);
    free(t);
    free(d);
    free(cov);
    free(mean);
    free(x);
    free(w);
    return fail ? 1 : 0;
}
