/* The CUDA runtime API a launch through <<<>>> needs, declared as cuda_runtime_api.h and
   crt/host_runtime.h declare them, for a compile without CUDA's headers (-nocudainc):
   clang-19's CUDA wrapper wants headers (curand's) that the pip wheels do not ship. */
#ifndef R3_CUDA_MIN_H
#define R3_CUDA_MIN_H
#include <stddef.h>
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
struct dim3 {
  unsigned int x, y, z;
  __host__ __device__ dim3(unsigned int x = 1, unsigned int y = 1, unsigned int z = 1) : x(x), y(y), z(z) {}
};
typedef struct CUstream_st *cudaStream_t;
typedef int cudaError_t;
extern "C" {
__host__ cudaError_t cudaMalloc(void **ptr, size_t size);
__host__ cudaError_t cudaFree(void *ptr);
__host__ cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, int kind);
__host__ cudaError_t cudaDeviceSynchronize(void);
__host__ cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t stream);
__host__ unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared = 0, void *stream = 0);
/* what the device side of clang-19 looks <<<>>> up by (it never calls it) */
__host__ cudaError_t cudaConfigureCall(dim3 grid, dim3 block, size_t shared = 0, cudaStream_t stream = 0);
__host__ const char *cudaGetErrorString(cudaError_t);
}
#if defined(__CUDA_ARCH__)
#define THREAD_X __nvvm_read_ptx_sreg_tid_x()
#define BLOCK_X __nvvm_read_ptx_sreg_ctaid_x()
#define BLOCK_DIM_X __nvvm_read_ptx_sreg_ntid_x()
#define GRID_DIM_X __nvvm_read_ptx_sreg_nctaid_x()
#else
#define THREAD_X 0
#define BLOCK_X 0
#define BLOCK_DIM_X 1
#define GRID_DIM_X 1
#endif
#endif
