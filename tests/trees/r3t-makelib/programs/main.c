#include <stdio.h>
#include <string.h>
#include "r3mk.h"

/* r3mk --selftest: encode and decode a buffer, compare; r3mk --version */
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("r3mk %s\n", R3MK_VERSION);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--selftest") == 0) {
        unsigned char in[1000], enc[2000], dec[1000];
        for (int i = 0; i < 1000; i++) in[i] = (unsigned char)(i / 7 % 3);
        int n = r3mk_encode(in, 1000, enc);
        int m = r3mk_decode(enc, n, dec);
        int ok = m == 1000 && memcmp(in, dec, 1000) == 0;
        printf("selftest %s (%d bytes -> %d)\n", ok ? "passed" : "FAILED", m, n);
        return ok ? 0 : 1;
    }
    fprintf(stderr, "usage: r3mk --selftest | --version\n");
    return 2;
}
