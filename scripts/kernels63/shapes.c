/* Kernels of the shapes issue 63 names (recurrences, triangular solves, dynamic
 * programming, min-plus closures, symmetric and 1-D stencil updates), written for r3's
 * own benchmark and tests; none is a copy of a public suite's. Sizes, overridable with
 * -D: H and W (the filters' images), NT (the triangular and dense matrices), ND (the
 * closures and the chain's table), NE (the edit distance's table); main.c sets NL (the
 * Levinson order), NS and STEPS (the 1-D stencil). */
#include <math.h>

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

/* A first-order recursive (IIR) smoothing filter, causal then anti-causal along each row
 * of an image, the two passes summed: the recurrence runs along the contiguous index. */
void iir_rows(int h, int w, double a, double x[H][W], double y1[H][W], double y2[H][W])
{
    for (int i = 0; i < h; i++) {
        y1[i][0] = x[i][0];
        for (int j = 1; j < w; j++)
            y1[i][j] = x[i][j] + a * y1[i][j - 1];
    }
    for (int i = 0; i < h; i++) {
        y2[i][w - 1] = 0.0;
        for (int j = w - 2; j >= 0; j--)
            y2[i][j] = a * (x[i][j + 1] + y2[i][j + 1]);
    }
    for (int i = 0; i < h; i++)
        for (int j = 0; j < w; j++)
            x[i][j] = (1.0 - a) * (y1[i][j] + y2[i][j]);
}

/* The same filter down each column, written column by column (each column's sweep is the
 * inner loop, as one writes a filter applied "to each column"). */
void iir_cols(int h, int w, double a, double x[H][W], double y[H][W])
{
    for (int j = 0; j < w; j++) {
        y[0][j] = x[0][j];
        for (int i = 1; i < h; i++)
            y[i][j] = x[i][j] + a * y[i - 1][j];
        for (int i = h - 2; i >= 0; i--)
            y[i][j] = y[i][j] + a * (y[i + 1][j] - y[i][j]);
    }
}

/* A summed-area table in place (integers: exact whatever the order): prefix sums along
 * each row, then along each column. */
void prefix2d(int h, int w, long *s)
{
    for (int i = 0; i < h; i++)
        for (int j = 1; j < w; j++)
            s[i * w + j] += s[i * w + j - 1];
    for (int j = 0; j < w; j++)
        for (int i = 1; i < h; i++)
            s[i * w + j] += s[(i - 1) * w + j];
}

/* All-pairs shortest paths: the min-plus closure of a distance matrix. */
void closure(int n, double *d)
{
    for (int k = 0; k < n; k++)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                double via = d[i * n + k] + d[k * n + j];
                if (via < d[i * n + j])
                    d[i * n + j] = via;
            }
}

/* Bottleneck (widest) paths: the max-min closure of a capacity matrix (integers). */
void widest(int n, int cap[ND][ND])
{
    for (int k = 0; k < n; k++)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                int through = cap[i][k] < cap[k][j] ? cap[i][k] : cap[k][j];
                cap[i][j] = cap[i][j] > through ? cap[i][j] : through;
            }
}

/* Cheapest order of a chain of products (a score table over a triangle, filled by
 * spans: each cell the best split of its span). */
void chain_order(int n, const long *dims, long cost[ND][ND])
{
    for (int i = 0; i < n; i++)
        cost[i][i] = 0;
    for (int len = 1; len < n; len++)
        for (int i = 0; i + len < n; i++) {
            int j = i + len;
            long best = -1;
            for (int k = i; k < j; k++) {
                long c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1];
                if (best < 0 || c < best)
                    best = c;
            }
            cost[i][j] = best;
        }
}

/* Edit distance between two sequences: each cell from its left, upper and upper-left
 * neighbours, filled row by row. */
void edit_distance(int n, int m, const char *a, const char *b, int d[NE + 1][NE + 1])
{
    for (int j = 0; j <= m; j++)
        d[0][j] = j;
    for (int i = 1; i <= n; i++) {
        d[i][0] = i;
        for (int j = 1; j <= m; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            int best = sub < del ? sub : del;
            d[i][j] = best < ins ? best : ins;
        }
    }
}

/* Forward substitution with several right-hand sides, L X = B (L lower triangular), each
 * unknown an inner product over the rows solved before it. */
void trisolve(int n, int m, double l[NT][NT], double b[NT][NT], double x[NT][NT])
{
    for (int i = 0; i < n; i++)
        for (int r = 0; r < m; r++) {
            double s = b[i][r];
            for (int j = 0; j < i; j++)
                s -= l[i][j] * x[j][r];
            x[i][r] = s / l[i][i];
        }
}

/* LU factorisation in place without pivoting, each entry as an inner product (the
 * Doolittle order: row i of U, then column i of L). */
void lu(int n, double *a)
{
    for (int i = 0; i < n; i++) {
        for (int j = i; j < n; j++) {
            double s = a[i * n + j];
            for (int k = 0; k < i; k++)
                s -= a[i * n + k] * a[k * n + j];
            a[i * n + j] = s;
        }
        for (int j = i + 1; j < n; j++) {
            double s = a[j * n + i];
            for (int k = 0; k < i; k++)
                s -= a[j * n + k] * a[k * n + i];
            a[j * n + i] = s / a[i * n + i];
        }
    }
}

/* The Levinson recursion for a symmetric Toeplitz system: each order's vector from the
 * previous one, read backwards. */
void levinson(int n, const double *r, double *y, double *z)
{
    double beta = 1.0, alpha = -r[0];
    y[0] = -r[0];
    for (int k = 1; k < n; k++) {
        beta = (1.0 - alpha * alpha) * beta;
        double sum = 0.0;
        for (int i = 0; i < k; i++)
            sum += r[k - i - 1] * y[i];
        alpha = -(r[k] + sum) / beta;
        for (int i = 0; i < k; i++)
            z[i] = y[i] + alpha * y[k - i - 1];
        for (int i = 0; i < k; i++)
            y[i] = z[i];
        y[k] = alpha;
    }
}

/* C = A B with A symmetric, only its lower triangle stored (read as a[max][min]). */
void symm_lower(int n, int m, double a[NT][NT], double b[NT][NT], double c[NT][NT])
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            double s = 0.0;
            for (int k = 0; k < n; k++)
                s += (k <= i ? a[i][k] : a[k][i]) * b[k][j];
            c[i][j] = s;
        }
}

/* A three-point smoothing stencil on a line, two buffers, for a number of steps. */
void smooth1d(int steps, int n, double *u, double *v)
{
    for (int t = 0; t < steps; t++) {
        for (int i = 1; i < n - 1; i++)
            v[i] = 0.25 * u[i - 1] + 0.5 * u[i] + 0.25 * u[i + 1];
        for (int i = 1; i < n - 1; i++)
            u[i] = 0.25 * v[i - 1] + 0.5 * v[i] + 0.25 * v[i + 1];
    }
}
