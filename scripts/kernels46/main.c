/* Drives each kernel of shapes.c on data of its own (r3 records them). */
#include <stdio.h>
#include <stdlib.h>

#ifndef N
#define N 96
#endif
#ifndef STEPS
#define STEPS 6
#endif
#define M3 24

void jacobi2d(int, int, double [N][N], double [N][N]);
void heat3d(int, int, double [M3][M3][M3], double [M3][M3][M3]);
void fdtd2d(int, int, double [N][N], double [N][N], double [N][N]);
void seidel2d(int, int, double [N][N]);
void chain2(int, double [N][N], double [N][N], double [N][N], double [N][N], double [N][N]);
double matvec_t(int, double [N][N], const double *, double *);
void syrk_lower(int, int, double, double, double [N][N], double [N][N]);
double frobenius(int, double [N][N]);

static double (*matrix(int seed))[N]
{
    double (*m)[N] = malloc(sizeof(double[N][N]));
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            m[i][j] = ((i * 7 + j * 13 + seed) % 17) * 0.0625 + 1.0 / (i + j + seed + 1);
    return m;
}

int main(void)
{
    int n = N - 1;  /* not a multiple of a tile size: partial tiles run too */
    double (*a)[N] = matrix(1), (*b)[N] = matrix(2), (*c)[N] = matrix(3), (*d)[N] = matrix(4), (*e)[N] = matrix(5);
    double s = 0.0;
    jacobi2d(STEPS, n, a, b);
    fdtd2d(STEPS, n, c, d, e);
    seidel2d(STEPS, n, b);
    double (*u)[M3][M3] = malloc(sizeof(double[M3][M3][M3])), (*v)[M3][M3] = malloc(sizeof(double[M3][M3][M3]));
    for (int i = 0; i < M3 * M3 * M3; i++)
        u[i / (M3 * M3)][i / M3 % M3][i % M3] = v[i / (M3 * M3)][i / M3 % M3][i % M3] = (i % 23) * 0.125;
    heat3d(STEPS, M3, u, v);
    chain2(n, a, b, c, d, e);
    double *x = malloc(N * sizeof(double)), *y = malloc(N * sizeof(double));
    for (int i = 0; i < N; i++)
        x[i] = (i % 5) * 0.25 - 0.5;
    s += matvec_t(n, a, x, y);
    syrk_lower(n, n - 3, 1.5, 0.5, c, b);
    s += frobenius(n, d);
    printf("%g %g %g %g %g\n", s, a[3][4], c[5][2], u[3][3][3], e[7][7]);
    return 0;
}
