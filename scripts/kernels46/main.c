/* Drives each kernel of shapes.c on data of its own (r3 records them). */
#include <stdio.h>
#include <stdlib.h>

#ifndef N
#define N 96
#endif
#ifndef NM
#define NM N
#endif
#ifndef M3
#define M3 24
#endif
#ifndef STEPS
#define STEPS 6
#endif

void jacobi2d(int, int, double [N][N], double [N][N]);
void heat3d(int, int, double [M3][M3][M3], double [M3][M3][M3]);
void fdtd2d(int, int, double [N][N], double [N][N], double [N][N]);
void seidel2d(int, int, double [N][N]);
void chain2(int, double [NM][NM], double [NM][NM], double [NM][NM], double [NM][NM], double [NM][NM]);
double matvec_t(int, double [NM][NM], const double *, double *);
void syrk_lower(int, int, double, double, double [NM][NM], double [NM][NM]);
double frobenius(int, double [NM][NM]);

static double *matrix(int rows, int seed)
{
    double *m = malloc(sizeof(double) * rows * rows);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < rows; j++)
            m[i * rows + j] = ((i * 7 + j * 13 + seed) % 17) * 0.0625 + 1.0 / (i + j + seed + 1);
    return m;
}

int main(void)
{
    int n = N - 1, nm = NM - 1;  /* not a multiple of a tile size: partial tiles run too */
    double (*a)[N] = (double (*)[N])matrix(N, 1), (*b)[N] = (double (*)[N])matrix(N, 2);
    double (*c)[N] = (double (*)[N])matrix(N, 3), (*d)[N] = (double (*)[N])matrix(N, 4);
    double (*e)[N] = (double (*)[N])matrix(N, 5);
    double s = 0.0;
    jacobi2d(STEPS, n, a, b);
    fdtd2d(STEPS, n, c, d, e);
    seidel2d(STEPS, n, b);
    double (*u)[M3][M3] = malloc(sizeof(double[M3][M3][M3])), (*v)[M3][M3] = malloc(sizeof(double[M3][M3][M3]));
    for (int i = 0; i < M3 * M3 * M3; i++)
        u[i / (M3 * M3)][i / M3 % M3][i % M3] = v[i / (M3 * M3)][i / M3 % M3][i % M3] = (i % 23) * 0.125;
    heat3d(STEPS, M3, u, v);
    double (*pa)[NM] = (double (*)[NM])matrix(NM, 1), (*pb)[NM] = (double (*)[NM])matrix(NM, 2);
    double (*pc)[NM] = (double (*)[NM])matrix(NM, 3), (*pd)[NM] = (double (*)[NM])matrix(NM, 4);
    double (*pe)[NM] = (double (*)[NM])matrix(NM, 5);
    chain2(nm, pa, pb, pc, pd, pe);
    double *x = malloc(NM * sizeof(double)), *y = malloc(NM * sizeof(double));
    for (int i = 0; i < NM; i++)
        x[i] = (i % 5) * 0.25 - 0.5;
    s += matvec_t(nm, pa, x, y);
    syrk_lower(nm, nm - 3, 1.5, 0.5, pc, pb);
    s += frobenius(nm, pd);
    printf("%g %g %g %g %g %g\n", s, a[3][4], b[5][2], pc[5][2], u[3][3][3], e[7][7]);
    return 0;
}
