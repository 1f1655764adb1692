// HIP kernels compiled with ROCm's own headers (hip/hip_runtime.h): what the device IR reads
// for gridDim and how __launch_bounds__ reaches it (tests/device/test_hip_record.py).
#include <hip/hip_runtime.h>

__global__ void __launch_bounds__(256) stride(int n, float a, float *x) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] *= a;
}

__global__ void groups(int n, float a, float *x) {  // gridDim.x read alone
  unsigned blocks = gridDim.x;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blocks * blockDim.x) x[i] *= a;
}

__global__ void plain(int n, float a, float *x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
