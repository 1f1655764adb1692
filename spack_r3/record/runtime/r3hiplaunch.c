/* spack-r3's launch shim for the +r3 build of a HIP application: r3launch.h (the shim
 * itself, shared with CUDA's r3launch.c) on the HIP runtime's entry points (libamdhip64.so). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hiptypes.h"

#define R3G_BACKEND "hip"
#define R3G_TAG "r3launch"

#include "gpuapi.h"
#include "r3launch.h"
