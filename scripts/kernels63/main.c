/* Drives each kernel of shapes.c on data of its own (r3 records them). */
#include <stdio.h>
#include <stdlib.h>

#ifndef H
#define H 64
#endif
#ifndef W
#define W 80
#endif
#ifndef NT
#define NT 48
#endif
#ifndef ND
#define ND 40
#endif
#ifndef NE
#define NE 60
#endif
#ifndef NL
#define NL 64
#endif
#ifndef NS
#define NS 4000
#endif
#ifndef STEPS
#define STEPS 20
#endif

void iir_rows(int, int, double, double[H][W], double[H][W], double[H][W]);
void iir_cols(int, int, double, double[H][W], double[H][W]);
void prefix2d(int, int, long *);
void closure(int, double *);
void widest(int, int[ND][ND]);
void chain_order(int, const long *, long[ND][ND]);
void edit_distance(int, int, const char *, const char *, int[NE + 1][NE + 1]);
void trisolve(int, int, double[NT][NT], double[NT][NT], double[NT][NT]);
void lu(int, double *);
void levinson(int, const double *, double *, double *);
void symm_lower(int, int, double[NT][NT], double[NT][NT], double[NT][NT]);
void smooth1d(int, int, double *, double *);

static double *filled(long count, int seed)
{
    double *p = malloc(sizeof(double) * count);
    for (long i = 0; i < count; i++)
        p[i] = ((i * 7 + seed) % 17) * 0.0625 + 1.0 / (i % 29 + seed + 1);
    return p;
}

int main(void)
{
    int h = H - 1, w = W - 2, nt = NT - 1, nd = ND - 1;  /* not multiples of a tile or block */
    double sum = 0.0;

    double (*x)[W] = (double (*)[W])filled(H * W, 1), (*y1)[W] = (double (*)[W])filled(H * W, 2);
    double (*y2)[W] = (double (*)[W])filled(H * W, 3);
    iir_rows(h, w, 0.6, x, y1, y2);
    iir_cols(h, w, 0.6, x, y1);
    sum += x[3][4] + y1[h - 1][w - 1];

    long *s = malloc(sizeof(long) * H * W);
    for (long i = 0; i < H * W; i++)
        s[i] = (i * 31) % 7 - 3;
    prefix2d(h, w, s);
    sum += s[(h - 1) * w + w - 1];

    double *d = malloc(sizeof(double) * ND * ND);
    int (*cap)[ND] = malloc(sizeof(int[ND][ND]));
    for (int i = 0; i < nd; i++)
        for (int j = 0; j < nd; j++) {
            d[i * nd + j] = i == j ? 0.0 : 1.0 + ((i * 13 + j * 7) % 23) * 0.5;
            cap[i][j] = (i * 5 + j * 11) % 97;
        }
    closure(nd, d);
    widest(nd, cap);
    sum += d[nd + 2] + cap[2][5];

    long *dims = malloc(sizeof(long) * (ND + 1));
    for (int i = 0; i <= ND; i++)
        dims[i] = 2 + (i * 7) % 11;
    long (*cost)[ND] = malloc(sizeof(long[ND][ND]));
    chain_order(nd, dims, cost);
    sum += cost[0][nd - 1];

    char *a = malloc(NE + 1), *b = malloc(NE + 1);
    for (int i = 0; i < NE; i++) {
        a[i] = "ACGT"[(i * 7) % 4];
        b[i] = "ACGT"[(i * 5 + i / 3) % 4];
    }
    int ne = NE - 1, (*e)[NE + 1] = malloc(sizeof(int[NE + 1][NE + 1]));
    edit_distance(ne, ne - 1, a, b, e);
    sum += e[ne][ne - 1];

    double (*l)[NT] = (double (*)[NT])filled(NT * NT, 4), (*rhs)[NT] = (double (*)[NT])filled(NT * NT, 5);
    double (*sol)[NT] = (double (*)[NT])filled(NT * NT, 6);
    for (int i = 0; i < NT; i++)
        l[i][i] += NT;  /* well conditioned */
    trisolve(nt, nt - 3, l, rhs, sol);
    symm_lower(nt, nt - 2, l, rhs, sol);
    sum += sol[nt - 1][1];

    double *m = filled(NT * NT, 7);
    for (int i = 0; i < nt; i++)
        m[i * nt + i] += 2 * nt;  /* diagonally dominant: no pivoting needed */
    lu(nt, m);
    sum += m[nt * nt - 1];

    double *r = malloc(sizeof(double) * NL), *yv = malloc(sizeof(double) * NL), *z = malloc(sizeof(double) * NL);
    for (int i = 0; i < NL; i++)
        r[i] = 0.5 / (i + 2);
    levinson(NL - 1, r, yv, z);
    sum += yv[NL - 2];

    double *u = filled(NS, 8), *v = filled(NS, 9);
    smooth1d(STEPS, NS - 1, u, v);
    sum += u[NS / 2];

    printf("%.17g\n", sum);
    return 0;
}
