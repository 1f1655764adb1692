/* heat: 2-D heat equation, explicit Euler in time, 5-point stencil in space.
 *
 * Boundary: u = 1 on the top and bottom rows, u = 0 on the left and right columns
 * (corners 0.5); interior starts at 0. The problem is symmetric under both
 * reflections, so the solution must stay symmetric; for alpha <= 1/4 the update is a
 * convex combination, so every value must stay within the boundary range [0, 1]
 * (maximum principle), and the residual (norm of the discrete Laplacian) must decay.
 *
 * usage: heat [n] [steps] [alpha]     exit status 0 iff the self-check passes
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "heat.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void set_boundary(int n, double *u)
{
    for (int j = 0; j < n; j++) {
        u[j] = 1.0;
        u[(long)(n - 1) * n + j] = 1.0;
    }
    for (int i = 1; i < n - 1; i++) {
        u[(long)i * n] = 0.0;
        u[(long)i * n + n - 1] = 0.0;
    }
    u[0] = u[n - 1] = u[(long)(n - 1) * n] = u[(long)n * n - 1] = 0.5;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1024;
    int steps = argc > 2 ? atoi(argv[2]) : 4000;
    double alpha = argc > 3 ? atof(argv[3]) : 0.24;
    if (n < 4 || steps < 1 || !(alpha > 0.0)) {
        fprintf(stderr, "usage: heat [n>=4] [steps>=1] [alpha>0]\n");
        return 2;
    }

    size_t bytes = (size_t)n * n * sizeof(double);
    double *u = malloc(bytes);
    double *v = malloc(bytes);
    if (!u || !v) {
        fprintf(stderr, "heat: out of memory\n");
        return 2;
    }
    memset(u, 0, bytes);
    set_boundary(n, u);
    memcpy(v, u, bytes); /* v keeps the same fixed boundary */

    double res0 = sqrt(residual2(n, u));
    double t0 = now();
    for (int s = 0; s < steps; s++) {
        jacobi_step(n, u, v, alpha);
        double *t = u;
        u = v;
        v = t;
    }
    double elapsed = now() - t0;
    double res = sqrt(residual2(n, u));

    /* self-check */
    double umin = INFINITY, umax = -INFINITY, asym = 0.0, sum = 0.0;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            double x = u[(long)i * n + j];
            if (!(x >= umin)) umin = x; /* also catches NaN */
            if (!(x <= umax)) umax = x;
            double a = fabs(x - u[(long)(n - 1 - i) * n + j]);
            double b = fabs(x - u[(long)i * n + (n - 1 - j)]);
            if (!(a <= asym)) asym = a;
            if (!(b <= asym)) asym = b;
            sum += x;
        }
    }
    const char *fail = NULL;
    if (!(umin >= -1e-12 && umax <= 1.0 + 1e-12))
        fail = "maximum principle violated";
    else if (!(asym <= 1e-10))
        fail = "solution not symmetric";
    else if (!(res < res0))
        fail = "residual did not decay";

    printf("heat: n=%d steps=%d alpha=%g mean=%.10f residual=%.6e (initial %.6e) "
           "time=%.3fs %s\n",
           n, steps, alpha, sum / ((double)n * n), res, res0, elapsed,
           fail ? "FAILED" : "PASSED");
    if (fail)
        fprintf(stderr, "heat: self-check failed: %s (min=%g max=%g asym=%g)\n", fail, umin,
                umax, asym);
    free(u);
    free(v);
    return fail ? 1 : 0;
}
