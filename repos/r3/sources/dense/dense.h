#ifndef DENSE_H
#define DENSE_H

/* c = a b for n x n row-major matrices: c[i*n+j] = sum_k a[i*n+k] * b[k*n+j]
 * (naive i-j-k triple loop; c must not overlap a or b). */
void matmul(int n, const double *a, const double *b, double *c);

/* Sample covariance of m observations (rows) of n variables (columns) of the m x n
 * row-major matrix data: mean[j] = column means, cov (n x n, symmetric) =
 * sum_k (data[k][i] - mean[i]) (data[k][j] - mean[j]) / (m - 1). m must be >= 2. */
void covariance(int m, int n, const double *data, double *mean, double *cov);

#endif
