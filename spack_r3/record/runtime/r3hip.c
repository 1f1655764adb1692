/* spack-r3 launch recorder for HIP applications (record/cuda.py): r3cuda.c's twin for the HIP
 * runtime (libamdhip64.so), the recorder itself shared with it (gpurec.h).
 *
 * It interposes what a clang-compiled HIP program calls: __hipRegisterFunction and
 * __hipRegisterVar (clang's module constructor, as for CUDA), hipMalloc, hipMallocManaged,
 * hipFree, hipLaunchKernel and hipLaunchKernel_spt; linked into the executable (a link
 * against -lamdhip64) or preloaded. The real ones are found with dlsym(RTLD_NEXT). A
 * selected kernel's first R3_INSTANCES launches are captured as r3cuda.c captures a CUDA
 * launch (meta.json's backend "hip"); R3HIP_VERBOSE=1 prints each registered kernel.
 *
 * The device's arch (gfx90a, from hipDeviceProp_t's gcnArchName, its feature suffix cut) is
 * asked only where this file is built against the real headers (-DR3HIP_REAL_HEADERS): the
 * properties' layout is the headers' (ROCm 6 renamed the entry point with the layout,
 * hipGetDevicePropertiesR0600, which the headers' macro names). Without them (the record
 * launcher's build: no ROCm needed) the arch is the one of the kernel's first unit folder.
 *
 * Launch interception has never run on an AMD GPU: this file is checked only by compiling it
 * with -Werror against Debian's libamdhip64-dev (ROCm 5.2) headers.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "launchrec.h"

#include "hiptypes.h"

#ifdef R3HIP_REAL_HEADERS
typedef hipError_t (*props_fn)(hipDeviceProp_t *, int);
#endif
#define R3G_BACKEND "hip"
#define R3G_TAG "r3hip"
#define R3G_VERBOSE_ENV "R3HIP_VERBOSE"

#include "gpurec.h"

static void vendor_arch(char *arch, size_t n, int device) {
#ifdef R3HIP_REAL_HEADERS
  static props_fn props;
  static hipDeviceProp_t p; /* (large: not on the stack of a launch) */
  if (!props) props = (props_fn)dlsym(RTLD_NEXT, R3G_STR(hipGetDeviceProperties));
  if (props && props(&p, device) == hipSuccess) {
    p.gcnArchName[sizeof p.gcnArchName - 1] = 0;
    snprintf(arch, n, "%.*s", (int)strcspn(p.gcnArchName, ":"), p.gcnArchName);
  }
#else
  (void)arch, (void)n, (void)device;
#endif
}
