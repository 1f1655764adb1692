/* spack-r3's launch shim for the +r3 build of a CUDA or HIP application (emit/cuda.py): a
 * tuned kernel launches with its winner's block (and grid), as replay measured it. Included
 * once by each vendor's file, r3launch.c (the CUDA runtime) and r3hiplaunch.c (HIP's), after
 * its types (cudatypes.h, hiptypes.h), R3G_TAG, R3G_BACKEND and gpuapi.h.
 *
 * The launch geometry is the application's own code (its <<<grid, block>>>), so it is
 * changed where the launch happens, at run time: r3-apply links the vendor's shim into each
 * executable of a +r3 build that links the shared runtime (libcudart.so, libamdhip64.so),
 * and it interposes, as the launch recorder does (its definitions win over the runtime's;
 * the real ones by dlsym(RTLD_NEXT), gpuapi.h):
 *
 *   __cudaRegisterFunction / __hipRegisterFunction
 *                            the module constructor clang emits names each kernel: its host
 *                            stub (HIP: its kernel handle) and its device name; a planned
 *                            kernel's is kept with its planned geometry
 *   cudaLaunchKernel, cudaLaunchKernel_ptsz / hipLaunchKernel, hipLaunchKernel_spt
 *                            a planned kernel's launch gets its geometry (r3launch_geometry),
 *                            any other goes on unchanged
 *
 * The plan is no environment variable: r3-apply compiles each planned unit's kernels'
 * geometry into the unit's own object, as entries of the section r3_launch_plan (struct
 * r3_planned_launch), and the linker gathers every unit's entries between
 * __start_r3_launch_plan and __stop_r3_launch_plan. Each entry says what replay did with the
 * candidate (cudareplay.geometry, device/geometry.launch_grid): the block's x replaced by
 * thread_limit; a kernel that reads its grid's size (stride) keeps the grid it is launched
 * with, any other one's grid follows its block, rounded up to cover the threads it was
 * launched with; num_teams, where set (a grid-stride kernel's), replaces the grid's x.
 *
 * R3LAUNCH_VERBOSE=1 prints each planned kernel as it is registered. */
#ifndef R3_LAUNCH_H
#define R3_LAUNCH_H

/* One planned kernel's geometry (emit/cuda.py writes them; 0: as launched). */
struct r3_planned_launch {
  const char *kernel; /* its device (mangled) name */
  unsigned int thread_limit, num_teams;
  int stride; /* it reads gridDim: its grid does not follow its block */
};

extern const struct r3_planned_launch __start_r3_launch_plan[] __attribute__((weak));
extern const struct r3_planned_launch __stop_r3_launch_plan[] __attribute__((weak));

struct stub {
  const void *stub;
  const struct r3_planned_launch *plan;
};
static struct stub *g_stubs;
static int g_nstubs, g_capstubs;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static const struct r3_planned_launch *planned(const char *name) {
  for (const struct r3_planned_launch *p = __start_r3_launch_plan; p && p < __stop_r3_launch_plan; p++)
    if (p->kernel && !strcmp(p->kernel, name)) return p;
  return NULL;
}

/* The launch of a kernel planned as ``p``: replay's rule for its candidate. */
API void r3launch_apply(const struct r3_planned_launch *p, dim3 *grid, dim3 *block) {
  if (p->thread_limit) {
    if (!p->stride && p->thread_limit != block->x) /* its grid follows its block */
      grid->x = (unsigned int)(((uint64_t)grid->x * block->x + p->thread_limit - 1) / p->thread_limit);
    block->x = p->thread_limit;
  }
  if (p->num_teams) grid->x = p->num_teams;
}

/* The geometry the launch of ``stub`` gets: 1 where it is a planned kernel's (``grid`` and
 * ``block`` changed), 0 otherwise. */
API int r3launch_geometry(const void *stub, dim3 *grid, dim3 *block) {
  const struct r3_planned_launch *p = NULL;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < g_nstubs; i++)
    if (g_stubs[i].stub == stub) { p = g_stubs[i].plan; break; }
  pthread_mutex_unlock(&g_lock);
  if (!p) return 0;
  r3launch_apply(p, grid, block);
  return 1;
}

API void R3G_REG(RegisterFunction)(void **handle, const char *hostFun, char *deviceFun, const char *deviceName,
                                   int thread_limit, r3g_uint3 *tid, r3g_uint3 *bid, dim3 *bDim, dim3 *gDim,
                                   int *wSize) {
  static register_fn next;
  if (!next) next = (register_fn)real(R3G_STR(R3G_REG(RegisterFunction)));
  const char *name = deviceName ? deviceName : deviceFun;
  const struct r3_planned_launch *p = name ? planned(name) : NULL;
  if (p) {
    pthread_mutex_lock(&g_lock);
    if (g_nstubs == g_capstubs) {
      int cap = g_capstubs ? 2 * g_capstubs : 16;
      struct stub *s = realloc(g_stubs, (size_t)cap * sizeof *s);
      if (s) { g_stubs = s; g_capstubs = cap; }
    }
    if (g_nstubs < g_capstubs) g_stubs[g_nstubs++] = (struct stub){hostFun, p};
    pthread_mutex_unlock(&g_lock);
    const char *verbose = getenv("R3LAUNCH_VERBOSE");
    if (verbose && *verbose && *verbose != '0') /* (0: as launched) */
      fprintf(stderr, R3G_TAG ": %s: block x %u, grid x %u%s\n", name, p->thread_limit, p->num_teams,
              p->stride ? "" : ", following its block");
  }
  if (next) next(handle, hostFun, deviceFun, deviceName, thread_limit, tid, bid, bDim, gDim, wSize);
}

API r3g_error R3G_API(LaunchKernel)(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                                    r3g_stream stream) {
  static launch_fn next;
  if (!next && !(next = (launch_fn)real(R3G_NAME(LaunchKernel)))) return (r3g_error)1;
  r3launch_geometry(func, &gridDim, &blockDim);
  return next(func, gridDim, blockDim, args, sharedMem, stream);
}

API r3g_error R3G_LAUNCH_PTSZ(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                              r3g_stream stream) {
  static launch_fn next;
  if (!next && !(next = (launch_fn)real(R3G_STR(R3G_LAUNCH_PTSZ)))) return (r3g_error)1;
  r3launch_geometry(func, &gridDim, &blockDim);
  return next(func, gridDim, blockDim, args, sharedMem, stream);
}

#endif
