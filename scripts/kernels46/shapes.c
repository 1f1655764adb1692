/* Kernels of the shapes issue 46 names (stencils, chains of products, transposed
 * products), written for r3's own benchmarks and tests. Sizes, overridable with -D: N
 * (rows and columns of the 2-D stencils' grids), M3 (the 3-D grid's edge), NM (the
 * products' matrices); main.c sets STEPS (time steps). */
#include <math.h>

#ifndef N
#define N 96
#endif
#ifndef NM
#define NM N
#endif
#ifndef M3
#define M3 24
#endif

/* Jacobi-style 2-D sweep: the 5-point average into b, then b copied back. */
void jacobi2d(int steps, int n, double a[N][N], double b[N][N])
{
    for (int t = 0; t < steps; t++) {
        for (int i = 1; i < n - 1; i++)
            for (int j = 1; j < n - 1; j++)
                b[i][j] = 0.2 * (a[i][j] + a[i - 1][j] + a[i + 1][j] + a[i][j - 1] + a[i][j + 1]);
        for (int i = 1; i < n - 1; i++)
            for (int j = 1; j < n - 1; j++)
                a[i][j] = b[i][j];
    }
}

/* Heat equation in 3-D, two buffers used in turn (each step writes one from the other). */
void heat3d(int steps, int n, double u[M3][M3][M3], double v[M3][M3][M3])
{
    for (int t = 0; t < steps; t++) {
        for (int i = 1; i < n - 1; i++)
            for (int j = 1; j < n - 1; j++)
                for (int k = 1; k < n - 1; k++)
                    v[i][j][k] = u[i][j][k] + 0.125 * (u[i + 1][j][k] - 2.0 * u[i][j][k] + u[i - 1][j][k])
                        + 0.125 * (u[i][j + 1][k] - 2.0 * u[i][j][k] + u[i][j - 1][k])
                        + 0.125 * (u[i][j][k + 1] - 2.0 * u[i][j][k] + u[i][j][k - 1]);
        for (int i = 1; i < n - 1; i++)
            for (int j = 1; j < n - 1; j++)
                for (int k = 1; k < n - 1; k++)
                    u[i][j][k] = v[i][j][k] + 0.125 * (v[i + 1][j][k] - 2.0 * v[i][j][k] + v[i - 1][j][k])
                        + 0.125 * (v[i][j + 1][k] - 2.0 * v[i][j][k] + v[i][j - 1][k])
                        + 0.125 * (v[i][j][k + 1] - 2.0 * v[i][j][k] + v[i][j][k - 1]);
    }
}

/* A 2-D electromagnetic-style update: two field components from a third, then the third
 * from both, every step (an FDTD-like leapfrog, no source term). */
void fdtd2d(int steps, int n, double ex[N][N], double ey[N][N], double hz[N][N])
{
    for (int t = 0; t < steps; t++) {
        for (int i = 1; i < n; i++)
            for (int j = 0; j < n; j++)
                ey[i][j] = ey[i][j] - 0.5 * (hz[i][j] - hz[i - 1][j]);
        for (int i = 0; i < n; i++)
            for (int j = 1; j < n; j++)
                ex[i][j] = ex[i][j] - 0.5 * (hz[i][j] - hz[i][j - 1]);
        for (int i = 0; i < n - 1; i++)
            for (int j = 0; j < n - 1; j++)
                hz[i][j] = hz[i][j] - 0.7 * (ex[i][j + 1] - ex[i][j] + ey[i + 1][j] - ey[i][j]);
    }
}

/* Gauss-Seidel-style in-place relaxation: each point from its 9 neighbours, new and old. */
void seidel2d(int steps, int n, double a[N][N])
{
    for (int t = 0; t < steps; t++)
        for (int i = 1; i < n - 1; i++)
            for (int j = 1; j < n - 1; j++)
                a[i][j] = (a[i - 1][j - 1] + a[i - 1][j] + a[i - 1][j + 1] + a[i][j - 1] + a[i][j]
                           + a[i][j + 1] + a[i + 1][j - 1] + a[i + 1][j] + a[i + 1][j + 1]) / 9.0;
}

/* Two products in a chain, d = (a b) c, with the intermediate kept. */
void chain2(int n, double a[NM][NM], double b[NM][NM], double c[NM][NM], double tmp[NM][NM], double d[NM][NM])
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            tmp[i][j] = 0.0;
            for (int k = 0; k < n; k++)
                tmp[i][j] += a[i][k] * b[k][j];
        }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            d[i][j] = 0.0;
            for (int k = 0; k < n; k++)
                d[i][j] += tmp[i][k] * c[k][j];
        }
}

/* y = A^T x, and the squared norm of the result. */
double matvec_t(int n, double a[NM][NM], const double *x, double *y)
{
    double norm = 0.0;
    for (int j = 0; j < n; j++)
        y[j] = 0.0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            y[j] += a[i][j] * x[i];
    for (int j = 0; j < n; j++)
        norm += y[j] * y[j];
    return norm;
}

/* Symmetric rank-k update of the lower triangle: c = beta c + alpha a a^T. */
void syrk_lower(int n, int m, double alpha, double beta, double c[NM][NM], double a[NM][NM])
{
    for (int i = 0; i < n; i++) {
        for (int j = 0; j <= i; j++)
            c[i][j] *= beta;
        for (int k = 0; k < m; k++)
            for (int j = 0; j <= i; j++)
                c[i][j] += alpha * a[i][k] * a[j][k];
    }
}

/* The sum of squares of a matrix's entries: a reduction over a whole nest. */
double frobenius(int n, double a[NM][NM])
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            s += a[i][j] * a[i][j];
    return s;
}
