#ifndef R3TVEC_H
#define R3TVEC_H
#include <stddef.h>
double r3tvec_dot(const double *x, const double *y, size_t n);
void r3tvec_axpy(double a, const double *x, double *y, size_t n);
double r3tvec_norm(const double *x, size_t n);
#endif
