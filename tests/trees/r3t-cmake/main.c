#include <stdio.h>
#include <string.h>
#include <r3tvec.h>
#ifdef R3T_WITH_ZLIB
#include <zlib.h>
#endif

int main(int argc, char **argv) {
    double x[64], y[64];
    for (int i = 0; i < 64; i++) { x[i] = i; y[i] = 1.0; }
    r3tvec_axpy(1.0, x, y, 64);                 /* y[i] = i + 1 */
    double d = r3tvec_dot(y, y, 64);            /* sum (i+1)^2, i<64 = 89440 */
    int ok = d == 89440.0;
#ifdef R3T_WITH_ZLIB
    unsigned char packed[1024], unpacked[sizeof y];
    uLongf plen = sizeof packed, ulen = sizeof unpacked;
    ok = ok && compress(packed, &plen, (const Bytef *)y, sizeof y) == Z_OK;
    ok = ok && uncompress(unpacked, &ulen, packed, plen) == Z_OK;
    ok = ok && ulen == sizeof y && memcmp(unpacked, y, sizeof y) == 0;
#endif
    if (argc > 1 && strcmp(argv[1], "--check") == 0) {
        printf("r3t-cmake check: %s\n", ok ? "ok" : "WRONG");
        return ok ? 0 : 1;
    }
    printf("dot = %g\n", d);
    return 0;
}
