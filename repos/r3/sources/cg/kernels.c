#include "cg.h"

void spmv(const csr_t *A, const double *x, double *y)
{
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
    }
}

double dot(int n, const double *x, const double *y)
{
    double sum = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (int i = 0; i < n; i++)
        sum += x[i] * y[i];
    return sum;
}

void axpy(int n, double a, const double *x, double *y)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

void xpay(int n, const double *x, double a, double *y)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++)
        y[i] = x[i] + a * y[i];
}
