/* Calls matmul.c's kernel once on fixed data and prints a checksum. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef N
#define N 400
#endif
void matmul(double (*restrict c)[N], const double (*restrict a)[N], const double (*restrict b)[N]);

int main(void) {
    double(*a)[N] = malloc(sizeof(double[N][N])), (*b)[N] = malloc(sizeof(double[N][N]));
    double(*c)[N] = calloc(N, sizeof(double[N])), s = 0;
    struct timespec t0, t1;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            a[i][j] = ((i * 7 + j) % 13) * 0.25;
            b[i][j] = ((i + 3 * j) % 11) * 0.125;
        }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    matmul(c, (const double(*)[N])a, (const double(*)[N])b);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "matmul %.4f s\n", (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) s += c[i][j];
    printf("%.17g\n", s);
    return 0;
}
