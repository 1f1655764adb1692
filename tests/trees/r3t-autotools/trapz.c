#include <math.h>
#include <stdio.h>
#include <string.h>

#ifdef R3T_DOUBLES
typedef double real;
#else
typedef float real;
#endif

int main(int argc, char **argv) {
    const int n = 1000;
    const real a = 0, b = (real)1.5707963267948966;
    real h = (b - a) / n, s = (real)0.5 * ((real)cos(a) + (real)cos(b));
    for (int i = 1; i < n; i++) s += (real)cos(a + i * h);
    s *= h;                               /* integral of cos on [0, pi/2] = 1 */
    int ok = fabs((double)s - 1.0) < 1e-5;
    if (argc > 1 && strcmp(argv[1], "--check") == 0) {
        printf("r3t-autotools check (%s): %s\n", sizeof(real) == 8 ? "double" : "float", ok ? "ok" : "WRONG");
        return ok ? 0 : 1;
    }
    printf("integral = %.8f\n", (double)s);
    return 0;
}
