/* spack-r3 launch recorder for CUDA applications (record/cuda.py).
 *
 * It interposes the CUDA runtime's entry points a clang-compiled CUDA program calls: linked
 * into the executable (its definitions win over libcudart.so's) or preloaded (LD_PRELOAD
 * r3cuda.so); the real ones are found with dlsym(RTLD_NEXT), so this object needs no CUDA
 * library to link. A statically linked runtime (-lcudart_static) cannot be interposed.
 *
 *   __cudaRegisterFunction   the module constructor clang emits names each kernel: its host
 *                            stub's address and its device name (the mangled symbol);
                            R3CUDA_VERBOSE=1 prints each ("r3cuda: kernel <name>")
 *   __cudaRegisterVar        each __device__ / __constant__ variable: its host shadow and
 *                            its device name
 *   cudaMalloc / cudaMallocManaged / cudaFree
 *                            device allocations, tracked (address, size)
 *   cudaLaunchKernel (and cudaLaunchKernel_ptsz)
 *                            every launch counted; a selected kernel's first R3_INSTANCES
 *                            launches captured:
 *     1. cudaDeviceSynchronize, then every tracked allocation copied to the host (pre.bin,
 *        at its device address: replay maps it there, so pointers inside device data stay
 *        valid), and each device variable the kernel uses (listed in its index file,
 *        found by its registered name: cudaGetSymbolAddress, cudaMemcpyFromSymbol), a
 *        section of kind 2 at its device address, its name in meta.json's "globals";
 *     2. the launch itself, with the application's grid, block, dynamic shared memory and
 *        stream, then cudaDeviceSynchronize (its time: host clock around launch and sync);
 *     3. the allocations copied again (post.bin);
 *     4. meta.json: the kernel, its unit folder for the device's arch, the argument bytes
 *        (each parameter's size from <R3_RECORD_DIR>/cuda/<kernel>, which the record
 *        launcher wrote from the device IR's parameter layout), the launch geometry.
 * The capture format is the one the ingest (record/ingest.py) reads for every backend.
 *
 * The recorder itself is gpurec.h, shared with r3hip.c (the HIP runtime's twin): this file
 * names the CUDA runtime's types and entry points for it.
 *
 * Without R3CUDA_REAL_HEADERS the few CUDA types it uses are declared in cudatypes.h (their
 * ABI, as in cuda_runtime_api.h), so the record launcher builds it with no CUDA toolkit; the
 * tests build it once more with -DR3CUDA_REAL_HEADERS against the real headers, whose
 * prototypes then check every definition below.
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

#include "cudatypes.h"

#define R3G_BACKEND "cuda"
#define R3G_TAG "r3cuda"
#define R3G_VERBOSE_ENV "R3CUDA_VERBOSE"

#include "gpurec.h"

/* sm_XY from the device's compute capability */
static void vendor_arch(char *arch, size_t n, int device) {
  int major = 0, minor = 0;
  if (g_attr(&major, R3_ATTR_CC_MAJOR, device) == cudaSuccess && g_attr(&minor, R3_ATTR_CC_MINOR, device) == cudaSuccess)
    snprintf(arch, n, "sm_%d%d", major, minor);
}
