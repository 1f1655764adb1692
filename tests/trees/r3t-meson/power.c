#include <stdio.h>
#include <string.h>
#include <r3tvec.h>

/* A = [[2,1],[1,2]]: dominant eigenvalue 3 */
int main(int argc, char **argv) {
    double v[2] = {1.0, 0.0}, w[2];
    double lambda = 0.0;
    for (int it = 0; it < 60; it++) {
        w[0] = 2 * v[0] + v[1];
        w[1] = v[0] + 2 * v[1];
        lambda = r3tvec_dot(v, w, 2) / r3tvec_dot(v, v, 2);
        double n = r3tvec_norm(w, 2);
        v[0] = w[0] / n; v[1] = w[1] / n;
#ifdef R3T_VERBOSE
        printf("iteration %d: %.12f\n", it, lambda);
#endif
    }
    int ok = lambda > 3.0 - 1e-9 && lambda < 3.0 + 1e-9;
    if (argc > 1 && strcmp(argv[1], "--check") == 0) {
        printf("r3t-meson check: %s\n", ok ? "ok" : "WRONG");
        return ok ? 0 : 1;
    }
    printf("lambda = %.12f\n", lambda);
    return 0;
}
