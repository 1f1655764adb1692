// launch_app.cu's HIP twin for the +r3 build's launch shim (record/runtime/r3hiplaunch.c),
// compiled by clang-19 without ROCm's headers (-nogpuinc: hip_min.h): scale covers its work
// with grid x block threads (its grid follows its block), stride reads the grid's size and
// strides over it. Printed, for each kernel, what the shim makes of a launch at grid 10,
// block 100 (no GPU needed: r3launch_geometry is the shim's own rule, the kernel handles
// registered through it by the module constructor); then, on an AMD GPU, both launched on
// 1000 floats and checked.
#include <stdio.h>

#include "hip_min.h"

__global__ void scale(int n, float a, float *x) {
  int i = BLOCK_X * BLOCK_DIM_X + THREAD_X;
  if (i < n) x[i] *= a;
}

__global__ void stride(int n, float a, float *x) {
  for (int i = BLOCK_X * BLOCK_DIM_X + THREAD_X; i < n; i += GRID_THREADS_X) x[i] += a;
}

extern "C" int r3launch_geometry(const void *handle, dim3 *grid, dim3 *block) __attribute__((weak));

static void show(const char *name, const void *handle) {
  dim3 grid(10), block(100);
  int planned = r3launch_geometry ? r3launch_geometry(handle, &grid, &block) : -1;
  printf("%s planned=%d grid=%u block=%u\n", name, planned, grid.x, block.x);
}

int main() {
  show("scale", (const void *)scale);  // (a kernel's host address is its handle, as launched)
  show("stride", (const void *)stride);
  enum { N = 1000 };
  static float x[N];
  for (int i = 0; i < N; i++) x[i] = i;
  float *d = 0;
  if (hipMalloc((void **)&d, sizeof x) != 0) {  // no AMD GPU (or no ROCm driver) here
    printf("no device\n");
    return 0;
  }
  hipMemcpy(d, x, sizeof x, 1);  // hipMemcpyHostToDevice
  scale<<<10, 100>>>(N, 2.0f, d);
  stride<<<10, 100>>>(N, 1.0f, d);
  hipDeviceSynchronize();
  hipMemcpy(x, d, sizeof x, 2);  // hipMemcpyDeviceToHost
  hipFree(d);
  for (int i = 0; i < N; i++)
    if (x[i] != 2.0f * i + 1.0f) {
      printf("wrong at %d: %g\n", i, x[i]);
      return 1;
    }
  printf("ok\n");
  return 0;
}
