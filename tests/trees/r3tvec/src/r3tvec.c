#include <math.h>
#include "r3tvec.h"

double r3tvec_dot(const double *x, const double *y, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

void r3tvec_axpy(double a, const double *x, double *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

double r3tvec_norm(const double *x, size_t n) { return sqrt(r3tvec_dot(x, x, n)); }
