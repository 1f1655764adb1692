#ifndef NBODY_H
#define NBODY_H

/* Gravitational softening length (G = 1). */
#define NBODY_SOFTENING 0.05

/* Accelerations of n bodies (pos and acc hold x,y,z per body) from all the others,
 * with Plummer softening; returns the total potential energy. */
double compute_forces(int n, const double *restrict pos, const double *restrict mass,
                      double *restrict acc);

/* Kinetic energy of n bodies. */
double kinetic_energy(int n, const double *vel, const double *mass);

#endif
