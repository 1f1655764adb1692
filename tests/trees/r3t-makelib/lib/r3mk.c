#include "r3mk.h"

int r3mk_encode(const unsigned char *in, int n, unsigned char *out) {
    int o = 0;
    for (int i = 0; i < n;) {
        int run = 1;
        while (i + run < n && run < 255 && in[i + run] == in[i]) run++;
        out[o++] = (unsigned char)run;
        out[o++] = in[i];
        i += run;
    }
    return o;
}

int r3mk_decode(const unsigned char *in, int n, unsigned char *out) {
    int o = 0;
    for (int i = 0; i + 1 < n; i += 2)
        for (int k = 0; k < in[i]; k++) out[o++] = in[i + 1];
    return o;
}
