/* The HIP runtime's types and entry-point names as the interposers of spack-r3 use them: the
 * launch recorder r3hip.c and the +r3 build's launch shim r3hiplaunch.c (cudatypes.h's twin).
 * Without R3HIP_REAL_HEADERS the few types are declared here (their ABI, as in
 * hip_runtime_api.h), so they build with no ROCm; with it, the real headers' prototypes check
 * every definition of theirs (the tests build both that way too). */
#ifndef R3_HIPTYPES_H
#define R3_HIPTYPES_H

#ifdef R3HIP_REAL_HEADERS
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__
#endif
#include <hip/hip_runtime_api.h>
#define R3G_REAL_HEADERS
#define R3_MEMCPY_DEFAULT hipMemcpyDefault
#define R3_MEMCPY_DEVICE_TO_HOST hipMemcpyDeviceToHost
typedef hipDeviceAttribute_t r3_attr;
typedef hipMemcpyKind r3_copy_kind;
#else
typedef int hipError_t; /* hipSuccess is 0 */
typedef struct dim3 { uint32_t x, y, z; } dim3;
typedef struct ihipStream_t *hipStream_t;
typedef struct ihipEvent_t *hipEvent_t;
#define hipSuccess 0
#define R3_MEMCPY_DEFAULT 4 /* hipMemcpyDefault */
#define R3_MEMCPY_DEVICE_TO_HOST 2
typedef int r3_attr;
typedef int r3_copy_kind;
#endif

typedef hipError_t r3g_error;
typedef hipStream_t r3g_stream;
typedef hipEvent_t r3g_event;
typedef struct { uint32_t x, y, z; } r3g_uint3; /* only passed on, never read */
#define R3G_SUCCESS hipSuccess
#define R3G_PREFIX hip
#define R3G_LAUNCH_PTSZ hipLaunchKernel_spt
#define R3G_EVENT_RECORD_PTSZ hipEventRecord_spt

#endif
