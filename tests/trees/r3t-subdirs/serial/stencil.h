#ifndef STENCIL_H
#define STENCIL_H
#if !defined(R3T_MPI)
# error "You should specify R3T_MPI=0 or R3T_MPI=1 on the compile line"
#endif
double stencil_sum(int n, int steps);
#endif
