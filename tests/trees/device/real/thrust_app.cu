// A CUDA program as real ones are written: the runtime's own headers, <<<>>> launches,
// device math and Thrust (no declarations of our own standing in for CUDA's).
#include <cmath>
#include <cstdio>
#include <thrust/device_vector.h>
#include <thrust/reduce.h>

__global__ void wave(int n, const double *x, double *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = sin(x[i]) * cos(x[i]) + atan(x[i]);
}

int main() {
  const int n = 1 << 16;
  thrust::device_vector<double> x(n, 0.5), y(n);
  wave<<<(n + 255) / 256, 256>>>(n, thrust::raw_pointer_cast(x.data()), thrust::raw_pointer_cast(y.data()));
  cudaDeviceSynchronize();
  printf("%.6f\n", thrust::reduce(y.begin(), y.end()));
  return 0;
}
