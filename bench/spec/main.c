#include <stdio.h>
#include <stdlib.h>

void matvec(int n, int m, const double *a, const double *x, double *y);
void stencil2d(int n, int m, const double *u, double *v);
void syrk(int n, int k, const double *a, double *c);

/* usage: spec [n] [m] [reps]: every kernel reps times on n x m data */
int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1000, m = argc > 2 ? atoi(argv[2]) : 1000;
    int reps = argc > 3 ? atoi(argv[3]) : 3, k = m / 16;
    double *a = malloc(sizeof(double) * n * m), *x = malloc(sizeof(double) * m), *y = malloc(sizeof(double) * n);
    double *v = malloc(sizeof(double) * n * m), *c = malloc(sizeof(double) * n * n), sum = 0.0;
    for (int i = 0; i < n * m; i++) { a[i] = (i % 17) * 0.125; v[i] = 0.0; }
    for (int j = 0; j < m; j++) x[j] = (j % 5) * 0.25;
    for (int r = 0; r < reps; r++) {
        matvec(n, m, a, x, y);
        stencil2d(n, m, a, v);
        syrk(n / 2, k, a, c);
    }
    for (int i = 0; i < n; i++) sum += y[i];
    for (int i = 0; i < n * m; i += 7) sum += v[i];
    for (int i = 0; i < (n / 2) * (n / 2); i += 3) sum += c[i];
    printf("%.17g\n", sum);
    return 0;
}
