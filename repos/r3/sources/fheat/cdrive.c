/* cdrive: a C driver around fheat's Fortran kernels (bind(c) row_sum), the other way round. */
#include <stdio.h>
#include <stdlib.h>

double row_sum(const double *a, int m);

int main(int argc, char **argv) {
  int m = argc > 1 ? atoi(argv[1]) : 4096, reps = argc > 2 ? atoi(argv[2]) : 200;
  double *a = malloc(sizeof(double) * m), s = 0.0;
  for (int i = 0; i < m; i++) a[i] = 1.0 / (i + 1);
  for (int r = 0; r < reps; r++) s += row_sum(a, m);
  printf("sum %.12f\n", s);
  if (s <= 0.0) { puts("check failed"); return 1; }
  puts("check passed");
  return 0;
}
