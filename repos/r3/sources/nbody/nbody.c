/* nbody: all-pairs gravitational n-body problem (G = 1, Plummer softening), integrated
 * with the kick-drift-kick leapfrog.
 *
 * Initial condition: n equal-mass bodies (total mass 1) placed uniformly at random in
 * the unit ball by a fixed-seed generator, with small random velocities scaled to
 * virial equilibrium (2 Ekin = -Epot).
 *
 * Self-check: the relative drift of the total energy |E(T) - E(0)| / |E(0)| must stay
 * below 1e-3 (leapfrog is symplectic, so it does for a small enough time step).
 *
 * usage: nbody [n] [steps] [dt]     exit status 0 iff the self-check passes
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nbody.h"

#define ENERGY_TOLERANCE 1e-3

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* xorshift64*: a portable, fixed-seed generator; uniform in [0, 1). */
static double uniform(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return (double)((x * 0x2545F4914F6CDD1DULL) >> 11) * (1.0 / 9007199254740992.0);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    int steps = argc > 2 ? atoi(argv[2]) : 200;
    double dt = argc > 3 ? atof(argv[3]) : 1e-3;
    if (n < 2 || steps < 1 || !(dt > 0.0)) {
        fprintf(stderr, "usage: nbody [n>=2] [steps>=1] [dt>0]\n");
        return 2;
    }

    double *pos = malloc((size_t)3 * n * sizeof(double));
    double *vel = malloc((size_t)3 * n * sizeof(double));
    double *acc = malloc((size_t)3 * n * sizeof(double));
    double *mass = malloc((size_t)n * sizeof(double));
    if (!pos || !vel || !acc || !mass) {
        fprintf(stderr, "nbody: out of memory\n");
        return 2;
    }
    uint64_t seed = 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < n; i++) {
        double x, y, z;
        do {
            x = 2.0 * uniform(&seed) - 1.0;
            y = 2.0 * uniform(&seed) - 1.0;
            z = 2.0 * uniform(&seed) - 1.0;
        } while (x * x + y * y + z * z > 1.0);
        pos[3 * i] = x;
        pos[3 * i + 1] = y;
        pos[3 * i + 2] = z;
        for (int d = 0; d < 3; d++)
            vel[3 * i + d] = uniform(&seed) - 0.5;
        mass[i] = 1.0 / n;
    }
    /* remove the centre-of-mass velocity, then scale to virial equilibrium */
    double cm[3] = {0.0, 0.0, 0.0};
    for (int i = 0; i < n; i++)
        for (int d = 0; d < 3; d++)
            cm[d] += mass[i] * vel[3 * i + d];
    for (int i = 0; i < n; i++)
        for (int d = 0; d < 3; d++)
            vel[3 * i + d] -= cm[d];
    double epot = compute_forces(n, pos, mass, acc);
    double scale = sqrt(-0.5 * epot / kinetic_energy(n, vel, mass));
    for (int i = 0; i < 3 * n; i++)
        vel[i] *= scale;
    double e0 = kinetic_energy(n, vel, mass) + epot;

    double t0 = now();
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < 3 * n; i++) {
            vel[i] += 0.5 * dt * acc[i];
            pos[i] += dt * vel[i];
        }
        epot = compute_forces(n, pos, mass, acc);
        for (int i = 0; i < 3 * n; i++)
            vel[i] += 0.5 * dt * acc[i];
    }
    double elapsed = now() - t0;
    double e1 = kinetic_energy(n, vel, mass) + epot;
    double drift = fabs(e1 - e0) / fabs(e0);
    int ok = drift < ENERGY_TOLERANCE; /* false for NaN */

    printf("nbody: n=%d steps=%d dt=%g energy=%.10f drift=%.3e time=%.3fs %s\n", n, steps, dt,
           e1, drift, elapsed, ok ? "PASSED" : "FAILED");
    if (!ok)
        fprintf(stderr, "nbody: self-check failed: energy drift %.3e >= %g\n", drift,
                ENERGY_TOLERANCE);
    free(pos);
    free(vel);
    free(acc);
    free(mass);
    return ok ? 0 : 1;
}
