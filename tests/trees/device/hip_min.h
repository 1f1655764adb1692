/* The HIP runtime API that clang's HIP host code and these tests call, declared as ROCm's
   headers declare it, for a compile without them (-nogpuinc); gpu.h's kernel spellings. */
#ifndef R3_HIP_MIN_H
#define R3_HIP_MIN_H
#include <stddef.h>

#include "gpu.h"

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
#endif
