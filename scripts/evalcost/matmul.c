/* A small dense matrix product, C += A B on N x N doubles, in the loop order (i, j, k) that
 * Polly's matrix-multiplication pattern and its tiling transform: runs of about 0.1 s built
 * -O3 (bench_evalcost.py --polly). Written for this project. */
#ifndef N
#define N 400
#endif

void matmul(double (*restrict c)[N], const double (*restrict a)[N], const double (*restrict b)[N]) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            for (int k = 0; k < N; k++) c[i][j] += a[i][k] * b[k][j];
}
