#include <math.h>

#include "nbody.h"

double compute_forces(int n, const double *restrict pos, const double *restrict mass,
                      double *restrict acc)
{
    const double eps2 = NBODY_SOFTENING * NBODY_SOFTENING;
    double epot = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : epot)
    for (int i = 0; i < n; i++) {
        const double xi = pos[3 * i], yi = pos[3 * i + 1], zi = pos[3 * i + 2];
        double ax = 0.0, ay = 0.0, az = 0.0, phi = 0.0;
        for (int j = 0; j < n; j++) {
            /* j == i contributes no force (dx = 0); its potential term is removed below */
            double dx = pos[3 * j] - xi;
            double dy = pos[3 * j + 1] - yi;
            double dz = pos[3 * j + 2] - zi;
            double r2 = dx * dx + dy * dy + dz * dz + eps2;
            double inv = 1.0 / sqrt(r2);
            double minv = mass[j] * inv;
            double minv3 = minv * inv * inv;
            ax += minv3 * dx;
            ay += minv3 * dy;
            az += minv3 * dz;
            phi += minv;
        }
        phi -= mass[i] / NBODY_SOFTENING; /* self term */
        acc[3 * i] = ax;
        acc[3 * i + 1] = ay;
        acc[3 * i + 2] = az;
        epot -= 0.5 * mass[i] * phi;
    }
    return epot;
}

double kinetic_energy(int n, const double *vel, const double *mass)
{
    double ekin = 0.0;
    for (int i = 0; i < n; i++)
        ekin += 0.5 * mass[i] *
                (vel[3 * i] * vel[3 * i] + vel[3 * i + 1] * vel[3 * i + 1] +
                 vel[3 * i + 2] * vel[3 * i + 2]);
    return ekin;
}
