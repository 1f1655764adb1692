// A HIP program calling device math (ROCm's ocml), through the real hip_runtime.h.
#include <hip/hip_runtime.h>
#include <cmath>
#include <cstdio>

__global__ void wave(int n, const double *x, double *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = sin(x[i]) * cos(x[i]) + atan(x[i]);
}

int main() {
  const int n = 1 << 16;
  double *x, *y;
  if (hipMalloc(&x, n * sizeof(double)) != hipSuccess || hipMalloc(&y, n * sizeof(double)) != hipSuccess) return 1;
  wave<<<(n + 255) / 256, 256>>>(n, x, y);
  if (hipDeviceSynchronize() != hipSuccess) return 1;
  printf("done\n");
  return 0;
}
