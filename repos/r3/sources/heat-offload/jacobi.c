#include "heat.h"

/* The same stencil as heat's, as OpenMP target regions: each step is a device kernel
 * (on the host plugin, libomptarget runs it on the CPU as a device). */
void jacobi_step(int n, const double *restrict u, double *restrict v, double alpha)
{
    long cells = (long)n * n;
#pragma omp target teams distribute parallel for map(to: u[0:cells]) map(tofrom: v[0:cells])
    for (int i = 1; i < n - 1; i++) {
        const double *up = u + (long)(i - 1) * n;
        const double *row = u + (long)i * n;
        const double *down = u + (long)(i + 1) * n;
        double *out = v + (long)i * n;
        for (int j = 1; j < n - 1; j++) {
            double lap = (up[j] + down[j]) + (row[j - 1] + row[j + 1]) - 4.0 * row[j];
            out[j] = row[j] + alpha * lap;
        }
    }
}

double residual2(int n, const double *u)
{
    double sum = 0.0;
    long cells = (long)n * n;
#pragma omp target teams distribute parallel for reduction(+ : sum) map(to: u[0:cells]) map(tofrom: sum)
    for (int i = 1; i < n - 1; i++) {
        const double *row = u + (long)i * n;
        for (int j = 1; j < n - 1; j++) {
            double lap = (row[j - n] + row[j + n]) + (row[j - 1] + row[j + 1]) - 4.0 * row[j];
            sum += lap * lap;
        }
    }
    return sum;
}
