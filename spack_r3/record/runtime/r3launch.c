/* spack-r3's launch shim for the +r3 build of a CUDA application: r3launch.h (the shim
 * itself, shared with HIP's r3hiplaunch.c) on the CUDA runtime's entry points. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudatypes.h"

#define R3G_BACKEND "cuda"
#define R3G_TAG "r3launch"

#include "gpuapi.h"
#include "r3launch.h"
