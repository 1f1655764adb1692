#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "stencil.h"

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-h") == 0) {
        printf("usage: stencil [n] [steps]  (R3T_MPI=%d)\n", R3T_MPI);
        return 0;
    }
    int n = argc > 1 ? atoi(argv[1]) : 1000, steps = argc > 2 ? atoi(argv[2]) : 10;
    printf("sum %.6f\n", stencil_sum(n, steps));
    return 0;
}
