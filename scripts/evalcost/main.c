/* Calls each kernel of relax.c once on the same data and prints a checksum. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N (1 << 15)
void relax_1ms(double *restrict a, const double *restrict b);
void relax_10ms(double *restrict a, const double *restrict b);
void relax_100ms(double *restrict a, const double *restrict b);
void relax_1s(double *restrict a, const double *restrict b);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(void) {
    double *a = calloc(N, sizeof *a), *b = malloc(N * sizeof *b), s = 0;
    for (long i = 0; i < N; i++) b[i] = (i % 17) * 0.125;
    void (*kernels[])(double *restrict, const double *restrict) = {relax_1ms, relax_10ms, relax_100ms, relax_1s};
    const char *names[] = {"relax_1ms", "relax_10ms", "relax_100ms", "relax_1s"};
    for (int k = 0; k < 4; k++) {
        double t0 = now();
        kernels[k](a, b);
        fprintf(stderr, "%s %.4f s\n", names[k], now() - t0);
    }
    for (long i = 0; i < N; i++) s += a[i];
    printf("%.17g\n", s);
    return 0;
}
