// Small CUDA/HIP kernels for device code generation tests (compiled device-only).
#include "gpu.h"

__global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = BLOCK_X * BLOCK_DIM_X + THREAD_X;
  if (i < n) y[i] = a * x[i] + y[i];
}

// A 3-point stencil through a shared-memory tile of one block (256 threads at most).
__global__ void __launch_bounds__(256) stencil(int n, const float *in, float *out) {
  __shared__ float tile[258];
  int t = THREAD_X, i = BLOCK_X * BLOCK_DIM_X + t;
  tile[t + 1] = i < n ? in[i] : 0.f;
  if (t == 0) tile[0] = i > 0 ? in[i - 1] : 0.f;
  if (t == 255) tile[257] = i + 1 < n ? in[i + 1] : 0.f;
  SYNC_THREADS();
  if (i < n) out[i] = 0.25f * tile[t] + 0.5f * tile[t + 1] + 0.25f * tile[t + 2];
}

// 64 accumulators live across the whole loop: about 70 registers a thread, so a cap of
// 32 registers spills them.
#define ACC 64
__global__ void moments(int n, const float *x, float *out) {
  int i = BLOCK_X * BLOCK_DIM_X + THREAD_X;
  float acc[ACC];
#pragma unroll
  for (int k = 0; k < ACC; k++) acc[k] = 0.f;
  for (int j = 0; j < n; j++) {
    float v = x[(i + j) % n], p = v;
#pragma unroll
    for (int k = 0; k < ACC; k++) {
      acc[k] += p;
      p *= v;
    }
  }
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < ACC; k++) s += acc[k] * (float)(k + 1);
  out[i] = s;
}
