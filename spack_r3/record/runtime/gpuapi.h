/* What an interposer of a GPU runtime needs, shared by the launch recorder (gpurec.h:
 * r3cuda.c, r3hip.c) and the +r3 build's launch shim (r3launch.c): the runtime's entry-point
 * names from its prefix, the real entry point behind an interposed one (dlsym(RTLD_NEXT)),
 * and the two entry points every interposer takes over: the module constructor's kernel
 * registration (host stub -> device name) and the launch. Included after the vendor's
 * types (cudatypes.h, r3hip.c's) and R3G_PREFIX, R3G_TAG, R3G_BACKEND. */
#ifndef R3_GPUAPI_H
#define R3_GPUAPI_H

#define API __attribute__((visibility("default")))
#define R3G_CAT2(a, b) a##b
#define R3G_CAT(a, b) R3G_CAT2(a, b)
#define R3G_STR2(x) #x
#define R3G_STR(x) R3G_STR2(x)
#define R3G_API(name) R3G_CAT(R3G_PREFIX, name)          /* cudaMalloc, hipMalloc */
#define R3G_NAME(name) R3G_STR(R3G_API(name))            /* "cudaMalloc" */
#define R3G_REG(name) R3G_CAT(__, R3G_API(name))         /* __cudaRegisterFunction */
#define R3G_SYM(name) R3G_CAT(R3G_CAT(r3, R3G_PREFIX), R3G_CAT(_, name)) /* r3cuda_write_capture */

static void warn(const char *a, const char *b) { fprintf(stderr, R3G_TAG ": %s%s\n", a, b ? b : ""); }

static void *real(const char *name) {
  void *p = dlsym(RTLD_NEXT, name);
  if (!p) warn("the " R3G_BACKEND " runtime does not define ", name);
  return p;
}

typedef void (*register_fn)(void **, const char *, char *, const char *, int, r3g_uint3 *, r3g_uint3 *, dim3 *, dim3 *, int *);
typedef r3g_error (*launch_fn)(const void *, dim3, dim3, void **, size_t, r3g_stream);

#endif
