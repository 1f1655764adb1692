// A CUDA application of our own for the relocation test (test_cuda_relocate.py): a kernel
// that reads a __device__ table by name, through pointers to its elements kept in device
// memory, and through a pointer argument, all taken from cudaGetSymbolAddress.
#include <stdio.h>
#include "cuda_min.h"

extern "C" __host__ cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol);

__device__ float table[8] = {1, 2, 3, 4, 5, 6, 7, 8};

__global__ void gather(const float *const *from, const float *direct, float *y, int n) {
  int i = THREAD_X;
  if (i < n) y[i] = *from[i] + direct[i] + table[i];
}

int main() {
  float *t, *y;
  const float **from;
  if (cudaGetSymbolAddress((void **)&t, table) || cudaMalloc((void **)&from, 8 * sizeof(float *)) ||
      cudaMalloc((void **)&y, 8 * sizeof(float))) {
    printf("no device\n");
    return 1;
  }
  const float *h[8];
  for (int i = 0; i < 8; i++) h[i] = t + (7 - i); /* from[i] = &table[7 - i] */
  cudaMemcpy(from, h, sizeof h, 1 /* cudaMemcpyHostToDevice */);
  gather<<<1, 8>>>(from, t, y, 8);
  cudaDeviceSynchronize();
  float out[8];
  cudaMemcpy(out, y, sizeof out, 2 /* cudaMemcpyDeviceToHost */);
  printf("y[0] = %g\n", out[0]); /* 8 + 1 + 1 */
  return 0;
}
