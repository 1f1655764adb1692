/* The C side of fheat: a norm of the field, column by column through Fortran's row_sum. */
#include <math.h>

double row_sum(const double *a, int m);

double field_norm(const double *a, int m, int n) {
  double s = 0.0;
  for (int j = 0; j < n; j++)
    s += row_sum(a + (long)j * m, m);
  return sqrt(s);
}
