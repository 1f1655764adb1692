/* Four relaxation sweeps of one 1-D three-point smoother, differing only in how many
 * sweeps they make: runs of about 1 ms, 10 ms, 100 ms and 1 s built -O3 (bench_evalcost.py).
 * Written for this project. */
#define N (1 << 15)

static void sweeps(long reps, double *restrict a, const double *restrict b) {
    for (long r = 0; r < reps; r++)
        for (long i = 1; i < N - 1; i++) a[i] = 0.5 * a[i] + 0.25 * (b[i - 1] + b[i + 1]);
}

void relax_1ms(double *restrict a, const double *restrict b) { sweeps(REPS_1MS, a, b); }
void relax_10ms(double *restrict a, const double *restrict b) { sweeps(10 * REPS_1MS, a, b); }
void relax_100ms(double *restrict a, const double *restrict b) { sweeps(100 * REPS_1MS, a, b); }
void relax_1s(double *restrict a, const double *restrict b) { sweeps(1000 * REPS_1MS, a, b); }
