/* The few CUDA/HIP spellings these kernels use, for a device compile without CUDA's or
   ROCm's headers (-nocudainc / -nogpuinc): clang's attributes and builtins. */
#ifndef R3_GPU_H
#define R3_GPU_H
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#if defined(__AMDGPU__)
/* as HIP's headers spell it: the workgroup size bound */
#define __launch_bounds__(n, ...) __attribute__((amdgpu_flat_work_group_size(1, n)))
#else
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#endif
#if defined(__NVPTX__)
#define THREAD_X __nvvm_read_ptx_sreg_tid_x()
#define BLOCK_X __nvvm_read_ptx_sreg_ctaid_x()
#define BLOCK_DIM_X __nvvm_read_ptx_sreg_ntid_x()
#define GRID_THREADS_X (__nvvm_read_ptx_sreg_nctaid_x() * __nvvm_read_ptx_sreg_ntid_x())
#define SYNC_THREADS() __syncthreads()
#elif defined(__AMDGPU__)
#define THREAD_X __builtin_amdgcn_workitem_id_x()
#define BLOCK_X __builtin_amdgcn_workgroup_id_x()
#define BLOCK_DIM_X __builtin_amdgcn_workgroup_size_x()
/* the dispatch packet's grid size, in work-items (gridDim.x * blockDim.x) */
#define GRID_THREADS_X __builtin_amdgcn_grid_size_x()
#define SYNC_THREADS() __builtin_amdgcn_s_barrier()
#else
#define THREAD_X 0
#define BLOCK_X 0
#define BLOCK_DIM_X 1
#define GRID_THREADS_X 1
#define SYNC_THREADS()
#endif
#endif
