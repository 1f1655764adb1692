/* The GPU launch recorder, shared by r3cuda.c (CUDA runtime) and r3hip.c (HIP runtime): the
 * capture writer, the kernel index reader, and the interposed registration, allocation and
 * launch entry points. Included once by each vendor's file, which first defines:
 *
 *   R3G_PREFIX            cuda / hip: the runtime's entry points are R3G_PREFIX##Malloc, ...
 *   R3G_BACKEND, R3G_TAG  "cuda" / "hip" (meta.json's backend, profile.<pid>.<backend>.json);
 *                         "r3cuda" / "r3hip" (warnings)
 *   R3G_VERBOSE_ENV       the variable that prints each registered kernel
 *   R3G_LAUNCH_PTSZ, R3G_EVENT_RECORD_PTSZ
 *                         the per-thread default stream twins (cudaLaunchKernel_ptsz, hipLaunchKernel_spt)
 *   types r3g_error, r3g_stream, r3g_event, r3g_uint3, dim3, r3_attr, r3_copy_kind; R3G_SUCCESS,
 *   R3_MEMCPY_DEFAULT, R3_MEMCPY_DEVICE_TO_HOST
 *
 * and after it vendor_arch() (the device's arch name). The two runtimes' entry points used
 * here have the same parameters in the same order (checked against each one's real headers
 * by the tests), and clang's module constructors register kernels and variables the same way
 * for both (__cudaRegisterFunction / __hipRegisterFunction, ...Var). Exported: the capture
 * writer and index reader as r3cuda_* / r3hip_* (R3G_SYM). The entry-point names, real()
 * and the registration and launch types are gpuapi.h's (the +r3 build's launch shim shares
 * them; CUDA's types: cudatypes.h). */
#ifndef R3_GPUREC_H
#define R3_GPUREC_H

#include "gpuapi.h"

/* ---- the capture writer: file I/O only, no CUDA call (a test builds it into a program
 * without a GPU) --------------------------------------------------------------------- */

struct r3gpu_section {
  uint64_t dev, size;
  const unsigned char *pre, *post;
};

struct r3gpu_global {
  const char *name; /* its device name */
  uint64_t dev, size;
  const unsigned char *pre, *post;
};

struct r3gpu_capture {
  const char *kernel, *tu_dir, *arch;
  uint64_t instance, ns, stream;
  int pid, device;
  unsigned int grid[3], block[3];
  uint64_t shared;
  int nparams;
  const uint32_t *sizes;              /* bytes of each parameter */
  const unsigned char *const *params; /* each parameter's bytes */
  int nsections;
  const struct r3gpu_section *sections; /* sorted by address, disjoint */
  int nglobals;
  const struct r3gpu_global *globals; /* the kernel's device variables */
  const char *unreplayable;            /* why not, or NULL */
};

static int put(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

/* R3MEM1 (memimage.py): per section its device address, size and kind 1 (heap: compared);
 * in post.bin kind 5 (no bytes) where the launch changed nothing; a device variable kind 2
 * (always compared, its bytes in both images) */
static int write_image(const char *path, const struct r3gpu_capture *c, int post) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int bad = put(f, "R3MEM1\0\0", 8);
  static const unsigned char zeros[8];
  for (int i = 0; i < c->nsections && !bad; i++) {
    const struct r3gpu_section *s = &c->sections[i];
    int same = post && !memcmp(s->pre, s->post, s->size);
    uint64_t hdr[3] = {s->dev, s->size, same ? 5 : 1};
    bad |= put(f, hdr, sizeof hdr);
    if (!same) {
      bad |= put(f, post ? s->post : s->pre, s->size);
      if (s->size % 8) bad |= put(f, zeros, 8 - s->size % 8);
    }
  }
  for (int i = 0; i < c->nglobals && !bad; i++) {
    const struct r3gpu_global *g = &c->globals[i];
    uint64_t hdr[3] = {g->dev, g->size, 2};
    bad |= put(f, hdr, sizeof hdr);
    bad |= put(f, post ? g->post : g->pre, g->size);
    if (g->size % 8) bad |= put(f, zeros, 8 - g->size % 8);
  }
  bad |= fclose(f);
  return bad;
}

static void hex_bytes(FILE *f, const unsigned char *p, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) fprintf(f, "%02x", p[i]);
}

static int write_meta(const char *path, const struct r3gpu_capture *c) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  uint64_t bytes = 0;
  for (int i = 0; i < c->nsections; i++) bytes += c->sections[i].size;
  for (int i = 0; i < c->nglobals; i++) bytes += c->globals[i].size;
  fprintf(f, "{\"kernel\": ");
  json_str(f, c->kernel);
  fprintf(f, ", \"tu_dir\": ");
  json_str(f, c->tu_dir);
  fprintf(f, ", \"instance\": %llu, \"pid\": %d, \"args\": [", (unsigned long long)c->instance, c->pid);
  /* a parameter of up to 8 bytes as its little-endian value; a larger one (a struct passed
   * by value) as 0 here and its bytes in "byval" */
  for (int i = 0; i < c->nparams; i++) {
    uint64_t v = 0;
    if (c->sizes[i] <= 8) memcpy(&v, c->params[i], c->sizes[i]);
    fprintf(f, "%s\"0x%llx\"", i ? ", " : "", (unsigned long long)v);
  }
  fprintf(f, "], \"byval\": [");
  for (int i = 0; i < c->nparams; i++) {
    fprintf(f, "%s", i ? ", " : "");
    if (c->sizes[i] <= 8) fprintf(f, "null");
    else { fputc('"', f); hex_bytes(f, c->params[i], c->sizes[i]); fputc('"', f); }
  }
  fprintf(f, "], \"globals\": [");
  for (int i = 0; i < c->nglobals; i++) {
    fprintf(f, "%s{\"name\": ", i ? ", " : "");
    json_str(f, c->globals[i].name);
    fprintf(f, ", \"addr\": \"0x%llx\", \"size\": %llu}", (unsigned long long)c->globals[i].dev,
            (unsigned long long)c->globals[i].size);
  }
  fprintf(f, "]");
  if (c->unreplayable) {
    fprintf(f, ", \"unreplayable\": ");
    json_str(f, c->unreplayable);
  }
  fprintf(f, ", \"ret\": null, \"threads\": 1, \"instance_ns\": %llu, \"arena_base\": \"0x0\", "
             "\"arena_end\": \"0x0\", \"memory\": {\"mode\": \"device\", \"live_bytes\": %llu, "
             "\"touched_bytes\": %llu, \"thread\": \"main\"}, \"launch\": {\"backend\": \"" R3G_BACKEND "\", "
             "\"device\": %d, \"arch\": ",
          (unsigned long long)c->ns, (unsigned long long)bytes, (unsigned long long)bytes, c->device);
  json_str(f, c->arch);
  fprintf(f, ", \"grid\": [%u, %u, %u], \"block_dim\": [%u, %u, %u], \"block\": %llu, \"dynamic_shared\": %llu, "
             "\"stream\": \"0x%llx\", \"param_sizes\": [",
          c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1], c->block[2],
          (unsigned long long)c->block[0] * c->block[1] * c->block[2], (unsigned long long)c->shared,
          (unsigned long long)c->stream);
  for (int i = 0; i < c->nparams; i++) fprintf(f, "%s%u", i ? ", " : "", c->sizes[i]);
  fprintf(f, "]}}\n");
  return fclose(f);
}

static void failure_mark(const char *dir, const char *name, uint64_t instance, int err) {
  char path[4096];
  snprintf(path, sizeof path, "%s/captures/.error-%d-%s-%llu-%d", dir, err, name, (unsigned long long)instance,
           (int)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) close(fd);
}

/* <record_dir>/captures/<kernel>-<instance>-<pid>/{pre.bin,post.bin,meta.json}, written under
 * a .tmp- name and renamed: a killed run leaves no half capture. 0 on success. */
API int R3G_SYM(write_capture)(const char *record_dir, const struct r3gpu_capture *c) {
  char dir[4096], tmp[4096], path[4200], fin[4200];
  snprintf(dir, sizeof dir, "%s/captures", record_dir);
  mkdir(record_dir, 0755);
  mkdir(dir, 0755);
  snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%llu-%d", dir, c->kernel, (unsigned long long)c->instance, c->pid);
  if (mkdir(tmp, 0755) && errno != EEXIST) { failure_mark(record_dir, c->kernel, c->instance, errno); return -1; }
  int bad = 0;
  snprintf(path, sizeof path, "%s/pre.bin", tmp);
  bad |= write_image(path, c, 0);
  snprintf(path, sizeof path, "%s/post.bin", tmp);
  bad |= write_image(path, c, 1);
  snprintf(path, sizeof path, "%s/meta.json", tmp);
  bad |= write_meta(path, c);
  snprintf(fin, sizeof fin, "%s/%s-%llu-%d", dir, c->kernel, (unsigned long long)c->instance, c->pid);
  if (bad || rename(tmp, fin)) {
    failure_mark(record_dir, c->kernel, c->instance, errno ? errno : EIO);
    return -1;
  }
  return 0;
}

static char g_unit_arch[64]; /* the arch of the unit folder R3G_SYM(kernel_unit) chose last */

/* The kernel's index file (record/cuda.py): its parameters' sizes, and the unit folder of
 * ``arch`` (else the first arch's). The number of parameters, or -1. */
API int R3G_SYM(kernel_unit)(const char *record_dir, const char *kernel, const char *arch, char *tu_dir, size_t n,
                           uint32_t *sizes, int max) {
  char path[4096], line[4096];
  snprintf(path, sizeof path, "%s/cuda/%s", record_dir, kernel);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int count = -1;
  if (fgets(line, sizeof line, f)) {
    count = 0;
    for (char *s = line, *e; count < max; s = e) {
      unsigned long v = strtoul(s, &e, 10);
      if (e == s) break;
      sizes[count++] = (uint32_t)v;
    }
  }
  int found = 0;
  tu_dir[0] = 0;
  while (count >= 0 && fgets(line, sizeof line, f)) {
    char *sp = strchr(line, ' ');
    if (!sp) continue;
    *sp = 0;
    if (!strcmp(line, "global")) continue; /* a device variable (r3cuda_kernel_globals) */
    size_t len = strcspn(sp + 1, "\n");
    sp[1 + len] = 0;
    if (!tu_dir[0] || (!found && !strcmp(line, arch))) {
      snprintf(tu_dir, n, "%s", sp + 1);
      snprintf(g_unit_arch, sizeof g_unit_arch, "%s", line);
      found = !strcmp(line, arch);
    }
  }
  fclose(f);
  return tu_dir[0] ? count : -1;
}

/* The device variables the kernel's index file names (lines "global <name>"), each a
 * malloc'ed string in ``names``; how many (at most ``max``). */
static int kernel_globals(const char *record_dir, const char *kernel, char **names, int max) {
  char path[4096], line[4096];
  snprintf(path, sizeof path, "%s/cuda/%s", record_dir, kernel);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int n = 0;
  while (n < max && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (!strncmp(line, "global ", 7) && line[7] && (names[n] = strdup(line + 7))) n++;
  }
  fclose(f);
  return n;
}

/* ---- the interposer ---------------------------------------------------------------- */

#define MAXPARAMS 256

struct kernel {
  const void *stub; /* host stub: what cudaLaunchKernel is given */
  char *name;       /* device name */
  uint64_t calls, captured;
  /* its device time, sampled: a launch is timed between two events on its stream while no
   * earlier timed launch of it is still unfinished; the sum scaled to all its calls */
  r3g_event start, stop;
  int events, pending;
  uint64_t timed, device_ns;
};

struct alloc { uint64_t dev, size; };

struct var { const void *host; char *name; uint64_t size; }; /* a registered device variable */
static struct var *g_vars;
static int g_nvars, g_capvars;

static struct kernel *g_kernels;
static int g_nkernels, g_capkernels;
static struct alloc *g_allocs;
static int g_nallocs, g_capallocs;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_t0, g_paused;

typedef r3g_error (*malloc_fn)(void **, size_t);
typedef r3g_error (*managed_fn)(void **, size_t, unsigned int);
typedef r3g_error (*free_fn)(void *);
typedef r3g_error (*sync_fn)(void);
typedef r3g_error (*memcpy_fn)(void *, const void *, size_t, r3_copy_kind);
typedef r3g_error (*getdev_fn)(int *);
typedef void (*register_var_fn)(void **, char *, char *, const char *, int, size_t, int, int);
typedef r3g_error (*symbol_address_fn)(void **, const void *);
typedef r3g_error (*from_symbol_fn)(void *, const void *, size_t, size_t, r3_copy_kind);
typedef r3g_error (*attr_fn)(int *, r3_attr, int);
typedef r3g_error (*ev_create_fn)(r3g_event *);
typedef r3g_error (*ev_record_fn)(r3g_event, r3g_stream);
typedef r3g_error (*ev_query_fn)(r3g_event);
typedef r3g_error (*ev_elapsed_fn)(float *, r3g_event, r3g_event);

#ifdef R3G_REAL_HEADERS /* what dlsym finds is called through these: each one the headers' own type */
#define R3G_SAME(fn, type) _Static_assert(__builtin_types_compatible_p(__typeof__(&R3G_API(fn)), type), #fn)
R3G_SAME(Memcpy, memcpy_fn);
R3G_SAME(GetDevice, getdev_fn);
R3G_SAME(DeviceGetAttribute, attr_fn);
R3G_SAME(DeviceSynchronize, sync_fn);
R3G_SAME(GetSymbolAddress, symbol_address_fn);
R3G_SAME(MemcpyFromSymbol, from_symbol_fn);
R3G_SAME(EventCreate, ev_create_fn);
R3G_SAME(EventRecord, ev_record_fn);
R3G_SAME(EventQuery, ev_query_fn);
R3G_SAME(EventSynchronize, ev_query_fn);
R3G_SAME(EventElapsedTime, ev_elapsed_fn);
R3G_SAME(LaunchKernel, launch_fn);
#endif

API void R3G_REG(RegisterFunction)(void **handle, const char *hostFun, char *deviceFun, const char *deviceName,
                                int thread_limit, r3g_uint3 *tid, r3g_uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize) {
  static register_fn next;
  if (!next) next = (register_fn)real(R3G_STR(R3G_REG(RegisterFunction)));
  pthread_mutex_lock(&g_lock);
  if (g_nkernels == g_capkernels) {
    int cap = g_capkernels ? 2 * g_capkernels : 64;
    struct kernel *k = realloc(g_kernels, (size_t)cap * sizeof *k);
    if (k) { g_kernels = k; g_capkernels = cap; }
  }
  if (g_nkernels < g_capkernels) {
    struct kernel *k = &g_kernels[g_nkernels++];
    memset(k, 0, sizeof *k);
    k->stub = hostFun;
    k->name = strdup(deviceName ? deviceName : deviceFun);
  }
  pthread_mutex_unlock(&g_lock);
  const char *verbose = getenv(R3G_VERBOSE_ENV); /* which kernels the recorder sees, before any launch */
  if (verbose && *verbose && *verbose != '0') warn("kernel ", deviceName ? deviceName : deviceFun);
  if (next) next(handle, hostFun, deviceFun, deviceName, thread_limit, tid, bid, bDim, gDim, wSize);
}

/* what clang's module constructor calls for each __device__ / __constant__ variable: its host
 * shadow (what cudaGetSymbolAddress and cudaMemcpyFromSymbol take) and its device name */
API void R3G_REG(RegisterVar)(void **handle, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
                           size_t size, int constant, int global) {
  static register_var_fn next;
  if (!next) next = (register_var_fn)real(R3G_STR(R3G_REG(RegisterVar)));
  pthread_mutex_lock(&g_lock);
  if (g_nvars == g_capvars) {
    int cap = g_capvars ? 2 * g_capvars : 64;
    struct var *v = realloc(g_vars, (size_t)cap * sizeof *v);
    if (v) { g_vars = v; g_capvars = cap; }
  }
  if (g_nvars < g_capvars && (deviceName || deviceAddress)) {
    g_vars[g_nvars] = (struct var){hostVar, strdup(deviceName ? deviceName : deviceAddress), size};
    if (g_vars[g_nvars].name) g_nvars++;
  }
  pthread_mutex_unlock(&g_lock);
  if (next) next(handle, hostVar, deviceAddress, deviceName, ext, size, constant, global);
}

static const struct var *var_named(const char *name) { /* g_lock held */
  for (int i = 0; i < g_nvars; i++)
    if (!strcmp(g_vars[i].name, name)) return &g_vars[i];
  return NULL;
}

#define MAXGLOB 64 /* device variables of one kernel */

/* The kernel's device variables: each one's device address and bytes (pre or post); NULL,
 * else why they cannot be (a variable not registered, a failing copy). */
static const char *read_globals(struct r3gpu_global *g, const void **host, int n, int post) {
  static symbol_address_fn address;
  static from_symbol_fn from;
  static char why[512];
  if (!address) address = (symbol_address_fn)real(R3G_NAME(GetSymbolAddress));
  if (!from) from = (from_symbol_fn)real(R3G_NAME(MemcpyFromSymbol));
  for (int i = 0; i < n; i++) {
    void *dev = NULL;
    if (!host[i]) {
      snprintf(why, sizeof why, "its device variable %.200s is not registered by the application", g[i].name);
      return why;
    }
    unsigned char *buf = malloc(g[i].size ? g[i].size : 1);
    if (!buf || !address || !from || address(&dev, host[i]) != R3G_SUCCESS ||
        from(buf, host[i], g[i].size, 0, R3_MEMCPY_DEVICE_TO_HOST) != R3G_SUCCESS) {
      free(buf);
      snprintf(why, sizeof why, "its device variable %.200s could not be read", g[i].name);
      return why;
    }
    g[i].dev = (uint64_t)(uintptr_t)dev;
    if (post) g[i].post = buf;
    else g[i].pre = buf;
  }
  return NULL;
}

static void track(void *dev, size_t size) {
  if (!dev) return;
  pthread_mutex_lock(&g_lock);
  if (g_nallocs == g_capallocs) {
    int cap = g_capallocs ? 2 * g_capallocs : 256;
    struct alloc *a = realloc(g_allocs, (size_t)cap * sizeof *a);
    if (a) { g_allocs = a; g_capallocs = cap; }
  }
  if (g_nallocs < g_capallocs) g_allocs[g_nallocs++] = (struct alloc){(uint64_t)(uintptr_t)dev, size};
  pthread_mutex_unlock(&g_lock);
}

API r3g_error R3G_API(Malloc)(void **devPtr, size_t size) {
  static malloc_fn next;
  if (!next && !(next = (malloc_fn)real(R3G_NAME(Malloc)))) return (r3g_error)1;
  r3g_error rc = next(devPtr, size);
  if (rc == R3G_SUCCESS && devPtr) track(*devPtr, size);
  return rc;
}

API r3g_error R3G_API(MallocManaged)(void **devPtr, size_t size, unsigned int flags) {
  static managed_fn next;
  if (!next && !(next = (managed_fn)real(R3G_NAME(MallocManaged)))) return (r3g_error)1;
  r3g_error rc = next(devPtr, size, flags);
  if (rc == R3G_SUCCESS && devPtr) track(*devPtr, size);
  return rc;
}

API r3g_error R3G_API(Free)(void *devPtr) {
  static free_fn next;
  if (!next && !(next = (free_fn)real(R3G_NAME(Free)))) return (r3g_error)1;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < g_nallocs; i++)
    if (g_allocs[i].dev == (uint64_t)(uintptr_t)devPtr) { g_allocs[i] = g_allocs[--g_nallocs]; break; }
  pthread_mutex_unlock(&g_lock);
  return next(devPtr);
}

static int by_addr(const void *a, const void *b) {
  const struct r3gpu_section *x = a, *y = b;
  return x->dev < y->dev ? -1 : x->dev > y->dev;
}

/* every tracked allocation copied to the host (pre or post); -1 when a copy fails */
static int read_device(memcpy_fn copy, struct r3gpu_section *s, int n, int post) {
  for (int i = 0; i < n; i++) {
    unsigned char *buf = malloc(s[i].size ? s[i].size : 1);
    if (!buf) return -1;
    if (copy(buf, (const void *)(uintptr_t)s[i].dev, s[i].size, R3_MEMCPY_DEFAULT) != R3G_SUCCESS) {
      free(buf);
      return -1;
    }
    if (post) s[i].post = buf;
    else s[i].pre = buf;
  }
  return 0;
}

static sync_fn g_sync;
static memcpy_fn g_copy;
static getdev_fn g_getdev;
static attr_fn g_attr;
static ev_create_fn g_ev_create;
static ev_record_fn g_ev_record, g_ev_record_ptsz;
static ev_query_fn g_ev_query, g_ev_sync;
static ev_elapsed_fn g_ev_elapsed;
static pthread_mutex_t g_time_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_profiling, g_flushed;
static char g_arch[32];

__attribute__((constructor)) static void r3c_init(void) { g_t0 = now_ns(); }

/* the device's arch (sm_90, gfx90a; empty where the runtime cannot say): which unit folder a
 * kernel's launches are tied to. vendor_arch: the vendor's file's, defined after this one. */
static void vendor_arch(char *arch, size_t n, int device);
static void device_arch(char *arch, size_t n, int *device) {
  *device = 0;
  arch[0] = 0;
  g_getdev(device);
  vendor_arch(arch, n, *device);
}

static void settle(struct kernel *k, int wait) { /* g_time_lock held */
  if (!k->pending || (wait ? g_ev_sync(k->stop) : g_ev_query(k->stop)) != R3G_SUCCESS) return;
  float ms = 0;
  if (g_ev_elapsed(&ms, k->start, k->stop) == R3G_SUCCESS && ms >= 0) {
    k->device_ns += (uint64_t)(ms * 1e6);
    k->timed++;
  }
  k->pending = 0;
}

/* At exit, before the runtime's own exit handlers (registered earlier, at its first call:
 * they run later) tear the device down: the last timed launches waited for, then the
 * profile written in the form of r3rt.c's profile.<pid>.json (record/profiles.py). */
static void flush(void) {
  pthread_mutex_lock(&g_time_lock);
  g_flushed = 1;
  for (int i = 0; i < g_nkernels; i++) settle(&g_kernels[i], 1);
  pthread_mutex_unlock(&g_time_lock);
  char tmp[4096], fin[4096], tu[1024];
  uint32_t sizes[MAXPARAMS];
  snprintf(tmp, sizeof tmp, "%s/.tmp-profile.%d." R3G_BACKEND ".json", g_dir, (int)getpid());
  snprintf(fin, sizeof fin, "%s/profile.%d." R3G_BACKEND ".json", g_dir, (int)getpid());
  mkdir(g_dir, 0755);
  FILE *f = fopen(tmp, "w");
  if (!f) { warn("cannot write ", tmp); return; }
  fprintf(f, "{\"pid\": %d, \"app_ns\": %llu, \"paused_ns\": %llu, \"backend\": \"" R3G_BACKEND "\", \"kernels\": [",
          (int)getpid(), (unsigned long long)(now_ns() - g_t0), (unsigned long long)g_paused);
  int first = 1;
  for (int i = 0; i < g_nkernels; i++) {
    struct kernel *k = &g_kernels[i];
    if (!k->calls || R3G_SYM(kernel_unit)(g_dir, k->name, g_arch, tu, sizeof tu, sizes, MAXPARAMS) < 0) continue;
    unsigned long long ns = k->timed ? (unsigned long long)((double)k->device_ns * k->calls / k->timed) : 0;
    fprintf(f, "%s{\"name\": ", first ? "" : ", ");
    json_str(f, k->name);
    fprintf(f, ", \"tu_dir\": ");
    json_str(f, tu);
    fprintf(f, ", \"id\": -1, \"calls\": %llu, \"timed_calls\": %llu, \"total_ns\": %llu, \"self_ns\": %llu, "
               "\"main_self_ns\": %llu, \"main_top_calls\": %llu, \"top_ns\": %llu, \"main_top_ns\": %llu, "
               "\"captured\": %llu}",
            (unsigned long long)k->calls, (unsigned long long)k->timed, ns, ns, ns, (unsigned long long)k->calls, ns,
            ns, (unsigned long long)k->captured);
    first = 0;
  }
  fprintf(f, "]}\n");
  if (fclose(f) || rename(tmp, fin)) warn("cannot write ", fin);
}

/* a launch not captured: counted, and timed by device events where it can be */
static r3g_error timed(struct kernel *k, int ptsz, launch_fn next, const void *func, dim3 gridDim, dim3 blockDim,
                         void **args, size_t sharedMem, r3g_stream stream) {
  ev_record_fn record = ptsz ? g_ev_record_ptsz : g_ev_record;
  if (!k || !g_profiling || !record) return next(func, gridDim, blockDim, args, sharedMem, stream);
  pthread_mutex_lock(&g_time_lock);
  if (g_flushed) {
    pthread_mutex_unlock(&g_time_lock);
    return next(func, gridDim, blockDim, args, sharedMem, stream);
  }
  if (!k->events && g_ev_create(&k->start) == R3G_SUCCESS && g_ev_create(&k->stop) == R3G_SUCCESS) k->events = 1;
  settle(k, 0);
  int time_it = k->events && !k->pending && record(k->start, stream) == R3G_SUCCESS;
  r3g_error rc = next(func, gridDim, blockDim, args, sharedMem, stream);
  if (time_it && rc == R3G_SUCCESS && record(k->stop, stream) == R3G_SUCCESS) k->pending = 1;
  pthread_mutex_unlock(&g_time_lock);
  return rc;
}

/* a launch through ``next`` (the runtime's cudaLaunchKernel or, ``ptsz``, its per-thread
 * default stream twin) */
static r3g_error launch(launch_fn next, int ptsz, const void *func, dim3 gridDim, dim3 blockDim, void **args,
                          size_t sharedMem, r3g_stream stream) {
  static int started;
  pthread_mutex_lock(&g_time_lock);
  if (!started) { /* the first launch: the runtime is initialized by now */
    started = 1;
    config();
    g_copy = (memcpy_fn)real(R3G_NAME(Memcpy));
    g_getdev = (getdev_fn)real(R3G_NAME(GetDevice));
    g_attr = (attr_fn)real(R3G_NAME(DeviceGetAttribute));
    g_ev_create = (ev_create_fn)real(R3G_NAME(EventCreate));
    g_ev_record = (ev_record_fn)real(R3G_NAME(EventRecord));
    g_ev_record_ptsz = (ev_record_fn)real(R3G_STR(R3G_EVENT_RECORD_PTSZ));
    g_ev_query = (ev_query_fn)real(R3G_NAME(EventQuery));
    g_ev_sync = (ev_query_fn)real(R3G_NAME(EventSynchronize));
    g_ev_elapsed = (ev_elapsed_fn)real(R3G_NAME(EventElapsedTime));
    g_sync = (sync_fn)real(R3G_NAME(DeviceSynchronize));
    int device;
    if (g_getdev && g_attr) device_arch(g_arch, sizeof g_arch, &device);
    g_profiling = g_have_dir && g_ev_create && g_ev_query && g_ev_sync && g_ev_elapsed && !atexit(flush);
  }
  pthread_mutex_unlock(&g_time_lock);
  pthread_mutex_lock(&g_lock);
  struct kernel *k = NULL;
  for (int i = 0; i < g_nkernels; i++)
    if (g_kernels[i].stub == func) { k = &g_kernels[i]; break; }
  uint64_t instance = 0;
  int capture = k && g_sync && g_copy && g_getdev && g_attr && selected(k->name) && k->captured < g_instances;
  if (k) k->calls++;
  if (capture) instance = ++k->captured;
  int n = capture ? g_nallocs : 0;
  struct r3gpu_section *secs = n ? calloc((size_t)n, sizeof *secs) : NULL;
  for (int i = 0; i < n && secs; i++) { secs[i].dev = g_allocs[i].dev; secs[i].size = g_allocs[i].size; }
  pthread_mutex_unlock(&g_lock);
  if (!capture || (n && !secs)) {
    free(secs);
    return timed(k, ptsz, next, func, gridDim, blockDim, args, sharedMem, stream);
  }

  char tu_dir[1024], arch[32];
  uint32_t sizes[MAXPARAMS];
  int device;
  device_arch(arch, sizeof arch, &device);
  int nparams = R3G_SYM(kernel_unit)(g_dir, k->name, arch, tu_dir, sizeof tu_dir, sizes, MAXPARAMS);
  if (!arch[0]) snprintf(arch, sizeof arch, "%s", g_unit_arch); /* the runtime did not say: the unit's */
  if (nparams < 0) { /* compiled without the record launcher: nothing to tie the launch to */
    free(secs);
    return timed(k, ptsz, next, func, gridDim, blockDim, args, sharedMem, stream);
  }
  char *gnames[MAXGLOB];
  const void *ghost[MAXGLOB];
  struct r3gpu_global globs[MAXGLOB];
  int ng = kernel_globals(g_dir, k->name, gnames, MAXGLOB);
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < ng; i++) {
    const struct var *v = var_named(gnames[i]);
    ghost[i] = v ? v->host : NULL;
    globs[i] = (struct r3gpu_global){gnames[i], 0, v ? v->size : 0, NULL, NULL};
  }
  pthread_mutex_unlock(&g_lock);
  uint64_t p0 = now_ns();
  qsort(secs, (size_t)n, sizeof *secs, by_addr);
  int bad = g_sync() != R3G_SUCCESS || read_device(g_copy, secs, n, 0);
  const char *why = bad ? NULL : read_globals(globs, ghost, ng, 0);
  uint64_t t0 = now_ns();
  r3g_error rc = next(func, gridDim, blockDim, args, sharedMem, stream);
  bad |= rc != R3G_SUCCESS || g_sync() != R3G_SUCCESS;
  uint64_t dt = now_ns() - t0;
  bad |= !bad && read_device(g_copy, secs, n, 1);
  if (!bad && !why) why = read_globals(globs, ghost, ng, 1);
  if (!bad) {
    struct r3gpu_capture c = {
        .kernel = k->name, .tu_dir = tu_dir, .arch = arch, .instance = instance, .ns = dt,
        .stream = (uint64_t)(uintptr_t)stream, .pid = (int)getpid(), .device = device,
        .grid = {gridDim.x, gridDim.y, gridDim.z}, .block = {blockDim.x, blockDim.y, blockDim.z},
        .shared = sharedMem, .nparams = nparams, .sizes = sizes,
        .params = (const unsigned char *const *)args, .nsections = n, .sections = secs,
        .nglobals = why ? 0 : ng, .globals = globs, .unreplayable = why,
    };
    if (R3G_SYM(write_capture)(g_dir, &c)) warn("cannot write the capture of ", k->name);
  } else {
    warn("device memory could not be read around the launch; not captured: ", k->name);
  }
  for (int i = 0; i < n; i++) { free((void *)secs[i].pre); free((void *)secs[i].post); }
  for (int i = 0; i < ng; i++) { free((void *)globs[i].pre); free((void *)globs[i].post); free(gnames[i]); }
  free(secs);
  /* the capture's own time (synchronizing, copying, writing) is no part of the run; the
   * launch's is the kernel's (its sample) */
  __atomic_add_fetch(&g_paused, now_ns() - p0 - dt, __ATOMIC_RELAXED);
  pthread_mutex_lock(&g_time_lock);
  if (rc == R3G_SUCCESS) { k->device_ns += dt; k->timed++; }
  pthread_mutex_unlock(&g_time_lock);
  return rc;
}

API r3g_error R3G_API(LaunchKernel)(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                                 r3g_stream stream) {
  static launch_fn next;
  if (!next && !(next = (launch_fn)real(R3G_NAME(LaunchKernel)))) return (r3g_error)1;
  return launch(next, 0, func, gridDim, blockDim, args, sharedMem, stream);
}

/* what a unit compiled for per-thread default streams (-fgpu-default-stream=per-thread,
 * CUDA_API_PER_THREAD_DEFAULT_STREAM) launches with */
API r3g_error R3G_LAUNCH_PTSZ(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                                      r3g_stream stream) {
  static launch_fn next;
  if (!next && !(next = (launch_fn)real(R3G_STR(R3G_LAUNCH_PTSZ)))) return (r3g_error)1;
  return launch(next, 1, func, gridDim, blockDim, args, sharedMem, stream);
}

#endif
