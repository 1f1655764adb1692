/* The CUDA runtime's types and entry-point names as the interposers of spack-r3 use them: the
 * launch recorder r3cuda.c and the +r3 build's launch shim r3launch.c. Without
 * R3CUDA_REAL_HEADERS the few types are declared here (their ABI, as in cuda_runtime_api.h),
 * so they build with no CUDA toolkit; with it, the real headers' prototypes check every
 * definition of theirs (the tests build both that way too). */
#ifndef R3_CUDATYPES_H
#define R3_CUDATYPES_H

#ifdef R3CUDA_REAL_HEADERS
#include <cuda_runtime_api.h>
#define R3G_REAL_HEADERS
#define R3_MEMCPY_DEFAULT cudaMemcpyDefault
#define R3_MEMCPY_DEVICE_TO_HOST cudaMemcpyDeviceToHost
#define R3_ATTR_CC_MAJOR cudaDevAttrComputeCapabilityMajor
#define R3_ATTR_CC_MINOR cudaDevAttrComputeCapabilityMinor
typedef enum cudaDeviceAttr r3_attr;
typedef enum cudaMemcpyKind r3_copy_kind;
#else
typedef int cudaError_t; /* enum cudaError: cudaSuccess is 0 */
typedef struct dim3 { unsigned int x, y, z; } dim3;
typedef struct uint3 { unsigned int x, y, z; } uint3;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
#define cudaSuccess 0
#define R3_MEMCPY_DEFAULT 4 /* cudaMemcpyDefault: direction from the unified address space */
#define R3_MEMCPY_DEVICE_TO_HOST 2
#define R3_ATTR_CC_MAJOR 75 /* cudaDevAttrComputeCapabilityMajor */
#define R3_ATTR_CC_MINOR 76
typedef int r3_attr;
typedef int r3_copy_kind;
#endif

typedef cudaError_t r3g_error;
typedef cudaStream_t r3g_stream;
typedef cudaEvent_t r3g_event;
typedef uint3 r3g_uint3;
#define R3G_SUCCESS cudaSuccess
#define R3G_PREFIX cuda
#define R3G_LAUNCH_PTSZ cudaLaunchKernel_ptsz
#define R3G_EVENT_RECORD_PTSZ cudaEventRecord_ptsz

#endif
