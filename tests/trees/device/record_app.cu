// A CUDA application of our own for the record tests: a grid-stride saxpy launched once,
// with a struct passed by value (16 bytes) among its arguments.
#include <stdio.h>
#include "cuda_min.h"

struct Scale {
  float a, b, c, d;
};

__global__ void __launch_bounds__(256) saxpy(int n, Scale s, const float *x, float *y) {
  for (int i = BLOCK_X * BLOCK_DIM_X + THREAD_X; i < n; i += BLOCK_DIM_X * GRID_DIM_X) y[i] = s.a * x[i] + y[i];
}

int main() {
  enum { N = 4096 };
  static float h[N];
  float *x, *y;
  for (int i = 0; i < N; i++) h[i] = (float)i;
  if (cudaMalloc((void **)&x, N * sizeof(float)) || cudaMalloc((void **)&y, N * sizeof(float))) {
    printf("no device\n");
    return 1;
  }
  cudaMemcpy(x, h, N * sizeof(float), 1 /* cudaMemcpyHostToDevice */);
  cudaMemcpy(y, h, N * sizeof(float), 1);
  Scale s = {2.0f, 0, 0, 0};
  saxpy<<<8, 128>>>(N, s, x, y);
  cudaDeviceSynchronize();
  cudaMemcpy(h, y, N * sizeof(float), 2 /* cudaMemcpyDeviceToHost */);
  printf("y[3] = %g\n", h[3]);
  return 0;
}
