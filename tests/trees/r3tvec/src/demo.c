#include <stdio.h>
#include <string.h>
#include "r3tvec.h"

int main(int argc, char **argv) {
    double x[4] = {1, 2, 3, 4}, y[4] = {4, 3, 2, 1};
    r3tvec_axpy(2.0, x, y, 4);          /* y = {6, 7, 8, 9} */
    double d = r3tvec_dot(x, y, 4);     /* 6 + 14 + 24 + 36 = 80 */
    int ok = d == 80.0 && r3tvec_norm(x, 4) > 5.47 && r3tvec_norm(x, 4) < 5.48;
    if (argc > 1 && strcmp(argv[1], "--check") == 0) {
        printf("r3tvec check: %s\n", ok ? "ok" : "WRONG");
        return ok ? 0 : 1;
    }
    printf("dot = %g\n", d);
    return 0;
}
