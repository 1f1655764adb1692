// A HIP application for the launch recorder (tests/device/test_hip_record.py), compiled by
// clang-19 without ROCm's headers (-nogpuinc: gpu.h), the runtime API it calls declared here
// as HIP's headers declare it: the host side launches through hipLaunchKernel.
#include "gpu.h"
#include <stddef.h>
#include <stdio.h>

typedef int hipError_t;
struct dim3 {  // as HIP declares it: a launch configuration from an int
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef struct ihipStream_t *hipStream_t;
extern "C" hipError_t hipMalloc(void **, size_t);
extern "C" hipError_t hipFree(void *);
extern "C" hipError_t hipMemcpy(void *, const void *, size_t, int);
extern "C" hipError_t hipDeviceSynchronize(void);
extern "C" hipError_t hipLaunchKernel(const void *, dim3, dim3, void **, size_t, hipStream_t);
extern "C" int __hipPushCallConfiguration(dim3, dim3, size_t = 0, hipStream_t = 0);
extern "C" int __hipPopCallConfiguration(dim3 *, dim3 *, size_t *, hipStream_t *);

__global__ void scale(int n, float a, float *x) {
  int i = BLOCK_X * BLOCK_DIM_X + THREAD_X;
  if (i < n) x[i] *= a;
}

// Grid-stride, bounded to 256 threads a workgroup: the capture whose block and grid the
// search varies (tests/device/test_hip_record.py writes one; main does not launch it).
__global__ void __launch_bounds__(256) scale_all(int n, float a, float *x) {
  for (int i = BLOCK_X * BLOCK_DIM_X + THREAD_X; i < n; i += GRID_THREADS_X) x[i] *= a;
}

int main() {
  enum { N = 1024 };
  static float x[N];
  for (int i = 0; i < N; i++) x[i] = i;
  float *d = 0;
  if (hipMalloc((void **)&d, sizeof x) != 0) {  // no AMD GPU (or no ROCm driver) here
    puts("no device");
    return 0;
  }
  hipMemcpy(d, x, sizeof x, 1);  // hipMemcpyHostToDevice
  scale<<<N / 256, 256>>>(N, 2.0f, d);
  hipDeviceSynchronize();
  hipMemcpy(x, d, sizeof x, 2);  // hipMemcpyDeviceToHost
  hipFree(d);
  printf("x[3] = %g\n", x[3]);
  return 0;
}
