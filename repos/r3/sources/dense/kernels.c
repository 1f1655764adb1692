#include "dense.h"

void matmul(int n, const double *a, const double *b, double *c)
{
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            c[i * n + j] = 0.0;
            for (int k = 0; k < n; k++)
                c[i * n + j] += a[i * n + k] * b[k * n + j];
        }
    }
}

void covariance(int m, int n, const double *data, double *mean, double *cov)
{
    for (int j = 0; j < n; j++) {
        mean[j] = 0.0;
        for (int k = 0; k < m; k++)
            mean[j] += data[k * n + j];
        mean[j] /= m;
    }
    for (int i = 0; i < n; i++) {
        for (int j = i; j < n; j++) {
            cov[i * n + j] = 0.0;
            for (int k = 0; k < m; k++)
                cov[i * n + j] += (data[k * n + i] - mean[i]) * (data[k * n + j] - mean[j]);
            cov[i * n + j] /= m - 1;
            cov[j * n + i] = cov[i * n + j];
        }
    }
}
