#ifndef CG_H
#define CG_H

/* Compressed sparse row matrix; the struct and its arrays live on the heap. */
typedef struct {
    int n, nnz;
    int *rowptr; /* n + 1 entries */
    int *colidx; /* nnz entries */
    double *val; /* nnz entries */
} csr_t;

/* y = A x */
void spmv(const csr_t *A, const double *x, double *y);
/* returns x . y */
double dot(int n, const double *x, const double *y);
/* y = y + a x */
void axpy(int n, double a, const double *x, double *y);
/* y = x + a y */
void xpay(int n, const double *x, double a, double *y);

#endif
