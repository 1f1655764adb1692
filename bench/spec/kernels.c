/* PolyBench-shaped kernels whose sizes are run-time arguments (bench_search.py --specialize):
   the build cannot know the trip counts and row strides; a recording can. */

/* mvt-like: y = A x for an n x m row-major matrix */
void matvec(int n, int m, const double *a, const double *x, double *y)
{
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int j = 0; j < m; j++)
            s += a[i * m + j] * x[j];
        y[i] = s;
    }
}

/* 2-D 5-point stencil on an n x m grid (row stride m) */
void stencil2d(int n, int m, const double *u, double *v)
{
    for (int i = 1; i < n - 1; i++)
        for (int j = 1; j < m - 1; j++)
            v[i * m + j] = 0.2 * (u[i * m + j] + u[(i - 1) * m + j] + u[(i + 1) * m + j]
                                  + u[i * m + j - 1] + u[i * m + j + 1]);
}

/* syrk-like: the lower triangle of C = A A^T for an n x k matrix A */
void syrk(int n, int k, const double *a, double *c)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double s = 0.0;
            for (int l = 0; l < k; l++)
                s += a[i * k + l] * a[j * k + l];
            c[i * n + j] = s;
        }
}
