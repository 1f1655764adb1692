#ifndef HEAT_H
#define HEAT_H

/* One explicit time step of the 2-D heat equation on an n x n grid (row-major,
 * boundary rows/columns held fixed): v = u + alpha * laplacian(u) in the interior. */
void jacobi_step(int n, const double *restrict u, double *restrict v, double alpha);

/* Sum of squares of the discrete Laplacian of u over the interior. */
double residual2(int n, const double *u);

#endif
