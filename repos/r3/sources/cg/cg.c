/* cg: unpreconditioned conjugate gradient for A x = b, where A is the 2-D Poisson
 * matrix (5-point Laplacian, Dirichlet boundary) on an m x m grid stored in CSR and
 * b is a fixed smooth right-hand side.
 *
 * Self-check: after the solve the true residual ||b - A x|| / ||b|| (recomputed with
 * spmv, not the recursively updated one) must be at most 10 * tol.
 *
 * usage: cg [m] [maxit] [tol]     exit status 0 iff the self-check passes
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cg.h"

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
        fprintf(stderr, "cg: out of memory\n");
        exit(2);
    }
    return p;
}

/* The 5-point Laplacian on an m x m grid: 4 on the diagonal, -1 for each neighbour. */
static csr_t *poisson2d(int m)
{
    csr_t *A = xmalloc(sizeof *A);
    int n = m * m;
    A->n = n;
    A->rowptr = xmalloc((size_t)(n + 1) * sizeof(int));
    A->colidx = xmalloc((size_t)5 * n * sizeof(int));
    A->val = xmalloc((size_t)5 * n * sizeof(double));
    int k = 0;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < m; j++) {
            int row = i * m + j;
            A->rowptr[row] = k;
            if (i > 0) { A->colidx[k] = row - m; A->val[k++] = -1.0; }
            if (j > 0) { A->colidx[k] = row - 1; A->val[k++] = -1.0; }
            A->colidx[k] = row; A->val[k++] = 4.0;
            if (j < m - 1) { A->colidx[k] = row + 1; A->val[k++] = -1.0; }
            if (i < m - 1) { A->colidx[k] = row + m; A->val[k++] = -1.0; }
        }
    }
    A->rowptr[n] = k;
    A->nnz = k;
    return A;
}

static void csr_free(csr_t *A)
{
    free(A->rowptr);
    free(A->colidx);
    free(A->val);
    free(A);
}

int main(int argc, char **argv)
{
    int m = argc > 1 ? atoi(argv[1]) : 640;
    int maxit = argc > 2 ? atoi(argv[2]) : 4000;
    double tol = argc > 3 ? atof(argv[3]) : 1e-8;
    if (m < 2 || maxit < 1 || !(tol > 0.0)) {
        fprintf(stderr, "usage: cg [m>=2] [maxit>=1] [tol>0]\n");
        return 2;
    }

    csr_t *A = poisson2d(m);
    int n = A->n;
    double *b = xmalloc(n * sizeof(double));
    double *x = xmalloc(n * sizeof(double));
    double *r = xmalloc(n * sizeof(double));
    double *p = xmalloc(n * sizeof(double));
    double *q = xmalloc(n * sizeof(double));
    const double pi = 3.14159265358979323846;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++)
            b[i * m + j] = 1.0 + sin(pi * (i + 1) / (m + 1)) * sin(2.0 * pi * (j + 1) / (m + 1));
    for (int i = 0; i < n; i++) {
        x[i] = 0.0;
        r[i] = b[i];
        p[i] = b[i];
    }

    double t0 = now();
    double bnorm = sqrt(dot(n, b, b));
    double rr = dot(n, r, r);
    int it = 0;
    while (it < maxit && sqrt(rr) > tol * bnorm) {
        spmv(A, p, q);
        double alpha = rr / dot(n, p, q);
        axpy(n, alpha, p, x);
        axpy(n, -alpha, q, r);
        double rr_new = dot(n, r, r);
        xpay(n, r, rr_new / rr, p);
        rr = rr_new;
        it++;
    }
    double elapsed = now() - t0;

    /* self-check: true residual */
    spmv(A, x, q);
    for (int i = 0; i < n; i++)
        q[i] = b[i] - q[i];
    double relres = sqrt(dot(n, q, q)) / bnorm;
    int ok = relres <= 10.0 * tol; /* false for NaN */

    printf("cg: m=%d n=%d nnz=%d iterations=%d relres=%.3e tol=%g time=%.3fs %s\n", m, n,
           A->nnz, it, relres, tol, elapsed, ok ? "PASSED" : "FAILED");
    if (!ok)
        fprintf(stderr, "cg: self-check failed: true residual %.3e > 10 * tol = %.3e\n", relres,
                10.0 * tol);
    csr_free(A);
    free(b);
    free(x);
    free(r);
    free(p);
    free(q);
    return ok ? 0 : 1;
}
