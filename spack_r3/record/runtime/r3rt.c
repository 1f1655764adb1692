/* spack-r3 record runtime, linked into every recorded application.
 *
 * 1. Arena heap: malloc and friends are defined here and interpose libc's for the
 *    whole process. Every allocation comes from one fixed virtual-address arena
 *    (R3_ARENA_BASE, R3_ARENA_SIZE), so a capture can be replayed by mapping the
 *    arena at the same address: no pointer rebasing. The heap is walkable: each
 *    chunk starts with a 16-byte header {size, tag}. The application's private mappings
 *    (mmap) come from the arena too; the rest are watched (see the end of this file).
 * 2. Probes: __r3_enter/__r3_exit count and time every kernel call (inclusive and
 *    self time, snapshot work excluded); profile.<pid>.json at exit.
 * 3. Captures: memory images before/after selected kernel instances plus meta.json,
 *    written into a temporary directory and renamed when complete; one that cannot be
 *    written leaves a marker that fails the record (record_failure).
 * 4. One process is the run: a process the application forks records nothing (g_forked).
 *
 * Rules for this file: never call anything that may malloc while holding the heap
 * lock; no stdio; output through open(2)/write(2) and our own formatters.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "r3rt.h"

_Static_assert(sizeof(struct r3_kinfo) == 16 * 8, "r3_kinfo ABI: 16 x 8 bytes");
_Static_assert(sizeof(struct r3_global) == 3 * 8, "r3_global ABI: 3 x 8 bytes");

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* This file defines mmap, munmap and mremap for the application (see "the application's
 * mappings" below); its own maps go straight to the system. */
static void *sys_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off) {
  return (void *)syscall(SYS_mmap, a, n, prot, flags, fd, off);
}
static int sys_munmap(void *a, size_t n) { return (int)syscall(SYS_munmap, a, n); }
static void *sys_mremap(void *a, size_t n, size_t m, int flags, void *to) {
  return (void *)syscall(SYS_mremap, a, n, m, flags, to);
}
#define mmap sys_mmap
#define munmap sys_munmap
#define mremap(a, n, m, flags) sys_mremap(a, n, m, flags, NULL)

#define TLS __thread __attribute__((tls_model("initial-exec")))
#define UNUSED __attribute__((unused))

extern char **environ;
extern int omp_in_parallel(void) __attribute__((weak));
extern int omp_get_max_threads(void) __attribute__((weak));

/* OpenMP entry points: the weak references when the executable links an OpenMP runtime,
 * else whatever the process has loaded (e.g. libomp pulled in by a shared library). */
typedef int (*omp_int_fn)(void);
static omp_int_fn omp_fn(int max_threads) {
  static omp_int_fn found[2];
  if (!max_threads && omp_in_parallel) return omp_in_parallel;
  if (max_threads && omp_get_max_threads) return omp_get_max_threads;
  if (!found[max_threads])
    found[max_threads] =
        (omp_int_fn)dlsym(RTLD_DEFAULT, max_threads ? "omp_get_max_threads" : "omp_in_parallel");
  return found[max_threads];
}

/* ------------------------------------------------------------------------- */
/* small helpers: messages, numbers, environment                             */
/* ------------------------------------------------------------------------- */

static size_t r3_strlen(const char *s) { size_t n = 0; while (s[n]) n++; return n; }

static void write_all(int fd, const void *p, size_t n) {
  const char *c = (const char *)p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0) { if (errno == EINTR) continue; return; }
    c += w; n -= (size_t)w;
  }
}

/* where warnings go: stderr, or in a snapshot process (whose stderr is closed so that the
 * application's own output is not printed twice) a copy of the parent's stderr */
static int g_warn_fd = 2;

/* one line to stderr: "r3-record runtime: " + parts (NULL-terminated) + "\n" */
static void warn(const char *first, ...) {
  char buf[1024];
  size_t n = 0;
  const char *pre = "r3-record runtime: ";
  for (const char *s = pre; *s; s++) buf[n++] = *s;
  va_list ap;
  va_start(ap, first);
  for (const char *part = first; part; part = va_arg(ap, const char *))
    for (const char *s = part; *s && n < sizeof buf - 2; s++) buf[n++] = (*s == '\n') ? ' ' : *s;
  va_end(ap);
  buf[n++] = '\n';
  write_all(g_warn_fd, buf, n);
}

static char *fmt_u64(char *end, uint64_t v) { /* writes backwards, returns start */
  *--end = 0;
  do { *--end = (char)('0' + v % 10); v /= 10; } while (v);
  return end;
}

static char *fmt_hex(char *end, uint64_t v) { /* "0x..." backwards */
  static const char hx[] = "0123456789abcdef";
  *--end = 0;
  do { *--end = hx[v & 15]; v >>= 4; } while (v);
  *--end = 'x';
  *--end = '0';
  return end;
}

/* strerror without locale or malloc (used while the heap lock is held) */
static const char *err_text(int err, char *b, size_t cap) {
  switch (err) {
    case EEXIST: return "File exists";
    case ENOMEM: return "Cannot allocate memory";
    case EINVAL: return "Invalid argument";
    case EPERM: return "Operation not permitted";
    case EACCES: return "Permission denied";
    default: break;
  }
  char *e = b + cap;
  e = fmt_u64(e, (uint64_t)err);
  e -= 6;
  memcpy(e, "errno ", 6);
  return e;
}

/* number: decimal, or 0x-hex, optional K/M/G/T suffix (binary). hex_default: plain digits are hex */
static int parse_num(const char *s, uint64_t *out, int hex_default) {
  uint64_t v = 0;
  int base = hex_default ? 16 : 10, digits = 0;
  while (*s == ' ') s++;
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) { base = 16; s += 2; }
  for (;; s++) {
    int d;
    char c = *s;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (base == 16 && c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (base == 16 && c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else break;
    if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return -1;
    v = v * (uint64_t)base + (uint64_t)d;
    digits++;
  }
  if (!digits) return -1;
  int shift = 0;
  switch (*s) {
    case 'k': case 'K': shift = 10; s++; break;
    case 'm': case 'M': shift = 20; s++; break;
    case 'g': case 'G': shift = 30; s++; break;
    case 't': case 'T': shift = 40; s++; break;
    default: break;
  }
  if (shift && (*s == 'i' || *s == 'I')) s++;
  if (shift && (*s == 'b' || *s == 'B')) s++;
  while (*s == ' ') s++;
  if (*s) return -1;
  if (shift && v > (UINT64_MAX >> shift)) return -1;
  *out = v << shift;
  return 0;
}

/* getenv that works before libc has set up environ (malloc may run that early) */
static char g_procenv[65536];
static size_t g_procenv_len;
static int g_procenv_state;

static const char *r3_getenv(const char *name) {
  size_t nl = r3_strlen(name);
  if (environ) {
    for (char **e = environ; *e; e++)
      if (!strncmp(*e, name, nl) && (*e)[nl] == '=') return *e + nl + 1;
    return NULL;
  }
  if (!g_procenv_state) {
    g_procenv_state = 1;
    int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t r;
      while (g_procenv_len < sizeof g_procenv - 1 &&
             (r = read(fd, g_procenv + g_procenv_len, sizeof g_procenv - 1 - g_procenv_len)) > 0)
        g_procenv_len += (size_t)r;
      close(fd);
    }
    g_procenv[g_procenv_len] = 0;
  }
  for (size_t i = 0; i < g_procenv_len;) {
    const char *e = g_procenv + i;
    size_t l = r3_strlen(e);
    if (!strncmp(e, name, nl) && e[nl] == '=') return e + nl + 1;
    i += l + 1;
  }
  return NULL;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* ------------------------------------------------------------------------- */
/* arena heap                                                                 */
/* ------------------------------------------------------------------------- */

typedef struct chunk {
  uint64_t size; /* whole chunk including this header; multiple of 16 */
  uint64_t tag;  /* TAG_MAGIC | state | flags */
} chunk_t;

#define HDR 16u
#define TAG_MAGIC 0x5233484541500000ull /* "R3HEAP" */
#define TAG_MAGIC_MASK 0xFFFFFFFFFFFFFF00ull
#define ST_MASK 0x0Fu
#define ST_LIVE 0x01u
#define ST_FREE 0x02u
#define F_ZERO 0x10u /* free chunk whose user bytes are all zero (fresh or madvised) */
#define F_RT 0x20u   /* live chunk allocated by the OpenMP runtime (image kind 3) */
#define F_NEW 0x40u  /* live chunk allocated during the capture in progress */

#define NCLASS 200
#define SMALL_MAX (256u * 1024u)      /* requests up to this use exact class sizes */
#define SPLIT_MIN (256u * 1024u)      /* split large free chunks leaving at least this */
#define MADV_MIN (128u * 1024u)       /* give pages back when freeing chunks this large ... */
#define MADV_KEEP_MAX (32u << 20)     /* ... or, once one was freed, only those larger than it */
#define LARGE_SCAN 64

/* Two pools share the arena: the application's, growing up from the arena's base, and the
 * runtimes' (the OpenMP runtime and the dynamic loader, see owner_of), growing up from the
 * last sixteenth. Runtime state therefore never shares a page with application data: a
 * page-tracked capture protects application pages only, and a futex in OpenMP's team state
 * never lies on a protected page (the kernel would answer EFAULT, not fault). */
struct pool {
  uintptr_t base, top, end, peak;
  chunk_t *free[NCLASS];
};
enum { POOL_APP, POOL_RT };
static struct pool g_pool[2];

static char g_lock;
static uintptr_t g_base, g_end; /* the whole arena mapping */
static uint64_t g_live, g_live_peak;
static uint64_t g_page = 4096;

static inline struct pool *pool_of_addr(uintptr_t u) {
  return u >= g_pool[POOL_RT].base ? &g_pool[POOL_RT] : &g_pool[POOL_APP];
}

/* allocator writes inside a page-tracked capture: see the tracker below */
static void heap_event(uintptr_t lo, uintptr_t hi);

static void heap_lock(void) {
  unsigned spins = 0;
  while (__atomic_test_and_set(&g_lock, __ATOMIC_ACQUIRE)) {
    while (__atomic_load_n(&g_lock, __ATOMIC_RELAXED)) {
      if (++spins >= 64) { sched_yield(); spins = 0; }
      else cpu_relax();
    }
  }
}
static void heap_unlock(void) { __atomic_clear(&g_lock, __ATOMIC_RELEASE); }

/* Chunks the OpenMP runtime allocates (team and barrier state) change whenever a parallel
 * region runs, whatever the kernel computes: images tag them kind 3 so replay restores them
 * but does not compare them. The owner is the allocation's caller: a PC in the text of a
 * loaded libomp / libgomp / libiomp5 (found at startup). */
#define MAXRT 8
static uintptr_t g_rt_lo[MAXRT], g_rt_hi[MAXRT];
static int g_nrt;

static int rt_text_cb(struct dl_phdr_info *info, size_t sz, void *data) {
  (void)sz; (void)data;
  const char *n = info->dlpi_name, *b = n;
  if (!n || !*n) return 0;
  for (const char *x = n; *x; x++) if (*x == '/') b = x + 1;
  /* the OpenMP runtimes, and the dynamic loader (it allocates each thread's TLS blocks and DTV) */
  if (strncmp(b, "libomp", 6) && strncmp(b, "libgomp", 7) && strncmp(b, "libiomp", 7) && strncmp(b, "ld-", 3))
    return 0;
  int nrt = __atomic_load_n(&g_nrt, __ATOMIC_RELAXED);
  for (int i = 0; i < info->dlpi_phnum && nrt < MAXRT; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    g_rt_lo[nrt] = info->dlpi_addr + ph->p_vaddr;
    g_rt_hi[nrt] = g_rt_lo[nrt] + ph->p_memsz;
    nrt++;
  }
  __atomic_store_n(&g_nrt, nrt, __ATOMIC_RELEASE);
  return 0;
}

static inline unsigned owner_of(const void *pc) {
  int n = __atomic_load_n(&g_nrt, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++)
    if ((uintptr_t)pc - g_rt_lo[i] < g_rt_hi[i] - g_rt_lo[i]) return F_RT;
  return 0;
}
#define CALLER_OWNER() owner_of(__builtin_return_address(0))

/* size classes: 32..1024 step 16 (classes 0..62), then 4 per power of two */
static uint64_t class_size(int c) {
  if (c < 62) return (uint64_t)(c + 2) * 16;
  int t = c - 62, k = 10 + t / 4, j = t % 4;
  return (1ull << k) + (uint64_t)j * (1ull << (k - 2));
}
static int floor_class(uint64_t s) { /* largest c with class_size(c) <= s; s >= 32 */
  if (s <= 1024) return (int)(s / 16) - 2;
  int k = 63 - __builtin_clzll(s);
  int j = (int)((s - (1ull << k)) >> (k - 2));
  int c = 62 + 4 * (k - 10) + j;
  return c < NCLASS ? c : NCLASS - 1;
}
static int ceil_class(uint64_t s) {
  int c = floor_class(s);
  return class_size(c) == s ? c : c + 1;
}

static inline chunk_t **link_of(chunk_t *c) { return (chunk_t **)(void *)(c + 1); }
static inline int is_state(const chunk_t *c, unsigned st) {
  return (c->tag & TAG_MAGIC_MASK) == TAG_MAGIC && (c->tag & ST_MASK) == st;
}

static void push_free(chunk_t *c) { /* lock held; c->tag already FREE */
  struct pool *pl = pool_of_addr((uintptr_t)c);
  int fc = floor_class(c->size);
  *link_of(c) = pl->free[fc];
  pl->free[fc] = c;
}

static void arena_fail(uint64_t base, int err) {
  char b[32], e[48];
  warn("cannot map arena at ", fmt_hex(b + sizeof b, base), ": ", err_text(err, e, sizeof e),
       "; set R3_ARENA_BASE", err == ENOMEM ? " (or a smaller R3_ARENA_SIZE)" : "", NULL);
  abort();
}

static void arena_init_locked(void) {
  uint64_t base = 0x100000000000ull, size = 64ull << 30;
  const char *s;
  long pg = sysconf(_SC_PAGESIZE);
  if (pg > 0) g_page = (uint64_t)pg;
  if ((s = r3_getenv("R3_ARENA_BASE")) && *s) {
    if (parse_num(s, &base, 1) || base == 0 || (base & (g_page - 1))) {
      warn("bad R3_ARENA_BASE=", s, " (want a page-aligned hex address)", NULL);
      abort();
    }
  }
  if ((s = r3_getenv("R3_ARENA_SIZE")) && *s) {
    if (parse_num(s, &size, 0) || size < (1u << 20)) {
      warn("bad R3_ARENA_SIZE=", s, " (want bytes, e.g. 68719476736 or 64G, at least 1M)", NULL);
      abort();
    }
  }
  size = (size + g_page - 1) & ~(g_page - 1);
  void *p = mmap((void *)(uintptr_t)base, size, PROT_READ | PROT_WRITE,
                 MAP_FIXED_NOREPLACE | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) arena_fail(base, errno);
  if ((uintptr_t)p != base) { /* kernel without MAP_FIXED_NOREPLACE treats it as a hint */
    munmap(p, size);
    arena_fail(base, EEXIST);
  }
  g_base = base;
  g_end = base + size;
  uintptr_t rt = (base + size - size / 16) & ~(uintptr_t)(g_page - 1);
  g_pool[POOL_APP].base = g_pool[POOL_APP].top = g_pool[POOL_APP].peak = base;
  g_pool[POOL_APP].end = rt;
  g_pool[POOL_RT].base = g_pool[POOL_RT].top = g_pool[POOL_RT].peak = rt;
  g_pool[POOL_RT].end = base + size;
}

/* n records of `stride` (1 or 2) words at a, sorted by their first word (shell sort: no
 * malloc, no qsort, safe inside the allocator's lock) */
static void sort_records(uintptr_t *a, size_t n, size_t stride) {
  for (size_t gap = n / 2; gap > 0; gap /= 2)
    for (size_t i = gap; i < n; i++) {
      uintptr_t r[2] = {a[i * stride], stride > 1 ? a[i * stride + 1] : 0};
      size_t j = i;
      for (; j >= gap && a[(j - gap) * stride] > r[0]; j -= gap)
        memcpy(a + j * stride, a + (j - gap) * stride, stride * sizeof *a);
      memcpy(a + j * stride, r, stride * sizeof *a);
    }
}

/* ---- blocks a captured call leaves allocated ----
 * A kernel may hand back memory it allocates (XSBench's grid_init_do_not_profile returns a
 * struct of pointers to arrays it mallocs). Replay's allocator puts those blocks elsewhere,
 * so pointers to them in what the caller sees cannot match the recording. The application
 * blocks allocated during a capture are listed (lock held); those still live when the call
 * returns go into meta.json ("left", as address ranges: blocks that follow one another
 * are one range), and ingest (capture.py) marks the capture unreplayable when the caller's
 * memory holds pointers into them. Each such block is also tagged F_NEW, so that a call
 * allocating more blocks than the list holds is found by walking the heap instead. */
#define MAX_NEW 4096
static uintptr_t g_new[MAX_NEW];
static size_t g_nnew;
static int g_new_overflow, g_mark_new;
static uintptr_t (*g_left)[2]; /* [lo, hi) ranges, mmap'ed and grown as needed */
static uint64_t g_left_cap, g_nleft, g_left_blocks, g_left_bytes;
static int g_left_short; /* the ranges could not all be kept (no memory): a partial list */

static unsigned new_tag(unsigned own) { return g_mark_new && !own ? F_NEW : 0; }

static void note_new(chunk_t *c) {
  if (g_nnew < MAX_NEW) g_new[g_nnew++] = (uintptr_t)c;
  else g_new_overflow = 1;
}

/* allocate a chunk with at least n user bytes; *was_zero tells whether they are all zero */
static void *heap_alloc(size_t n, int *was_zero, unsigned own) {
  if (n > (1ull << 46)) { errno = ENOMEM; return NULL; }
  uint64_t s = ((uint64_t)n + HDR + 15) & ~15ull;
  if (s < 32) s = 32;
  chunk_t *c = NULL;
  heap_lock();
  if (!g_base) arena_init_locked();
  struct pool *pl = &g_pool[own ? POOL_RT : POOL_APP];
  if (s <= SMALL_MAX) {
    int ci = ceil_class(s);
    s = class_size(ci);
    c = pl->free[ci];
    if (c) pl->free[ci] = *link_of(c);
  } else {
    s = (s + g_page - 1) & ~(g_page - 1);
    int ci = floor_class(s);
    chunk_t **pp = &pl->free[ci];
    for (int i = 0; *pp && i < LARGE_SCAN; i++, pp = link_of(*pp)) {
      if ((*pp)->size >= s) { c = *pp; *pp = *link_of(c); break; }
    }
    for (int j = ci + 1; !c && j < NCLASS; j++) {
      if (pl->free[j]) { c = pl->free[j]; pl->free[j] = *link_of(c); }
    }
  }
  if (c) {
    heap_event((uintptr_t)c, (uintptr_t)c + c->size); /* as found: a split rewrites its tail too */
    if (c->size - s >= SPLIT_MIN) { /* only large chunks: a small class fits exactly */
      chunk_t *r = (chunk_t *)((char *)c + s);
      r->size = c->size - s;
      r->tag = TAG_MAGIC | ST_FREE | (c->tag & F_ZERO);
      push_free(r);
      c->size = s;
    }
    *was_zero = (c->tag & F_ZERO) != 0;
    *link_of(c) = NULL; /* restores the zero word the free-list link used */
  } else {
    if (s > pl->end - pl->top) { heap_unlock(); errno = ENOMEM; return NULL; }
    c = (chunk_t *)pl->top;
    pl->top += s;
    if (pl->top > pl->peak) pl->peak = pl->top;
    heap_event((uintptr_t)c, (uintptr_t)c + s);
    c->size = s;
    *was_zero = 1;
  }
  c->tag = TAG_MAGIC | ST_LIVE | own | new_tag(own);
  if (g_mark_new && !own) note_new(c);
  g_live += c->size - HDR;
  if (g_live > g_live_peak) g_live_peak = g_live;
  heap_unlock();
  return c + 1;
}

/* the chunk of a live user pointer, or NULL (lock held) */
static chunk_t *live_chunk(void *p) {
  uintptr_t u = (uintptr_t)p;
  if (!g_base || u < g_base + HDR || u >= g_end || (u & 15)) return NULL;
  struct pool *pl = pool_of_addr(u);
  if (u < pl->base + HDR || u >= pl->top) return NULL;
  chunk_t *c = (chunk_t *)(u - HDR);
  return is_state(c, ST_LIVE) ? c : NULL;
}

static uint64_t g_madv_min = MADV_MIN; /* heap lock */

static void heap_free(void *p) {
  if (!p) return;
  heap_lock();
  chunk_t *c = live_chunk(p);
  if (!c) { heap_unlock(); return; } /* outside the arena, double free, or foreign: ignore */
  heap_event((uintptr_t)c, (uintptr_t)c + c->size);
  c->tag = TAG_MAGIC | ST_FREE;
  g_live -= c->size - HDR;
  if (c->size >= g_madv_min) {
    /* glibc's dynamic mmap threshold: a block of this size, once freed, is reused, not
     * faulted in again (LULESH frees and allocates its 1-2 MB temporaries every step: 325k
     * more page faults than under glibc, 0.3 s of a 2.2 s run) */
    if (c->size < MADV_KEEP_MAX) g_madv_min = c->size + 1;
    int saved = errno;
    /* not on a list and not live: nobody touches it while we zero it unlocked */
    heap_unlock();
    uintptr_t u0 = (uintptr_t)(c + 1), u1 = (uintptr_t)c + c->size;
    uintptr_t a = (u0 + g_page - 1) & ~(g_page - 1), b = u1 & ~(g_page - 1);
    if (b > a && madvise((void *)a, b - a, MADV_DONTNEED) == 0) {
      memset((void *)u0, 0, a - u0);
      memset((void *)b, 0, u1 - b);
    } else {
      memset((void *)u0, 0, u1 - u0);
    }
    errno = saved;
    heap_lock();
    c->tag |= F_ZERO;
  }
  push_free(c);
  heap_unlock();
}

/* *zero (if not NULL): the n bytes are all zero */
static void *heap_memalign_z(size_t align, size_t n, unsigned own, int *zero) {
  int z, *zp = zero ? zero : &z;
  if (align <= 16) return heap_alloc(n, zp, own);
  if (n > (1ull << 46) || align > (1ull << 40)) { errno = ENOMEM; return NULL; }
  char *p = (char *)heap_alloc(n + align + HDR, zp, own);
  if (!p || ((uintptr_t)p & (align - 1)) == 0) return p;
  /* split off a free padding chunk in front so the heap stays walkable */
  uintptr_t q = ((uintptr_t)p + HDR + align - 1) & ~(uintptr_t)(align - 1);
  heap_lock();
  chunk_t *c = (chunk_t *)(p - HDR), *d = (chunk_t *)(q - HDR);
  uint64_t pad = (uintptr_t)d - (uintptr_t)c;
  d->size = c->size - pad;
  d->tag = TAG_MAGIC | ST_LIVE | own | (c->tag & F_NEW);
  if (c->tag & F_NEW) note_new(d); /* the block handed out; c, noted, is now free padding */
  c->size = pad;
  c->tag = TAG_MAGIC | ST_FREE;
  g_live -= pad;
  if (pad >= 32) push_free(c); /* a 16-byte pad is a bare header, never reused */
  heap_unlock();
  return (void *)q;
}

static void *heap_memalign(size_t align, size_t n, unsigned own) { return heap_memalign_z(align, n, own, NULL); }

static size_t usable_size(void *p) {
  if (!p) return 0;
  heap_lock();
  chunk_t *c = live_chunk(p);
  size_t r = c ? (size_t)(c->size - HDR) : 0;
  heap_unlock();
  return r;
}

static int g_warned_foreign_realloc;

static void *heap_realloc(void *p, size_t n, unsigned own) {
  int z;
  if (!p) return heap_alloc(n, &z, own);
  if (n == 0) { heap_free(p); return NULL; }
  if (n > (1ull << 46)) { errno = ENOMEM; return NULL; }
  uint64_t s = ((uint64_t)n + HDR + 15) & ~15ull;
  heap_lock();
  chunk_t *c = live_chunk(p);
  if (!c) {
    heap_unlock();
    if (!__atomic_exchange_n(&g_warned_foreign_realloc, 1, __ATOMIC_RELAXED))
      warn("realloc of a pointer not allocated in the arena; returning NULL", NULL);
    errno = ENOMEM;
    return NULL;
  }
  uint64_t old = c->size;
  struct pool *pl = pool_of_addr((uintptr_t)c);
  if (s <= old) {
    if (old - s >= SPLIT_MIN) { /* large shrink: give the tail back */
      s = (s + 15) & ~15ull;
      chunk_t *r = (chunk_t *)((char *)c + s);
      r->size = old - s;
      heap_event((uintptr_t)c, (uintptr_t)c + old);
      r->tag = TAG_MAGIC | ST_FREE;
      push_free(r);
      c->size = s;
      g_live -= old - s;
    }
    heap_unlock();
    return p;
  }
  if ((uintptr_t)c + old == pl->top && s - old <= pl->end - pl->top) { /* last chunk: grow in place */
    pl->top = (uintptr_t)c + s;
    if (pl->top > pl->peak) pl->peak = pl->top;
    heap_event((uintptr_t)c, (uintptr_t)c + s);
    c->size = s;
    g_live += s - old;
    if (g_live > g_live_peak) g_live_peak = g_live;
    heap_unlock();
    return p;
  }
  heap_unlock();
  void *q = heap_alloc(n, &z, own);
  if (!q) return NULL;
  memcpy(q, p, old - HDR);
  heap_free(p);
  return q;
}

/* ---- the libc interface ---- */

void *malloc(size_t n) {
  int z;
  return heap_alloc(n, &z, CALLER_OWNER());
}

void free(void *p) { heap_free(p); }

void *calloc(size_t m, size_t n) {
  size_t t;
  int z;
  if (__builtin_mul_overflow(m, n, &t)) { errno = ENOMEM; return NULL; }
  void *p = heap_alloc(t, &z, CALLER_OWNER());
  if (p && !z) memset(p, 0, t);
  return p;
}

void *realloc(void *p, size_t n) { return heap_realloc(p, n, CALLER_OWNER()); }

void *reallocarray(void *p, size_t m, size_t n) {
  size_t t;
  if (__builtin_mul_overflow(m, n, &t)) { errno = ENOMEM; return NULL; }
  return heap_realloc(p, t, CALLER_OWNER());
}

static int pow2(size_t a) { return a && !(a & (a - 1)); }

int posix_memalign(void **out, size_t align, size_t n) {
  if (!pow2(align) || align % sizeof(void *)) return EINVAL;
  int saved = errno;
  void *p = heap_memalign(align, n, CALLER_OWNER());
  if (!p) { errno = saved; return ENOMEM; }
  *out = p;
  return 0;
}

void *aligned_alloc(size_t align, size_t n) {
  if (!pow2(align)) { errno = EINVAL; return NULL; }
  return heap_memalign(align, n, CALLER_OWNER());
}

void *memalign(size_t align, size_t n) {
  if (align > (1ull << 40)) { errno = EINVAL; return NULL; }
  size_t a = 1;
  while (a < align) a <<= 1; /* glibc rounds up to a power of two */
  return heap_memalign(a, n, CALLER_OWNER());
}

void *valloc(size_t n) {
  return heap_memalign((size_t)sysconf(_SC_PAGESIZE), n, CALLER_OWNER());
}

void *pvalloc(size_t n) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  if (n > SIZE_MAX - pg) { errno = ENOMEM; return NULL; }
  return heap_memalign(pg, (n + pg - 1) & ~(pg - 1), CALLER_OWNER());
}

size_t malloc_usable_size(void *p) { return usable_size(p); }

static void trk_lock_for_fork(int take);
static void maps_lock_for_fork(int take);
static void atfork_prepare(void) { heap_lock(); trk_lock_for_fork(1); maps_lock_for_fork(1); }
static void atfork_release(void) { maps_lock_for_fork(0); trk_lock_for_fork(0); heap_unlock(); }

/* ------------------------------------------------------------------------- */
/* buffered output to a file descriptor                                        */
/* ------------------------------------------------------------------------- */

typedef struct {
  int fd, err;
  size_t n, cap;
  char *buf;
  uint64_t total; /* bytes of image records emitted (emit_region) */
  int direct;     /* fd is O_DIRECT: only whole DIO_ALIGN blocks are written until wb_finish */
  uint64_t size;  /* bytes put: the file's size once finished */
} wbuf_t;

/* Memory images are written with O_DIRECT where the file system takes it: a buffered write
 * first allocates page-cache pages, which a VM here fills at ~0.4-0.6 GB/s, against ~3 GB/s
 * straight to the disk (dd, 200 MB), and a capture of tens of GB would push the
 * application's own data out of the page cache. */
#define DIO_ALIGN 4096
#define DIO_BUF (4u << 20)

static void wb_write(wbuf_t *w, const char *c, size_t n) {
  while (n && !w->err) {
    ssize_t r = write(w->fd, c, n);
    if (r < 0 && errno == EINVAL && w->direct) { /* refused after all: go on buffered */
      fcntl(w->fd, F_SETFL, fcntl(w->fd, F_GETFL) & ~O_DIRECT);
      w->direct = 0;
      continue;
    }
    if (r < 0) { if (errno == EINTR) continue; w->err = errno ? errno : EIO; break; }
    c += r; n -= (size_t)r;
  }
}

static void wb_flush(wbuf_t *w) { /* direct: the whole blocks; the rest stays buffered */
  size_t n = w->direct ? w->n & ~(size_t)(DIO_ALIGN - 1) : w->n;
  wb_write(w, w->buf, n);
  if (n < w->n) memmove(w->buf, w->buf + n, w->n - n);
  w->n -= n;
}

static void wb_put(wbuf_t *w, const void *p, size_t n) {
  const char *c = (const char *)p;
  w->size += n;
  if (n >= w->cap && !w->direct) { /* large: write straight from the source */
    wb_flush(w);
    wb_write(w, c, n);
    return;
  }
  while (n && !w->err) {
    size_t k = w->cap - w->n < n ? w->cap - w->n : n;
    memcpy(w->buf + w->n, c, k);
    w->n += k;
    c += k;
    n -= k;
    if (w->n == w->cap) wb_flush(w);
  }
}

/* write what is left (direct: the last block padded, then the file cut to its size) */
static int wb_finish(wbuf_t *w) {
  if (w->direct && w->n & (DIO_ALIGN - 1)) {
    size_t pad = DIO_ALIGN - (w->n & (DIO_ALIGN - 1));
    memset(w->buf + w->n, 0, pad);
    w->n += pad;
    wb_flush(w);
    if (!w->err && ftruncate(w->fd, (off_t)w->size)) w->err = errno;
  }
  wb_flush(w);
  return w->err;
}

static void wb_s(wbuf_t *w, const char *s) { wb_put(w, s, r3_strlen(s)); }
static void wb_u(wbuf_t *w, uint64_t v) { char b[32]; wb_s(w, fmt_u64(b + sizeof b, v)); }
static void wb_i(wbuf_t *w, int64_t v) {
  if (v < 0) { wb_s(w, "-"); wb_u(w, (uint64_t)0 - (uint64_t)v); }
  else wb_u(w, (uint64_t)v);
}
static void wb_hex(wbuf_t *w, uint64_t v) { /* JSON string "0x..." */
  char b[32];
  wb_s(w, "\"");
  wb_s(w, fmt_hex(b + sizeof b, v));
  wb_s(w, "\"");
}
static void wb_hexbytes(wbuf_t *w, const void *p, size_t n) { /* JSON string of hex digits */
  static const char hx[] = "0123456789abcdef";
  const unsigned char *b = (const unsigned char *)p;
  char t[256];
  size_t k = 0;
  wb_s(w, "\"");
  for (size_t i = 0; i < n; i++) {
    t[k++] = hx[b[i] >> 4];
    t[k++] = hx[b[i] & 15];
    if (k == sizeof t) { wb_put(w, t, k); k = 0; }
  }
  wb_put(w, t, k);
  wb_s(w, "\"");
}
static void wb_jstr(wbuf_t *w, const char *s) { /* JSON string or null */
  static const char hx[] = "0123456789abcdef";
  if (!s) { wb_s(w, "null"); return; }
  wb_s(w, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') { char e[2] = {'\\', (char)c}; wb_put(w, e, 2); }
    else if (c == '\n') wb_s(w, "\\n");
    else if (c == '\t') wb_s(w, "\\t");
    else if (c == '\r') wb_s(w, "\\r");
    else if (c < 0x20 || c == 0x7f) {
      char e[6] = {'\\', 'u', '0', '0', hx[c >> 4], hx[c & 15]};
      wb_put(w, e, 6);
    } else wb_put(w, &c, 1);
  }
  wb_s(w, "\"");
}

/* path builder */
typedef struct { char *p; size_t n, cap; int ovf; } path_t;
static void pa(path_t *b, const char *s) {
  size_t l = r3_strlen(s);
  if (b->n + l + 1 > b->cap) { b->ovf = 1; return; }
  memcpy(b->p + b->n, s, l + 1);
  b->n += l;
}
static void pa_u(path_t *b, uint64_t v) { char t[32]; pa(b, fmt_u64(t + sizeof t, v)); }

static int mkdir_p(char *path) { /* modifies path temporarily */
  for (char *s = path + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    int r = mkdir(path, 0755);
    *s = '/';
    if (r && errno != EEXIST) return -1;
  }
  if (mkdir(path, 0755) && errno != EEXIST) return -1;
  return 0;
}

/* ------------------------------------------------------------------------- */
/* configuration                                                               */
/* ------------------------------------------------------------------------- */

#define PATHMAX 4096
#define MAXK 4096 /* kernels with counters of their own (and R3_INSTANCE_BYTES counts) */

struct kcalls {
  uint64_t union_bytes;  /* pages touched by the captured calls together */
  uint64_t blocks_bytes; /* the blocks holding the last captured call's pages */
  unsigned char *seen;   /* a bit a page of the application pool (shared map) */
};
static struct kcalls *g_kcalls; /* MAXK entries, shared map (config_load); NULL without R3_INSTANCE_BYTES */

static void *map_shared(size_t len) {
  void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return m == MAP_FAILED ? NULL : m;
}

static struct {
  int state; /* 0 none, 1 in progress, 2 done */
  int have_dir;
  char dir[PATHMAX];
  int capture_none, capture_all;
  char capture[PATHMAX];
  uint64_t instances;
  uint64_t instance_bytes; /* R3_INSTANCE_BYTES: no more calls once their pages reach this (enough_calls) */
  uint64_t max_bytes;
  uint64_t budget; /* all captures of this process together, bytes (pre + post) */
  uint64_t t_start;
  int pages;           /* capture the pages a kernel touches (1), or the whole live heap (0) */
  uint64_t fork_timeout_s; /* a snapshot process (capture inside a parallel region) may take this long */
  int sampling;        /* time only a sample of the calls of short, frequent kernels */
  int direct;          /* write memory images with O_DIRECT where the file system takes it */
  uint64_t clock_ns;   /* what reading the clock adds to a timed call (see clock_cost) */
} cfg;

static void config_load(void) {
  const char *s;
  cfg.t_start = now_ns();
  if ((s = getenv("R3_RECORD_DIR")) && *s) {
    size_t l = r3_strlen(s), off = 0;
    if (s[0] != '/' && getcwd(cfg.dir, PATHMAX - 1024)) { /* the app may chdir later */
      off = r3_strlen(cfg.dir);
      cfg.dir[off++] = '/';
    }
    if (off + l < PATHMAX - 512) {
      memcpy(cfg.dir + off, s, l + 1);
      l += off;
      while (l > 1 && cfg.dir[l - 1] == '/') cfg.dir[--l] = 0;
      cfg.have_dir = 1;
    } else {
      warn("R3_RECORD_DIR is too long; recording nothing", NULL);
    }
  }
  s = getenv("R3_CAPTURE");
  if (!s || !*s || !strcmp(s, "*")) cfg.capture_all = 1;
  else if (!strcmp(s, "none")) cfg.capture_none = 1;
  else {
    size_t l = r3_strlen(s);
    if (l >= sizeof cfg.capture) l = sizeof cfg.capture - 1;
    memcpy(cfg.capture, s, l);
    cfg.capture[l] = 0;
  }
  cfg.instances = 1;
  if ((s = getenv("R3_INSTANCES")) && *s && parse_num(s, &cfg.instances, 0)) {
    warn("bad R3_INSTANCES=", s, "; using 1", NULL);
    cfg.instances = 1;
  }
  cfg.instance_bytes = 0;
  if ((s = getenv("R3_INSTANCE_BYTES")) && *s && parse_num(s, &cfg.instance_bytes, 0)) {
    warn("bad R3_INSTANCE_BYTES=", s, "; capturing R3_INSTANCES calls", NULL);
    cfg.instance_bytes = 0;
  }
  if (cfg.instance_bytes && !(g_kcalls = map_shared(MAXK * sizeof *g_kcalls))) cfg.instance_bytes = 0;
  cfg.max_bytes = 4ull << 30;
  if ((s = getenv("R3_MAX_CAPTURE_BYTES")) && *s && parse_num(s, &cfg.max_bytes, 0)) {
    warn("bad R3_MAX_CAPTURE_BYTES=", s, "; using 4G", NULL);
    cfg.max_bytes = 4ull << 30;
  }
  cfg.budget = 32ull << 30;
  if ((s = getenv("R3_CAPTURE_BUDGET")) && *s && parse_num(s, &cfg.budget, 0)) {
    warn("bad R3_CAPTURE_BUDGET=", s, "; using 32G", NULL);
    cfg.budget = 32ull << 30;
  }
  s = getenv("R3_CAPTURE_PAGES");
  cfg.pages = !(s && !strcmp(s, "0"));
  s = getenv("R3_PROBE_SAMPLING");
  cfg.sampling = !(s && !strcmp(s, "0"));
  s = getenv("R3_DIRECT_IO");
  cfg.direct = !(s && !strcmp(s, "0"));
  cfg.fork_timeout_s = 30;
  if ((s = getenv("R3_CAPTURE_TIMEOUT")) && *s && (parse_num(s, &cfg.fork_timeout_s, 0) || !cfg.fork_timeout_s)) {
    warn("bad R3_CAPTURE_TIMEOUT=", s, "; using 30 (seconds)", NULL);
    cfg.fork_timeout_s = 30;
  }
}

/* A timed call's span holds one reading of the clock (the end of the first, the start of
 * the second). Sampling multiplies each timed call by its period: XSBench's grid search
 * (0.2 us a call) came out at 1.3x the time of the whole run. The least time between two
 * readings is taken off each timed call: never more than what the clock itself costs. */
static uint64_t clock_cost(void) {
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < 200; i++) {
    uint64_t a = now_ns(), b = now_ns();
    if (b - a < best) best = b - a;
  }
  return best == UINT64_MAX ? 0 : best;
}

static void config_once(void) {
  int st = __atomic_load_n(&cfg.state, __ATOMIC_ACQUIRE);
  if (st == 2) return;
  int zero = 0;
  if (__atomic_compare_exchange_n(&cfg.state, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    config_load();
    cfg.clock_ns = clock_cost();
    __atomic_store_n(&cfg.state, 2, __ATOMIC_RELEASE);
    return;
  }
  while (__atomic_load_n(&cfg.state, __ATOMIC_ACQUIRE) != 2) cpu_relax();
}

static int selected(const char *name) {
  if (cfg.capture_none || !cfg.have_dir || !name) return 0;
  if (cfg.capture_all) return 1;
  size_t nl = r3_strlen(name);
  const char *s = cfg.capture;
  while (*s) {
    while (*s == ',' || *s == ' ') s++;
    const char *e = s;
    while (*e && *e != ',') e++;
    const char *t = e;
    while (t > s && t[-1] == ' ') t--;
    if ((size_t)(t - s) == nl && !strncmp(s, name, nl)) return 1;
    if ((size_t)(t - s) == 1 && *s == '*') return 1;
    s = e;
  }
  return 0;
}

/* ------------------------------------------------------------------------- */
/* probes                                                                      */
/* ------------------------------------------------------------------------- */
/* A probe writes no shared cache line: calls and times go to counters of the calling thread
 * (one block per thread, found again at exit through a global list). A kernel called often
 * and briefly is timed on a sample of its calls: after SAMPLE_AFTER calls on a thread, one
 * whose calls took under SAMPLE_SHORT_NS on average is timed once every SAMPLE_PERIOD calls,
 * and that call's time counts SAMPLE_PERIOD times (R3_PROBE_SAMPLING=0 times every call). */

#define MAXDEPTH 256
#define SAMPLE_AFTER 1024
#define SAMPLE_SHORT_NS 5000
#define SAMPLE_PERIOD 32

/* top_calls: calls with no recorded kernel below them on the thread's stack (replay.cachestate
   counts what those touch as what runs between another kernel's calls) */
/* skip_mask: see __r3_enter_tc; probed: calls that took the probes; block: the tblock
 * holding it (set for kernels with a fast path); samples: profiler ticks (main thread) that
 * found this kernel running its own code; outer_samples: ticks that found it the outermost
 * kernel on the stack (its inclusive time where no other kernel called it: what a tuned
 * build that runs its callees as its own copies changes); top_ns: the inclusive time of its
 * top calls, as timed (the same where there are too few ticks) */
struct tcount { uint64_t calls, total_ns, self_ns, period, top_calls, skip_mask, probed; struct tblock *block;
                uint64_t samples, outer_samples, top_ns; };
/* leaf: the counters of the kernel a fast path is running on this thread (its calls push no
 * frame), else NULL; written by instrumented code, read by the profiler's signal handler */
struct tblock { struct tcount *volatile leaf; struct tblock *next; int64_t main_thread; struct tcount c[MAXK]; };

struct frame {
  struct r3_kinfo *k;
  uint64_t start;   /* ns */
  uint64_t paused0; /* t_paused at start */
  uint64_t child;   /* inclusive ns of nested kernels (as counted, i.e. scaled) */
  uint64_t scale;   /* 0: this call is not timed; else its time counts this many times */
};

static TLS struct frame t_stack[MAXDEPTH];
static TLS int t_depth;
static TLS uint64_t t_paused;    /* ns this thread spent taking snapshots */
static uint64_t g_paused;        /* ns the main thread spent taking snapshots: not the application's time */

static TLS int t_main = -1; /* this thread is the process's main thread: 1, 0, -1 not known yet */
/* Time a thread spent on a snapshot or a page copy. Summed over threads it exceeds the
 * wall-clock time it cost the run: the page faults of a capture in progress are taken by
 * every thread of the kernel's team at once, each waiting on the others' copies (a 6 ms
 * heat run came out at 0.5 ms of application time), and a worker's captures overlap the
 * main thread's own work (XSBench's event loop with --instances auto: 6.5 s "paused" of a
 * 7.2 s run, whose main thread ran 6.9 s of ticks outside snapshots; every share read
 * 100%). The main thread, which takes part in every parallel region and waits at its end
 * for the workers' pauses, stands for the run's clock. */
static void pause_add(uint64_t ns) {
  t_paused += ns;
  if (t_main < 0) t_main = (pid_t)syscall(SYS_gettid) == getpid();
  if (t_main) __atomic_fetch_add(&g_paused, ns, __ATOMIC_RELAXED);
}
static TLS int t_cap_depth = -1; /* frame index of the capture in progress, -1 none */
static TLS int t_pausing;        /* taking a snapshot or a page copy: profiler ticks are not the app's */
static TLS struct tblock *t_block;
static TLS int t_block_failed;

static struct r3_kinfo *g_kernels;
static struct tblock *g_blocks;
static int64_t g_nkernels;

/* registered: 0 not yet, 1 being registered, 2 done (id and sel valid) */
static void register_kernel(struct r3_kinfo *k) {
  int64_t zero = 0;
  if (!__atomic_compare_exchange_n(&k->registered, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    while (__atomic_load_n(&k->registered, __ATOMIC_ACQUIRE) != 2) cpu_relax();
    return;
  }
  int64_t id = __atomic_fetch_add(&g_nkernels, 1, __ATOMIC_RELAXED);
  k->id = id < MAXK ? id : -1; /* beyond MAXK: shared atomic counters */
  k->sel = 0;
  struct r3_kinfo *head = __atomic_load_n(&g_kernels, __ATOMIC_ACQUIRE);
  do { k->next = head; } while (!__atomic_compare_exchange_n(&g_kernels, &head, k, 1, __ATOMIC_RELEASE,
                                                               __ATOMIC_ACQUIRE));
  __atomic_store_n(&k->registered, 2, __ATOMIC_RELEASE);
}

static struct tcount *tcount_of(const struct r3_kinfo *k) {
  if (k->id < 0) return NULL;
  struct tblock *b = t_block;
  if (!b) {
    if (t_block_failed) return NULL;
    void *m = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) { t_block_failed = 1; return NULL; }
    b = (struct tblock *)m;
    b->main_thread = (pid_t)syscall(SYS_gettid) == getpid();
    struct tblock *head = __atomic_load_n(&g_blocks, __ATOMIC_ACQUIRE);
    do { b->next = head; } while (!__atomic_compare_exchange_n(&g_blocks, &head, b, 1, __ATOMIC_RELEASE,
                                                                 __ATOMIC_ACQUIRE));
    t_block = b;
  }
  return &b->c[k->id];
}

/* ---- the main thread's calling-context tree of recorded kernels ----
 * A tuned kernel runs its callees as its own copies, and replay times it with them: its
 * weight in the run is its time with none of the other tuned kernels below it on the
 * stack, callees included. Which kernels are tuned is decided after the run, so the main
 * thread keeps the tree of the recorded kernels' calling contexts, each node with the
 * inclusive time of its timed calls (scaled as the counters are) and the profiler's
 * samples taken there; capture.tuned_shares sums the nodes for any set of kernels. */
#define CCT_MAX 16384
struct cct_node { int32_t parent, kid, first_child, next_sibling; uint64_t ns, samples; };
static struct cct_node *g_cct;  /* node 0: the root (outside every kernel) */
static int32_t g_cct_n;
static int g_cct_full;          /* a context did not fit: the tree is incomplete */
static volatile int g_cct_busy; /* a node being added: the profiler's handler leaves the tree alone */
static int32_t m_node[MAXDEPTH]; /* the main thread's frames: each one's node (or its caller's, where
                                  * the frame's kernel has no counters) */

static int32_t cct_child(int32_t parent, int32_t kid) {
  for (int32_t c = g_cct[parent].first_child; c > 0; c = g_cct[c].next_sibling)
    if (g_cct[c].kid == kid) return c;
  return -1;
}

/* the node of kernel ``kid`` called in context ``parent`` (added if new); -1 when full */
static int32_t cct_enter(int32_t parent, int32_t kid) {
  if (!g_cct) {
    if (g_cct_full) return -1;
    void *m = mmap(NULL, CCT_MAX * sizeof *g_cct, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) { g_cct_full = 1; return -1; }
    g_cct = (struct cct_node *)m;
    g_cct[0].kid = -1;
    g_cct_n = 1;
  }
  int32_t c = cct_child(parent, kid);
  if (c > 0) return c;
  if (g_cct_n >= CCT_MAX) { g_cct_full = 1; return -1; }
  g_cct_busy = 1;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  c = g_cct_n;
  g_cct[c].parent = parent;
  g_cct[c].kid = kid;
  g_cct[c].next_sibling = g_cct[parent].first_child;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  g_cct[parent].first_child = c;
  g_cct_n = c + 1;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  g_cct_busy = 0;
  return c;
}

/* how many calls of this kernel on this thread one timed call stands for (a power of two) */
/* Decided at SAMPLE_AFTER calls and, while not sampled, again at each power of two: the
 * first calls may be slow for a while only (a capture around them takes a page fault on
 * each page they first touch), and a kernel timed on every one of its 15 million calls
 * (XSBench's grid search under a capture of its driver) spent 10% of the run in the clock. */
static inline uint64_t probe_period(struct tcount *tc, uint64_t n) {
  if (tc->period > 1) return tc->period;
  if (!cfg.sampling || n < SAMPLE_AFTER || (n & (n - 1))) return 1;
  return tc->period = (tc->total_ns < (uint64_t)SAMPLE_SHORT_NS * n) ? SAMPLE_PERIOD : 1;
}

/* ---- captures: one at a time, process-wide ----
 * On the main thread outside parallel regions a capture is taken in this process. A call on
 * another thread, or inside a parallel region, is captured in a snapshot process: the
 * calling thread forks, the child (a consistent copy of memory at the call, with this thread
 * only) records the call, runs the kernel and exits; the parent waits, then makes its own
 * call. The application's run never sees a protected page or a half-taken snapshot. */

static char g_wbuf[1 << 16];
/* One capture in this process and one snapshot process at a time; a snapshot may be taken
 * while this process captures (a kernel called in a parallel loop of the captured driver). */
static int g_capturing; /* an in-process capture is being taken */
static int g_forking;   /* a snapshot process is running */
static int g_child;     /* this process is a snapshot process */
static TLS int t_snapshot_fork; /* this thread is forking a snapshot process */
/* A process the application forked that goes on running the program records nothing: its
 * calls are the parent's over again (a child calling the kernel as often as its parent
 * doubled the counts: 40 calls for 20, shares adding up to 122%). The process that started
 * stands for the run. */
static int g_forked;
static struct {
  struct r3_kinfo *k;
  int64_t instance;
  char tmp[PATHMAX], fin[PATHMAX];
  uint64_t *slots;      /* copy of the argument slots */
  unsigned char *byval; /* byval contents at enter, concatenated */
  size_t scratch_len;
  void *scratch;
  int nstk;             /* kind-4 regions: the calling thread's stack, the main thread's */
  struct { uintptr_t lo, hi, tls_lo; } stk[2]; /* above tls_lo (a worker's TLS and thread block): kind 3 */
  int nimg;             /* kind-6/2 regions: loaded objects' data the arguments point into */
  struct { uintptr_t lo, hi; int writable; } img[8];
  int nforeign;         /* arguments into mappings no image holds (foreign_args) */
  struct { int64_t arg; uintptr_t lo, hi; char perms[5]; char name[128]; } foreign[4];
  int pages;            /* page-tracked (1) or whole-heap (0) */
  int pre_fd;           /* page-tracked: pre.bin stays open until the touched pages are known */
  wbuf_t pre_w;         /* ... and its writer, holding what is not yet written */
  uint64_t live_bytes;  /* live application heap at the call */
  uint64_t blocks;      /* page-tracked: bytes of the live blocks holding a touched page */
  uint64_t runs;        /* page-tracked: runs of touched pages */
  uint64_t written;     /* bytes of pre.bin + post.bin */
  int worker;           /* called on a thread other than the main one, or in a parallel region */
  int64_t threads;      /* OpenMP threads a parallel region in the kernel would get */
} cap = {.pre_fd = -1};

#define NWARN 64
static struct r3_kinfo *g_skip_warned[NWARN];

static void sanitize_name(path_t *b, const char *name) {
  size_t l = r3_strlen(name);
  char t[256];
  size_t keep = l > 200 ? 180 : l;
  for (size_t i = 0; i < keep; i++) {
    char c = name[i];
    t[i] = (c == '/' || (unsigned char)c < 0x20 || c == 0x7f) ? '_' : c;
  }
  t[keep] = 0;
  if (keep == 1 && t[0] == '.') t[0] = '_';
  pa(b, t);
  if (keep < l) { /* long (mangled) name: prefix + hash */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < l; i++) h = (h ^ (unsigned char)name[i]) * 1099511628211ull;
    char hb[32];
    pa(b, "~");
    pa(b, fmt_hex(hb + sizeof hb, h) + 2);
  }
}

/* a record's header alone: kinds 5 and 7 (size bytes that the file does not hold) */
static void emit_header(wbuf_t *w, uint64_t addr, uint64_t size, uint64_t kind) {
  uint64_t h[3] = {addr, size, kind}; /* x86-64 / aarch64: little-endian */
  wb_put(w, h, sizeof h);
  w->total += sizeof h;
}

static void emit_region(wbuf_t *w, uint64_t addr, uint64_t size, uint64_t kind, const void *data) {
  static const char zeros[8];
  emit_header(w, addr, size, kind);
  if (size) wb_put(w, data, size);
  if (size & 7) wb_put(w, zeros, 8 - (size & 7));
  w->total += size + ((size & 7) ? 8 - (size & 7) : 0);
}

/* ---- stdio's buffers ----
 * A kernel that prints appends to stdout's buffer, a heap block libc allocated; at replay
 * the same printf writes to the replay process's own stdout. The buffers and the FILE
 * objects of every open stream (glibc's _IO_list_all) are restored but never compared:
 * post.bin leaves them out. */
#define MAXIO 64
static uintptr_t g_io[MAXIO][2];
static int g_nio;
extern FILE *_IO_list_all __attribute__((weak));

static void io_add(uintptr_t lo, uintptr_t hi) {
  if (hi > lo && lo >= g_base && hi <= g_end && g_nio < MAXIO) {
    g_io[g_nio][0] = lo;
    g_io[g_nio][1] = hi;
    g_nio++;
  }
}

static void collect_stdio(void) {
  g_nio = 0;
#ifdef __GLIBC__
  if (!&_IO_list_all) return;
  int n = 0;
  for (FILE *f = _IO_list_all; f && n < MAXIO; f = f->_chain, n++) {
    io_add((uintptr_t)f->_IO_buf_base, (uintptr_t)f->_IO_buf_end);
    chunk_t *c = (chunk_t *)(void *)f - 1; /* a FILE fopen allocated: its whole block */
    if ((uintptr_t)f >= g_base + HDR && (uintptr_t)f < g_end && is_state(c, ST_LIVE))
      io_add((uintptr_t)f, (uintptr_t)c + c->size);
  }
#endif
}

/* [a, b) less the stdio ranges, as regions of one kind (whole-heap post images) */
static void emit_minus_io(wbuf_t *w, uintptr_t a, uintptr_t b, uint64_t kind) {
  uintptr_t x = a;
  for (int again = 1; again && x < b;) {
    again = 0;
    for (int i = 0; i < g_nio; i++) {
      uintptr_t lo = g_io[i][0], hi = g_io[i][1];
      if (hi <= x || lo >= b) continue;
      if (lo <= x) { x = hi; again = 1; break; } /* starts inside: skip it */
    }
  }
  if (x >= b) return;
  uintptr_t next = b; /* the nearest stdio range after x */
  for (int i = 0; i < g_nio; i++)
    if (g_io[i][0] > x && g_io[i][0] < next) next = g_io[i][0];
  emit_region(w, x, next - x, kind, (const void *)x);
  if (next < b) emit_minus_io(w, next, b, kind);
}

/* a chunk header at h in pl that cannot be one: the heap is corrupt */
static int chunk_bad(const struct pool *pl, uintptr_t h, uint64_t sz) {
  return sz < HDR || (sz & 15) || sz > pl->top - h;
}

/* every live chunk of one pool: kind 1 (application) or 3 (runtimes); -1 on a corrupt heap */

static int emit_pool(wbuf_t *w, int which, int post) {
  struct pool *pl = &g_pool[which];
  heap_lock();
  for (uintptr_t h = pl->base; h < pl->top && !w->err;) {
    chunk_t *c = (chunk_t *)h;
    uint64_t sz = c->size;
    if (chunk_bad(pl, h, sz)) {
      heap_unlock();
      warn("arena heap is corrupt (bad chunk header); capture abandoned", NULL);
      return -1;
    }
    uint64_t kind = (which == POOL_RT || (c->tag & F_RT)) ? R3_KIND_RUNTIME : R3_KIND_HEAP;
    if (is_state(c, ST_LIVE) && !(post && kind == R3_KIND_RUNTIME)) { /* never compared */
      if (post && kind == R3_KIND_HEAP && g_nio) emit_minus_io(w, h + HDR, h + sz, kind);
      else emit_region(w, h + HDR, sz - HDR, kind, c + 1);
    }
    h += sz;
  }
  heap_unlock();
  return 0;
}

/* what every image holds besides application heap: the runtimes' chunks, the kernel's
 * globals, the capture's stack region, the loaded objects' data the arguments point into.
 * pre.bin only: read-only data (nothing can change it) and the runtimes' state (their
 * chunks, for a kernel flagged R3_KFLAG_RUNTIME_STATE; a worker's TLS an argument points
 * into), which replay restores but never compares. */
static void emit_fixed(wbuf_t *w, struct r3_kinfo *k, int post) {
  if (!post && (k->flags & R3_KFLAG_RUNTIME_STATE) && emit_pool(w, POOL_RT, 0)) { w->err = EIO; return; }
  for (int64_t i = 0; i < k->nglobals && k->globals && !w->err; i++) {
    const struct r3_global *g = &k->globals[i];
    if (!g->addr || g->size <= 0) continue;
    emit_region(w, (uint64_t)(uintptr_t)g->addr, (uint64_t)g->size, R3_KIND_GLOBAL, g->addr);
  }
  for (int i = 0; i < cap.nstk && !w->err; i++) {
    uintptr_t lo = cap.stk[i].lo, hi = cap.stk[i].hi, t = cap.stk[i].tls_lo;
    uintptr_t mid = t > lo && t < hi ? t : hi;
    emit_region(w, lo, mid - lo, R3_KIND_STACK, (const void *)lo);
    if (mid < hi && !post && !w->err) emit_region(w, mid, hi - mid, R3_KIND_RUNTIME, (const void *)mid);
  }
  for (int i = 0; i < cap.nimg && !w->err; i++)
    if (cap.img[i].writable || !post)
      emit_region(w, cap.img[i].lo, cap.img[i].hi - cap.img[i].lo,
                  cap.img[i].writable ? R3_KIND_GLOBAL : R3_KIND_CONST, (const void *)cap.img[i].lo);
}

static char *g_dbuf; /* DIO_BUF bytes, page-aligned: the image writers' buffer */

/* open an image file for writing into w: O_DIRECT with g_dbuf when possible */
static int open_image(const char *path, wbuf_t *w, char *small, size_t small_len) {
  memset(w, 0, sizeof *w);
  if (!g_dbuf) {
    void *m = mmap(NULL, DIO_BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) g_dbuf = m;
  }
  int fd = g_dbuf && cfg.direct ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644) : -1;
  if (fd >= 0) {
    w->fd = fd; w->buf = g_dbuf; w->cap = DIO_BUF; w->direct = 1;
    return fd;
  }
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  w->fd = fd; w->buf = small; w->cap = small_len;
  return fd;
}

/* a whole-heap memory image: every live arena chunk, globals, stack */
static int write_image(const char *path, struct r3_kinfo *k, int post) {
  wbuf_t w;
  int fd = open_image(path, &w, g_wbuf, sizeof g_wbuf);
  if (fd < 0) return errno;
  wb_put(&w, "R3MEM1\0\0", 8);
  w.total = 8;
  if (emit_pool(&w, POOL_APP, post)) w.err = EIO;
  if (!w.err) emit_fixed(&w, k, post);
  int err = wb_finish(&w);
  if (close(fd) && !err) err = errno;
  cap.written += w.total;
  return err;
}

/* ---- touched pages ----
 * A page-tracked capture protects the application pool's pages (PROT_NONE) when the kernel
 * is called; the first access to a page faults, the handler copies the page as it was (its
 * pre-state) and opens it. At exit, pre.bin gets those copies and post.bin the same pages
 * as they are, less the byte ranges the allocator rewrote during the call (chunks the kernel
 * allocated or freed: replay allocates elsewhere and ignores frees of recorded memory).
 * A page with nothing behind it yet (fresh calloc'ed memory: never written) is not copied:
 * reading it would map the kernel's shared zero page, and the kernel's first write would
 * then copy it and shoot down every thread's TLB (xs-proxy: an 80 MB results array cost
 * 20k such IPIs, 10% of the run). Such pages are marked TRK_ZERO and recorded as zeros. */

/* ---- the application's mappings the system serves ----
 * (see "the application's mappings" at the end): shared memory, fixed addresses and the
 * like, which no image holds. A page-tracked capture closes them too, so that a kernel that
 * reaches one (through a pointer in its data, where foreign_args does not look) is found at
 * its first access: the mapping is opened again and named in meta.json, and ingest marks the
 * capture unreplayable. In a snapshot process a shared mapping is first replaced by a
 * private copy: the kernel's writes there must not reach the memory the application shares
 * (its parent then makes the same call). */
/* a line of /proc/self/maps: [lo, hi), "rw-p", and what is mapped ("" anonymous, a file's
 * path, "[stack]") */
struct mapent { uintptr_t lo, hi; char perms[5]; char name[256]; };
static int mapping_of(uintptr_t a, struct mapent *out);

#define MAXSYS 64
static struct sysmap { uintptr_t lo, hi; int prot, shared, closed; } g_sys[MAXSYS];
static int g_nsys;
/* the lock of g_sys and of the arena's mappings (g_maps): taken after the heap lock and
 * trk.lock where they are held too, never the other way round */
static char g_maps_lock;
static void maps_lock(void) { while (__atomic_test_and_set(&g_maps_lock, __ATOMIC_ACQUIRE)) cpu_relax(); }
static void maps_unlock(void) { __atomic_clear(&g_maps_lock, __ATOMIC_RELEASE); }
static void maps_lock_for_fork(int take) { if (take) maps_lock(); else maps_unlock(); }

static void sys_add(uintptr_t lo, uintptr_t hi, int prot, int flags) {
  if (!prot || (prot & PROT_EXEC) || (flags & (MAP_STACK | MAP_GROWSDOWN))) return; /* never a kernel's data */
  maps_lock();
  if (g_nsys < MAXSYS) g_sys[g_nsys++] = (struct sysmap){lo, hi, prot, (flags & MAP_TYPE) != MAP_PRIVATE, 0};
  maps_unlock();
}

static void sys_remove(uintptr_t a, uintptr_t b) { /* [a, b) unmapped: what is left of each */
  maps_lock();
  for (int i = 0; i < g_nsys;) {
    struct sysmap *m = &g_sys[i];
    if (b <= m->lo || a >= m->hi) { i++; continue; }
    if (a <= m->lo && b >= m->hi) { *m = g_sys[--g_nsys]; continue; }
    if (a <= m->lo) m->lo = b;
    else if (b >= m->hi) m->hi = a;
    i++; /* a hole in the middle: the whole stays listed (closing a hole fails harmlessly) */
  }
  maps_unlock();
}

#define MAX_EVENTS (1 << 16)
static struct {
  int active, failed;
  char lock;
  uintptr_t lo, hi;
  unsigned char *bits; /* one byte a page: 0, TRK_COPIED or TRK_ZERO */
  char *mirror;        /* pre-state copies, at the page's offset from lo */
  size_t bits_len, mirror_len;
  uint64_t touched;    /* pages */
  uint64_t faults;     /* faults that opened pages */
  uintptr_t (*ev)[2];
  size_t nev, ev_len;
  int ev_overflow;
  int pagemap;         /* /proc/self/pagemap, or -1: is a page there yet */
  int nreached;        /* system mappings (g_sys) the kernel reached, as they were */
  struct mapent reached[4];
  pid_t pagemap_pid;   /* the process that opened it */
  struct sigaction old;
} trk = {.pagemap = -1};

#define TRK_COPIED 1 /* pre-state in the mirror */
#define TRK_ZERO 2   /* no page behind it before the call: zeros, not copied */

static void trk_lock_for_fork(int take) {
  if (take) while (__atomic_test_and_set(&trk.lock, __ATOMIC_ACQUIRE)) cpu_relax();
  else __atomic_clear(&trk.lock, __ATOMIC_RELEASE);
}

static void heap_event(uintptr_t lo, uintptr_t hi) { /* heap lock held */
  if (!__atomic_load_n(&trk.active, __ATOMIC_RELAXED) || hi <= trk.lo || lo >= trk.hi) return;
  if (trk.nev >= MAX_EVENTS) { trk.ev_overflow = 1; return; }
  trk.ev[trk.nev][0] = lo;
  trk.ev[trk.nev][1] = hi;
  trk.nev++;
}

/* Pages to open at a fault on page i (lock held): 1, or, when i extends a run of pages
 * already open (a stream), a quarter of that run, at most TRK_AHEAD_MAX pages, as far as
 * the pages after i are still closed. Each fault costs a signal and two mprotects (tens of
 * microseconds with a team of threads, whose TLBs are shot down): a kernel streaming 100 MB
 * paid half a second a page at a time. Opening ahead copies at most a quarter more than a
 * stream touched (plus TRK_AHEAD_MAX at its end); scattered touches still cost one page. */
#define TRK_AHEAD_MIN_RUN 8
#define TRK_AHEAD_MAX 256
static size_t trk_window(size_t i) {
  size_t npages = (trk.hi - trk.lo) / g_page, run = 0;
  while (run < 4 * TRK_AHEAD_MAX && run < i && trk.bits[i - 1 - run]) run++;
  size_t want = run >= TRK_AHEAD_MIN_RUN ? run / 4 : 1, n = 1;
  if (want > TRK_AHEAD_MAX) want = TRK_AHEAD_MAX;
  while (n < want && i + n < npages && !trk.bits[i + n]) n++;
  return n;
}

/* TRK_COPIED for each of the n pages at p that has a page behind it (present or swapped
 * out, by /proc/self/pagemap's bits 63 and 62), TRK_ZERO for one never written; without
 * the pagemap every page is copied */
static void trk_states(uintptr_t p, size_t n, unsigned char *state) {
  uint64_t entry[TRK_AHEAD_MAX];
  memset(state, TRK_COPIED, n);
  if (trk.pagemap < 0) return;
  off_t at = (off_t)(p / g_page) * 8;
  if (pread(trk.pagemap, entry, n * 8, at) != (ssize_t)(n * 8)) return;
  for (size_t j = 0; j < n; j++)
    if (!(entry[j] >> 62)) state[j] = TRK_ZERO;
}

/* close (1) or open again (0) the application's system mappings (lock held) */
static void sys_close_all(int close_them) {
  for (int i = 0; i < g_nsys; i++) {
    struct sysmap *m = &g_sys[i];
    if (close_them == m->closed) continue;
    if (close_them && (uintptr_t)__builtin_frame_address(0) - m->lo < m->hi - m->lo) continue; /* our stack */
    if (!mprotect((void *)m->lo, m->hi - m->lo, close_them ? PROT_NONE : m->prot) || !close_them)
      m->closed = close_them;
  }
}

/* in a snapshot process: shared mapping m becomes a private copy (its protection then
 * PROT_READ | PROT_WRITE), or the snapshot process ends, its capture dropped */
static void sys_privatize(struct sysmap *m) {
  size_t len = m->hi - m->lo;
  void *copy = sys_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (copy == MAP_FAILED || mprotect((void *)m->lo, len, PROT_READ) ||
      (memcpy(copy, (void *)m->lo, len),
       sys_mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)m->lo) == MAP_FAILED)) {
    warn("cannot copy the shared memory a kernel may write in a snapshot process; capture dropped", NULL);
    _exit(4);
  }
}

/* A fault at a in a closed system mapping: note it, and open it (in a snapshot process as a
 * private copy). 1: the access may run again; 0: not ours (not in one; or in one that is
 * open, a second time at this address on this thread: the access is not allowed there). A
 * fault in an open one is another thread's that came in while it was being opened. */
static TLS uintptr_t t_sys_retry;
static int sys_fault(uintptr_t a) {
  int found = 0;
  maps_lock();
  for (int i = 0; i < g_nsys && !found; i++) {
    struct sysmap *m = &g_sys[i];
    if (a < m->lo || a >= m->hi) continue;
    if (!m->closed) {
      found = t_sys_retry != a;
      t_sys_retry = a;
      break;
    }
    found = 1;
    t_sys_retry = 0;
    size_t len = m->hi - m->lo;
    int n = trk.nreached;
    if (n < 4) { /* named before a snapshot process's copy replaces it */
      struct mapent *e = &trk.reached[n];
      if (!mapping_of(m->lo, e)) memset(e, 0, sizeof *e);
      e->lo = m->lo; /* as the application mapped it, not as closed */
      e->hi = m->hi;
      e->perms[0] = (m->prot & PROT_READ) ? 'r' : '-';
      e->perms[1] = (m->prot & PROT_WRITE) ? 'w' : '-';
      e->perms[2] = '-';
      e->perms[3] = m->shared ? 's' : 'p';
      e->perms[4] = 0;
      trk.nreached = n + 1;
    }
    if (g_child && m->shared) sys_privatize(m);
    mprotect((void *)m->lo, len, m->prot);
    m->closed = 0;
  }
  maps_unlock();
  return found;
}

static void trk_fault(int sig, siginfo_t *si, void *uc) {
  uintptr_t a = (uintptr_t)si->si_addr;
  int in_sys = 0; /* a first look without the locks: a genuine crash elsewhere takes none */
  for (int i = 0; i < g_nsys && !in_sys; i++) in_sys = a - g_sys[i].lo < g_sys[i].hi - g_sys[i].lo;
  if (in_sys && __atomic_load_n(&trk.active, __ATOMIC_ACQUIRE) && (a < trk.lo || a >= trk.hi)) {
    int saved = errno;
    t_pausing++;
    while (__atomic_test_and_set(&trk.lock, __ATOMIC_ACQUIRE)) cpu_relax();
    int ours = sys_fault(a);
    __atomic_clear(&trk.lock, __ATOMIC_RELEASE);
    t_pausing--;
    errno = saved;
    if (ours) return;
  }
  if (__atomic_load_n(&trk.active, __ATOMIC_ACQUIRE) && a >= trk.lo && a < trk.hi) {
    int saved = errno;
    t_pausing++;
    uint64_t t0 = now_ns(); /* the copy is the recording's time, not the kernel's */
    uintptr_t p = a & ~(uintptr_t)(g_page - 1);
    size_t i = (p - trk.lo) / g_page;
    while (__atomic_test_and_set(&trk.lock, __ATOMIC_ACQUIRE)) cpu_relax();
    if (!trk.bits[i]) {
      size_t n = trk_window(i);
      /* read-only while copying, so another thread's write waits for the copy */
      if (mprotect((void *)p, n * g_page, PROT_READ) == 0) {
        unsigned char state[TRK_AHEAD_MAX];
        trk_states(p, n, state);
        for (size_t j = 0; j < n;) { /* copy the runs of pages that are there */
          size_t e = j;
          while (e < n && state[e] == state[j]) e++;
          if (state[j] == TRK_COPIED)
            memcpy(trk.mirror + (p - trk.lo) + j * g_page, (const void *)(p + j * g_page), (e - j) * g_page);
          j = e;
        }
        if (mprotect((void *)p, n * g_page, PROT_READ | PROT_WRITE) == 0) {
          memcpy(trk.bits + i, state, n);
          trk.touched += n;
          trk.faults++;
        }
      }
      if (!trk.bits[i]) {
        /* out of mappings (scattered pages split the arena into too many): open every page;
         * the pre-state of pages not yet copied is lost, so this capture is abandoned */
        mprotect((void *)trk.lo, trk.hi - trk.lo, PROT_READ | PROT_WRITE);
        trk.failed = 1;
        __atomic_store_n(&trk.active, 0, __ATOMIC_RELEASE);
      }
    }
    __atomic_clear(&trk.lock, __ATOMIC_RELEASE);
    pause_add(now_ns() - t0);
    t_pausing--;
    errno = saved;
    return;
  }
  /* not ours: the application's handler, or the default action */
  if ((trk.old.sa_flags & SA_SIGINFO) && trk.old.sa_sigaction) {
    trk.old.sa_sigaction(sig, si, uc);
  } else if (trk.old.sa_handler != SIG_DFL && trk.old.sa_handler != SIG_IGN) {
    trk.old.sa_handler(sig);
  } else {
    signal(SIGSEGV, SIG_DFL); /* the faulting access runs again and kills as it would have */
  }
}

static void *map_scratch(size_t len) {
  void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return m == MAP_FAILED ? NULL : m;
}

static void trk_free(void) {
  if (trk.bits) munmap(trk.bits, trk.bits_len);
  if (trk.mirror) munmap(trk.mirror, trk.mirror_len);
  if (trk.ev) munmap(trk.ev, trk.ev_len);
  trk.bits = NULL;
  trk.mirror = NULL;
  trk.ev = NULL;
}

/* The scratch maps outlive a capture: a page of a new anonymous map costs a fault and a
 * zeroing at its first write, which every capture paid again for each page it copied
 * (LULESH: 27 captures, 195 MB copied). A mirror larger than SCRATCH_KEEP is given back. */
#define SCRATCH_KEEP (64ull << 20)
static int trk_scratch(size_t bits_len, size_t mirror_len) {
  if (trk.bits && trk.bits_len < bits_len) { munmap(trk.bits, trk.bits_len); trk.bits = NULL; }
  if (trk.mirror && trk.mirror_len < mirror_len) { munmap(trk.mirror, trk.mirror_len); trk.mirror = NULL; }
  if (!trk.bits) { trk.bits_len = bits_len; trk.bits = map_scratch(bits_len); }
  else memset(trk.bits, 0, bits_len);
  if (!trk.mirror) { trk.mirror_len = mirror_len; trk.mirror = map_scratch(mirror_len); }
  if (!trk.ev) { trk.ev_len = sizeof(uintptr_t[2]) * MAX_EVENTS; trk.ev = map_scratch(trk.ev_len); }
  return trk.bits && trk.mirror && trk.ev ? 0 : -1;
}

/* after a capture: keep the scratch maps for the next one, unless the mirror grew large */
static void trk_keep(void) {
  if (trk.touched * g_page > SCRATCH_KEEP) trk_free();
}

static int trk_begin(void) {
  heap_lock();
  uintptr_t lo = g_pool[POOL_APP].base, hi = (g_pool[POOL_APP].top + g_page - 1) & ~(uintptr_t)(g_page - 1);
  trk.lo = lo;
  trk.hi = hi;
  trk.touched = trk.faults = trk.nev = 0;
  trk.ev_overflow = trk.failed = 0;
  if (trk.pagemap_pid != getpid()) { /* opened by the parent of this snapshot process: its pages */
    if (trk.pagemap >= 0) close(trk.pagemap);
    trk.pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    trk.pagemap_pid = getpid();
  }
  int mapped = trk_scratch(((hi - lo) / g_page + g_page) & ~(size_t)(g_page - 1), hi > lo ? hi - lo : g_page);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = trk_fault;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (mapped || sigaction(SIGSEGV, &sa, &trk.old)) {
    heap_unlock();
    trk_free();
    return -1;
  }
  trk.nreached = 0;
  __atomic_store_n(&trk.active, 1, __ATOMIC_RELEASE);
  if (hi > lo && mprotect((void *)lo, hi - lo, PROT_NONE)) {
    __atomic_store_n(&trk.active, 0, __ATOMIC_RELEASE);
    heap_unlock();
    sigaction(SIGSEGV, &trk.old, NULL);
    trk_free();
    return -1;
  }
  maps_lock();
  sys_close_all(1);
  maps_unlock();
  heap_unlock();
  return 0;
}

static void trk_end(void) {
  heap_lock();
  if (trk.hi > trk.lo) mprotect((void *)trk.lo, trk.hi - trk.lo, PROT_READ | PROT_WRITE);
  maps_lock();
  sys_close_all(0);
  maps_unlock();
  __atomic_store_n(&trk.active, 0, __ATOMIC_RELEASE);
  heap_unlock();
  while (__atomic_test_and_set(&trk.lock, __ATOMIC_ACQUIRE)) cpu_relax(); /* handlers in flight */
  __atomic_clear(&trk.lock, __ATOMIC_RELEASE);
  sigaction(SIGSEGV, &trk.old, NULL);
}

/* in a snapshot process forked during this process's own page-tracked capture: open every
 * page again and forget that capture (the parent goes on with it) */
static void trk_abandon(void) {
  if (trk.hi > trk.lo) mprotect((void *)trk.lo, trk.hi - trk.lo, PROT_READ | PROT_WRITE);
  sys_close_all(0); /* the lock: released by the fork handlers, or held by nobody else here */
  __atomic_store_n(&trk.active, 0, __ATOMIC_RELEASE);
  sigaction(SIGSEGV, &trk.old, NULL);
  trk_free();
}

/* the allocator's ranges, sorted and merged */
static void trk_sort_events(void) {
  size_t n = trk.nev;
  sort_records(&trk.ev[0][0], n, 2);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (m && trk.ev[i][0] <= trk.ev[m - 1][1]) {
      if (trk.ev[i][1] > trk.ev[m - 1][1]) trk.ev[m - 1][1] = trk.ev[i][1];
    } else {
      trk.ev[m][0] = trk.ev[i][0];
      trk.ev[m][1] = trk.ev[i][1];
      m++;
    }
  }
  trk.nev = m;
}

/* the pre-state of touched address z, up to its page's end */
static const void *trk_pre(uintptr_t z) {
  static char zeros[1 << 16]; /* never written: .bss, not 64 KB of the library's file */
  if (trk.bits[(z - trk.lo) / g_page] == TRK_ZERO && g_page <= sizeof zeros) return zeros + (z & (g_page - 1));
  return trk.mirror + (z - trk.lo);
}

/* the post-state of touched bytes [x, y): what the kernel changed (by page) as data, what
 * it only read as R3_KIND_SAME (a kernel reading 80 MB writes 80 MB less) */
static void trk_emit_post(wbuf_t *w, uintptr_t x, uintptr_t y) {
  while (x < y && !w->err) {
    int same = 0;
    uintptr_t z = x;
    for (int first = 1; z < y; first = 0) {
      uintptr_t e = (z | (g_page - 1)) + 1;
      if (e > y) e = y;
      int s = memcmp((const void *)z, trk_pre(z), e - z) == 0;
      if (first) same = s;
      else if (s != same) break;
      z = e;
    }
    if (same) {
      emit_header(w, x, z - x, R3_KIND_SAME);
    } else {
      emit_region(w, x, z - x, R3_KIND_HEAP, (const void *)x);
    }
    x = z;
  }
}

/* bytes of the application's live blocks that hold a touched page: a kernel that touches
 * 40 KB of a 300 MB lookup table each call (a different 40 KB each time) reads the table,
 * as far as caches go, not 40 KB (replay/cachestate.py) */
static uint64_t trk_blocks_bytes(void) {
  uint64_t total = 0;
  struct pool *pl = &g_pool[POOL_APP];
  heap_lock();
  for (uintptr_t h = pl->base; h < pl->top;) {
    chunk_t *c = (chunk_t *)h;
    uint64_t sz = c->size;
    if (chunk_bad(pl, h, sz)) break; /* emit_pool says it is corrupt */
    if (is_state(c, ST_LIVE) && h + sz > trk.lo && h < trk.hi) {
      uintptr_t lo = h + HDR > trk.lo ? h + HDR : trk.lo, hi = h + sz < trk.hi ? h + sz : trk.hi;
      size_t i = (lo - trk.lo) / g_page, j = (hi - 1 - trk.lo) / g_page + 1;
      while (i < j && !trk.bits[i]) i++;
      if (i < j) total += sz - HDR;
    }
    h += sz;
  }
  heap_unlock();
  return total;
}

/* runs of touched pages: about one a page for a kernel that reads scattered lines */
static uint64_t trk_runs(void) {
  size_t npages = (trk.hi - trk.lo) / g_page;
  uint64_t runs = 0;
  for (size_t i = 0; i < npages; i++)
    if (trk.bits[i] && (i == 0 || !trk.bits[i - 1])) runs++;
  return runs;
}

/* touched pages as runs: pre (from the copies) or post (live, less the allocator's ranges) */
static void trk_emit(wbuf_t *w, int post) {
  size_t npages = (trk.hi - trk.lo) / g_page, e = 0;
  for (size_t i = 0; i < npages && !w->err;) {
    if (!trk.bits[i]) { i++; continue; }
    size_t j = i;
    while (j < npages && trk.bits[j]) j++;
    uintptr_t a = trk.lo + i * g_page, b = trk.lo + j * g_page;
    if (!post) { /* the copies, and a header for each run of pages that were zeros */
      for (size_t x = i, y; x < j && !w->err; x = y) {
        for (y = x; y < j && trk.bits[y] == trk.bits[x];) y++;
        uintptr_t c = trk.lo + x * g_page, d = trk.lo + y * g_page;
        if (trk.bits[x] == TRK_ZERO) emit_header(w, c, d - c, R3_KIND_ZERO);
        else emit_region(w, c, d - c, R3_KIND_HEAP, trk.mirror + (c - trk.lo));
      }
    } else {
      while (e < trk.nev && trk.ev[e][1] <= a) e++;
      uintptr_t x = a;
      for (size_t f = e; f < trk.nev && trk.ev[f][0] < b && !w->err; f++) {
        if (trk.ev[f][0] > x) trk_emit_post(w, x, trk.ev[f][0]);
        if (trk.ev[f][1] > x) x = trk.ev[f][1];
      }
      if (x < b && !w->err) trk_emit_post(w, x, b);
    }
    i = j;
  }
}


static int64_t nargs_of(const struct r3_kinfo *k) {
  return k->nargs < 0 ? 0 : (k->nargs > 65536 ? 65536 : k->nargs);
}

/* ---- the caller's stack (kind 4) ----
 * A kernel may receive pointers into its callers' frames: C local arrays, C++ objects passed
 * by reference, struct-return (sret) buffers. Replay maps the recorded stack range at its
 * recorded address, so one region from the lowest such pointer up to the top of the thread's
 * stack (its outermost frame) keeps them valid. It lies above the kernel's own frames (and
 * above the noinline probe wrapper's), so between enter and exit only the kernel's writes
 * through its arguments change it: pre and post images hold it at the same address and size. */
#define STACK_MAX (64ull << 20)

/* the mapping holding address a, from /proc/self/maps (read(2), no malloc): 1 if found */
static int mapping_of(uintptr_t a, struct mapent *out) {
  char buf[4096], line[512];
  size_t ln = 0;
  int found = 0;
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  for (;;) {
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    for (ssize_t i = 0; i < r && !found; i++) {
      char c = buf[i];
      if (c != '\n') {
        if (ln < sizeof line - 1) line[ln++] = c;
        continue;
      }
      line[ln] = 0;
      ln = 0;
      /* "lo-hi perms offset dev inode   name" in hex */
      uint64_t lo = 0, hi = 0;
      const char *s = line;
      int ok = 1, d = 0;
      for (; *s && *s != '-'; s++, d++) {
        int v = (*s >= '0' && *s <= '9') ? *s - '0' : (*s >= 'a' && *s <= 'f') ? *s - 'a' + 10 : -1;
        if (v < 0) { ok = 0; break; }
        lo = lo * 16 + (uint64_t)v;
      }
      if (!ok || *s != '-' || !d) continue;
      for (s++, d = 0; *s && *s != ' '; s++, d++) {
        int v = (*s >= '0' && *s <= '9') ? *s - '0' : (*s >= 'a' && *s <= 'f') ? *s - 'a' + 10 : -1;
        if (v < 0) { ok = 0; break; }
        hi = hi * 16 + (uint64_t)v;
      }
      if (!ok || !d || a < lo || a >= hi) continue;
      found = 1;
      out->lo = (uintptr_t)lo;
      out->hi = (uintptr_t)hi;
      while (*s == ' ') s++;
      size_t k = 0;
      for (; k < 4 && s[k] && s[k] != ' '; k++) out->perms[k] = s[k];
      out->perms[k] = 0;
      for (int field = 0; field < 4 && *s; field++) { /* perms offset dev inode */
        while (*s && *s != ' ') s++;
        while (*s == ' ') s++;
      }
      for (k = 0; s[k] && k < sizeof out->name - 1; k++) out->name[k] = s[k];
      out->name[k] = 0;
    }
    if (found) break;
  }
  close(fd);
  return found;
}

/* the end of the mapping holding address a, or 0 */
/* main_stack (if not NULL): set when that mapping is the main thread's stack */
static uintptr_t mapping_end(uintptr_t a, int *main_stack) {
  struct mapent e;
  if (!mapping_of(a, &e)) return 0;
  if (main_stack) *main_stack = strstr(e.name, "[stack]") != NULL;
  return e.hi;
}

extern void *__libc_stack_end __attribute__((weak));

/* The top of the main thread's stack as far as frames go (found once): glibc's
 * __libc_stack_end, the stack pointer at process entry. Above it lie argc, argv, the
 * environment and the auxiliary vector, which a capture must not carry (environment
 * variables may hold secrets); a pointer into them is not a stack pointer here. Without
 * __libc_stack_end (another libc): the end of the stack's mapping in /proc/self/maps. */
static uintptr_t main_stack_top(void) {
  static uintptr_t top;
  if (!top) {
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (&__libc_stack_end && (uintptr_t)__libc_stack_end > here)
      top = ((uintptr_t)__libc_stack_end + 15) & ~(uintptr_t)15;
    else
      top = mapping_end(here, NULL);
  }
  return top;
}


/* the thread pointer: on x86-64 the static TLS blocks lie just below it, the thread control
 * block at it; both sit at the top of a thread's stack mapping, above its frames */
static uintptr_t thread_pointer(void) {
#if defined(__x86_64__)
  uintptr_t tp;
  __asm__("mov %%fs:0, %0" : "=r"(tp));
  return tp;
#else
  return 0;
#endif
}

/* the lowest address of the calling thread's static TLS blocks (every loaded module's) */
static int tls_cb(struct dl_phdr_info *info, size_t sz, void *data) {
  uintptr_t *low = (uintptr_t *)data;
  if (sz >= offsetof(struct dl_phdr_info, dlpi_tls_data) + sizeof info->dlpi_tls_data && info->dlpi_tls_data &&
      (uintptr_t)info->dlpi_tls_data < *low)
    *low = (uintptr_t)info->dlpi_tls_data;
  return 0;
}

/* choose the kind-4 regions for a capture of k with these argument slots: from the lowest
 * argument pointing into the calling thread's stack up to its top, and likewise for the main
 * thread's stack when a worker gets pointers into it (a driver's locals shared with its
 * parallel loop); -1: a region is too large, and a capture without it would not replay */
static int stack_region(struct r3_kinfo *k, const uint64_t *slots, int main_thread) {
  cap.nstk = 0;
  int64_t na = nargs_of(k);
  if (!slots || !na) return 0;
  uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
  uintptr_t own_top = main_thread ? main_stack_top() : mapping_end(sp, NULL);
  uintptr_t lo[2] = {UINTPTR_MAX, UINTPTR_MAX}, top[2] = {own_top, main_thread ? 0 : main_stack_top()};
  uintptr_t own_hi = 0; /* the highest argument into the calling thread's stack */
  for (int64_t i = 0; i < na; i++) {
    if (k->byval_sizes && k->byval_sizes[i] > 0) continue; /* saved with the arguments */
    uintptr_t v = (uintptr_t)slots[i];
    if (!v || (v >= g_base && v < g_end)) continue;
    if (v > sp && v < own_top) {
      if (v < lo[0]) lo[0] = v;
      if (v > own_hi) own_hi = v;
    } else if (top[1] && v < top[1] && v < lo[1]) {
      int main_stack = 0;
      if (mapping_end(v, &main_stack) && main_stack) lo[1] = v;
    } else if (v >= main_stack_top()) {
      int main_stack = 0;
      if (mapping_end(v, &main_stack) && main_stack) {
        /* argv, the environment, the auxiliary vector: never recorded (they may hold secrets) */
        warn("not capturing ", k->name ? k->name : "?",
             ": an argument points to the program's arguments or environment, which captures never hold", NULL);
        return -1;
      }
    }
  }
  for (int g = 0; g < 2; g++) {
    if (lo[g] == UINTPTR_MAX || !top[g]) continue;
    uintptr_t l = lo[g] & ~(uintptr_t)15;
    if (top[g] - l > STACK_MAX) {
      char a[32];
      warn("not capturing ", k->name ? k->name : "?", ": an argument points ", fmt_u64(a + sizeof a, top[g] - l),
           " bytes below the stack top (more than 64 MiB of stack to record)", NULL);
      return -1;
    }
    int n = cap.nstk++;
    cap.stk[n].lo = l;
    cap.stk[n].hi = top[g];
    cap.stk[n].tls_lo = 0;
    if (g == 0 && !main_thread) {
      /* a worker's TLS (errno, the OpenMP runtime's thread data) sits above its outermost
       * frame: left out unless an argument points into it; then restored, never compared
       * (it changes with whatever the thread does) */
      uintptr_t tp = thread_pointer(), low = tp;
      if (tp > l && tp < top[g]) {
        dl_iterate_phdr(tls_cb, &low);
        uintptr_t t = (low - 64) & ~(uintptr_t)15; /* a little below: alignment padding */
        if (own_hi < t) cap.stk[n].hi = t > l ? t : l;
        else cap.stk[n].tls_lo = t > l ? t : l;
      }
    }
  }
  return 0;
}

/* ---- loaded objects' data (kinds 6 and 2) ----
 * An argument may point into the executable's or a library's own data: a string literal
 * (XSBench passes "RESULTS" to center_print), a constant table, a global array another unit
 * defines. No heap or stack image holds it, and replay runs in another process: the object
 * the symbol table says holds it is recorded (read-only data without a symbol, a literal:
 * from the argument to its segment's end), and replay maps it at its address. Code
 * segments are left out (a function pointer cannot be replayed this way). */
#define IMAGE_MAX (64ull << 20)
struct seg_find { uintptr_t a, lo, hi, bias; const char *path; int writable, found; };

static int seg_cb(struct dl_phdr_info *info, size_t sz, void *data) {
  (void)sz;
  struct seg_find *f = (struct seg_find *)data;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (ph->p_type != PT_LOAD || f->a < lo || f->a >= hi) continue;
    if (!(ph->p_flags & PF_X)) {
      f->lo = lo;
      f->hi = hi;
      f->bias = info->dlpi_addr;
      f->path = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "/proc/self/exe";
      f->writable = (ph->p_flags & PF_W) != 0;
      f->found = 1;
    }
    return 1;
  }
  return 0;
}

/* The data object holding f->a, from the object file's symbol table (.symtab, else .dynsym):
 * a global array of another unit is compared as itself, not with the rest of its segment,
 * which holds whatever else changes meanwhile (the probes' counters, this runtime's state).
 * 0 and [*lo, *hi) when found. */
static int symbol_extent(const struct seg_find *f, uintptr_t *lo, uintptr_t *hi) {
  int fd = open(f->path, O_RDONLY | O_CLOEXEC), found = 0;
  if (fd < 0) return -1;
  struct stat st;
  void *m = fstat(fd, &st) == 0 && st.st_size > (off_t)sizeof(ElfW(Ehdr))
                ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  close(fd);
  if (m == MAP_FAILED) return -1;
  const unsigned char *b = (const unsigned char *)m;
  size_t len = (size_t)st.st_size;
  const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)m;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_shoff && eh->e_shentsize == sizeof(ElfW(Shdr)) &&
      eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(ElfW(Shdr)) <= len) {
    const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(b + eh->e_shoff);
    for (int pass = 0; pass < 2 && !found; pass++) {
      for (int i = 0; i < eh->e_shnum && !found; i++) {
        if (sh[i].sh_type != (pass ? SHT_DYNSYM : SHT_SYMTAB) || sh[i].sh_entsize != sizeof(ElfW(Sym)) ||
            sh[i].sh_offset + sh[i].sh_size > len)
          continue;
        const ElfW(Sym) *sym = (const ElfW(Sym) *)(b + sh[i].sh_offset);
        for (size_t j = 0; j < sh[i].sh_size / sizeof(ElfW(Sym)); j++) {
          uintptr_t a = f->bias + sym[j].st_value;
          if (ELF64_ST_TYPE(sym[j].st_info) == STT_OBJECT && sym[j].st_size && f->a >= a &&
              f->a < a + sym[j].st_size) {
            *lo = a;
            *hi = a + sym[j].st_size;
            found = 1;
            break;
          }
        }
      }
    }
  }
  munmap(m, len);
  return found ? 0 : -1;
}

static int in_global(const struct r3_kinfo *k, uintptr_t v) {
  for (int64_t i = 0; k->globals && i < k->nglobals; i++) {
    uintptr_t g = (uintptr_t)k->globals[i].addr;
    if (g && v >= g && v < g + (uint64_t)k->globals[i].size) return 1;
  }
  return 0;
}

/* choose the kind-6/2 regions for the argument slots; -1: one would be too large */
static int image_regions(struct r3_kinfo *k, const uint64_t *slots) {
  cap.nimg = 0;
  int64_t na = nargs_of(k);
  for (int64_t i = 0; slots && i < na; i++) {
    if (k->byval_sizes && k->byval_sizes[i] > 0) continue;
    uintptr_t v = (uintptr_t)slots[i];
    if (v < 4096 || (v >= g_base && v < g_end) || in_global(k, v)) continue;
    int held = 0;
    for (int j = 0; j < cap.nstk; j++) held |= v >= cap.stk[j].lo && v < cap.stk[j].hi;
    for (int j = 0; j < cap.nimg; j++) held |= v >= cap.img[j].lo && v < cap.img[j].hi;
    if (held) continue;
    struct seg_find f = {v, 0, 0, 0, NULL, 0, 0};
    dl_iterate_phdr(seg_cb, &f);
    if (!f.found) continue;
    uintptr_t lo = v, hi = f.hi;
    if (symbol_extent(&f, &lo, &hi) && f.writable) {
      warn("not capturing ", k->name ? k->name : "?", ": an argument points into the static data of ", f.path,
           ", whose symbol table does not say where that object ends (stripped?)", NULL);
      return -1;
    }
    if (hi - lo > IMAGE_MAX) {
      if (f.writable) {
        char a[32];
        warn("not capturing ", k->name ? k->name : "?", ": an argument points into a static object of ",
             fmt_u64(a + sizeof a, hi - lo), " bytes (more than 64 MiB to record)", NULL);
        return -1;
      }
      hi = lo + IMAGE_MAX;
    }
    /* a later argument below this one in the same segment: one region from the lower */
    int merged = 0;
    for (int j = 0; j < cap.nimg && !merged; j++)
      if (cap.img[j].hi == hi && lo < cap.img[j].lo) { cap.img[j].lo = lo; merged = 1; }
    if (merged) continue;
    if (cap.nimg == (int)(sizeof cap.img / sizeof cap.img[0])) break;
    cap.img[cap.nimg].lo = lo;
    cap.img[cap.nimg].hi = hi;
    cap.img[cap.nimg].writable = f.writable;
    cap.nimg++;
  }
  return 0;
}

/* ---- memory no image holds ----
 * An argument may point into a mapping that is neither the arena, a stack region, nor a
 * loaded object's data: memory mmap'ed shared or at a fixed address (mmap below serves the
 * rest from the arena), another thread's stack, a library's own maps. Replay would not find
 * it: the mappings go into meta.json ("foreign"), and ingest marks the capture unreplayable
 * naming the region, where the argument is a pointer (an integer may look like an address),
 * rather than leave a capture that crashes in replay. Code (a function pointer) is left as
 * before. */
/* one more such mapping, e, reached through argument arg (-1: through the kernel's data) */
static void add_foreign(struct r3_kinfo *k, int64_t arg, const struct mapent *e) {
  int n = cap.nforeign;
  if (n == (int)(sizeof cap.foreign / sizeof cap.foreign[0])) return;
  for (int i = 0; i < n; i++)
    if (cap.foreign[i].lo == e->lo) return;
  cap.nforeign = n + 1;
  cap.foreign[n].arg = arg;
  cap.foreign[n].lo = e->lo;
  cap.foreign[n].hi = e->hi;
  memcpy(cap.foreign[n].perms, e->perms, sizeof e->perms);
  size_t l = r3_strlen(e->name);
  if (l >= sizeof cap.foreign[n].name) l = sizeof cap.foreign[n].name - 1;
  memcpy(cap.foreign[n].name, e->name, l);
  cap.foreign[n].name[l] = 0;
  char a[32], b[32];
  warn("capture of ", k->name ? k->name : "?", arg < 0 ? ": the kernel reaches " : ": an argument points into ",
       fmt_hex(a + sizeof a, e->lo), "-", fmt_hex(b + sizeof b, e->hi), " ", e->perms, " ",
       e->name[0] ? e->name : "(anonymous)", ", a mapping no capture holds; it will not replay", NULL);
}

static void foreign_args(struct r3_kinfo *k, const uint64_t *slots) {
  cap.nforeign = 0;
  int64_t na = nargs_of(k);
  for (int64_t i = 0; slots && i < na; i++) {
    if (k->byval_sizes && k->byval_sizes[i] > 0) continue;
    uintptr_t v = (uintptr_t)slots[i];
    if (v < 65536 || (v >= g_base && v < g_end) || in_global(k, v)) continue;
    int held = 0;
    for (int j = 0; j < cap.nstk; j++) held |= v >= cap.stk[j].lo && v < cap.stk[j].hi;
    for (int j = 0; j < cap.nimg; j++) held |= v >= cap.img[j].lo && v < cap.img[j].hi;
    struct mapent e;
    if (held || !mapping_of(v, &e) || strchr(e.perms, 'x')) continue;
    add_foreign(k, i, &e);
  }
}

static void remove_capture_dir(const char *dir) {
  static const char *files[] = {"pre.bin", "post.bin", "meta.json"};
  for (int i = 0; i < 3; i++) {
    char p[PATHMAX];
    path_t b = {p, 0, sizeof p, 0};
    pa(&b, dir);
    pa(&b, "/");
    pa(&b, files[i]);
    if (!b.ovf) unlink(p);
  }
  rmdir(dir);
}

static void cleanup_tmp(void) {
  if (cap.pre_fd >= 0) { close(cap.pre_fd); cap.pre_fd = -1; }
  remove_capture_dir(cap.tmp);
}

/* While a capture is written, a file size limit (ulimit -f) makes write(2) fail with EFBIG
 * as a full disk fails it, rather than killing the application with SIGXFSZ: 1 if the
 * default action was set aside (xfsz_restore puts it back). */
static int xfsz_ignore(void) {
  struct sigaction cur, ign;
  if (sigaction(SIGXFSZ, NULL, &cur) || (cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL) return 0;
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  return sigaction(SIGXFSZ, &ign, NULL) == 0;
}
static void xfsz_restore(int ignored) {
  if (!ignored) return;
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGXFSZ, &dfl, NULL);
}

/* ---- a capture that could not be written ----
 * A full disk (or a file size limit, an I/O error) must fail the record, not leave a run
 * that exits 0 without its hottest kernel: captures/.error-<errno>-<kernel>-<call>-<pid>
 * tells ingest (capture.py, write_failures). Its name alone says what failed, for a disk
 * with no room left for its contents (JSON: kernel, errno, error, path); it is written
 * after the failed capture's files are removed. name NULL: the process's profile, whose
 * marker is named ".profile" (no kernel's name starts with a dot). */
static void record_failure(const char *name, int64_t inst, int err, const char *where) {
  char p[PATHMAX], buf[1024];
  path_t b = {p, 0, sizeof p, 0};
  pa(&b, cfg.dir); pa(&b, "/captures");
  if (b.ovf || mkdir_p(p)) return;
  pa(&b, "/.error-"); pa_u(&b, (uint64_t)err); pa(&b, "-"); sanitize_name(&b, name ? name : ".profile");
  pa(&b, "-"); pa_u(&b, (uint64_t)inst); pa(&b, "-"); pa_u(&b, (uint64_t)getpid());
  if (b.ovf) return;
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    warn("cannot leave the failure of ", name ? name : "the profile", " for the record: ", strerror(errno), NULL);
    return;
  }
  wbuf_t w = {.fd = fd, .cap = sizeof buf, .buf = buf};
  wb_s(&w, "{\"kernel\": "); wb_jstr(&w, name);
  wb_s(&w, ", \"errno\": "); wb_u(&w, (uint64_t)err);
  wb_s(&w, ", \"error\": "); wb_jstr(&w, strerror(err));
  wb_s(&w, ", \"path\": "); wb_jstr(&w, where);
  wb_s(&w, "}\n");
  int xfsz = xfsz_ignore();
  wb_flush(&w);
  xfsz_restore(xfsz);
  close(fd);
}


static uint64_t g_budget_used;
static int g_budget_warned;

enum { CAP_NONE, CAP_HERE, CAP_FORK };

static void release_capture(int *flag) { __atomic_store_n(flag, 0, __ATOMIC_RELEASE); }

/* ---- how many calls of a kernel to capture (R3_INSTANCE_BYTES) ----
 * Replaying a kernel's calls in their order (replay/sequence.py) times them as the
 * application runs them only when their data outgrows what the caches and the TLB hold
 * between two passes, as the application's data does (XSBench's lookups: record/session.py,
 * AUTO_LLC_SHARE). With R3_INSTANCE_BYTES, calls are captured (at most
 * R3_INSTANCES) until the pages they touched together reach that many bytes, or every
 * page of the blocks they touch: a kernel that sweeps its arrays in each call needs one.
 * A call captured in a snapshot process (inside a parallel region) updates the same
 * counts: they live in shared memory, and snapshot processes run one at a time. */

/* before a capture of k, in the process that may fork the snapshot: its map exists (two
 * threads may get here at once, one capturing in place and one forking) */
static void kcalls_map(struct r3_kinfo *k) {
  if (!g_kcalls || k->id < 0 || __atomic_load_n(&g_kcalls[k->id].seen, __ATOMIC_ACQUIRE)) return;
  size_t len = ((g_pool[POOL_APP].end - g_pool[POOL_APP].base) / g_page + 7) / 8;
  unsigned char *m = map_shared(len), *none = NULL;
  if (m && !__atomic_compare_exchange_n(&g_kcalls[k->id].seen, &none, m, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    munmap(m, len);
}

static int enough_calls(struct r3_kinfo *k) {
  if ((uint64_t)__atomic_load_n(&k->captured, __ATOMIC_RELAXED) >= cfg.instances) return 1;
  if (!g_kcalls || k->id < 0) return 0;
  struct kcalls *c = &g_kcalls[k->id];
  uint64_t u = __atomic_load_n(&c->union_bytes, __ATOMIC_RELAXED);
  uint64_t b = __atomic_load_n(&c->blocks_bytes, __ATOMIC_RELAXED);
  return u >= cfg.instance_bytes || (b && u >= b);
}

/* after a capture of k (trk still holds a page-tracked one's pages): add them to the union;
 * a whole-heap capture holds every page, so one is all a sequence would see */
static void count_call_pages(struct r3_kinfo *k) {
  struct kcalls *c = g_kcalls && k->id >= 0 ? &g_kcalls[k->id] : NULL;
  if (c && !cap.pages) __atomic_store_n(&c->union_bytes, UINT64_MAX, __ATOMIC_RELAXED);
  if (!c || !c->seen || !cap.pages) return;
  size_t first = (trk.lo - g_pool[POOL_APP].base) / g_page, npages = (trk.hi - trk.lo) / g_page;
  uint64_t fresh = 0;
  for (size_t i = 0; i < npages; i++) {
    size_t bit = first + i;
    if (trk.bits[i] && !(c->seen[bit >> 3] & (1u << (bit & 7)))) {
      c->seen[bit >> 3] |= (unsigned char)(1u << (bit & 7));
      fresh++;
    }
  }
  __atomic_fetch_add(&c->union_bytes, fresh * g_page, __ATOMIC_RELAXED);
  __atomic_store_n(&c->blocks_bytes, cap.blocks, __ATOMIC_RELAXED);
}

/* should this call be captured, and where? (cheap checks first; a yes holds g_capturing) */
static int want_capture(struct r3_kinfo *k) {
  if (enough_calls(k)) return CAP_NONE;
  if (!cfg.have_dir || cfg.capture_none || g_child || g_forked || t_cap_depth >= 0) return CAP_NONE;
  int64_t sel = __atomic_load_n(&k->sel, __ATOMIC_RELAXED);
  if (!sel) __atomic_store_n(&k->sel, sel = selected(k->name) ? 1 : 2, __ATOMIC_RELAXED);
  if (sel != 1 || (k->flags & R3_KFLAG_NO_CAPTURE)) return CAP_NONE;
  int whole = !cfg.pages || (k->flags & R3_KFLAG_WHOLE_HEAP);
  uint64_t live = __atomic_load_n(&g_live, __ATOMIC_RELAXED);
  if (whole && live > cfg.max_bytes) {
    int i;
    for (i = 0; i < NWARN && g_skip_warned[i]; i++)
      if (g_skip_warned[i] == k) return CAP_NONE;
    if (i < NWARN) g_skip_warned[i] = k;
    char a[32], b[32];
    warn("not capturing ", k->name ? k->name : "?", ": live heap of ", fmt_u64(a + sizeof a, live),
         " bytes exceeds R3_MAX_CAPTURE_BYTES=", fmt_u64(b + sizeof b, cfg.max_bytes), NULL);
    return CAP_NONE;
  }
  /* a whole-heap capture writes the live heap twice; a page-tracked one is charged when done */
  if (g_budget_used + (whole ? 2 * live : 0) >= cfg.budget) {
    if (!__atomic_exchange_n(&g_budget_warned, 1, __ATOMIC_RELAXED)) {
      char b[32];
      warn("capture budget R3_CAPTURE_BUDGET=", fmt_u64(b + sizeof b, cfg.budget),
           " bytes is spent; no further kernels are captured (record fewer with --kernel)", NULL);
    }
    return CAP_NONE;
  }
  int here = (pid_t)syscall(SYS_gettid) == getpid();
  omp_int_fn in_parallel = omp_fn(0);
  if (here && in_parallel && in_parallel()) here = 0;
  int zero = 0, *flag = here ? &g_capturing : &g_forking;
  if (!__atomic_compare_exchange_n(flag, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return CAP_NONE;
  kcalls_map(k); /* here, before a snapshot process inherits it */
  return here ? CAP_HERE : CAP_FORK;
}

static void capture_paths(struct r3_kinfo *k, int64_t inst, pid_t pid, char *dir, path_t *t, path_t *f) {
  path_t b = {dir, 0, PATHMAX, 0};
  pa(&b, cfg.dir);
  pa(&b, "/captures");
  pa(t, dir); pa(t, "/.tmp-"); sanitize_name(t, k->name); pa(t, "-"); pa_u(t, (uint64_t)inst);
  pa(t, "-"); pa_u(t, (uint64_t)pid);
  pa(f, dir); pa(f, "/"); sanitize_name(f, k->name); pa(f, "-"); pa_u(f, (uint64_t)inst);
  pa(f, "-"); pa_u(f, (uint64_t)pid);
  if (b.ovf) t->ovf = 1;
}

/* start capturing instance inst of k: argument copies, pre-state; 0 if the capture runs */
static int capture_begin(struct r3_kinfo *k, const uint64_t *slots, int depth, int64_t inst, int main_thread) {
  char dir[PATHMAX];
  path_t t = {cap.tmp, 0, sizeof cap.tmp, 0}, f = {cap.fin, 0, sizeof cap.fin, 0};
  capture_paths(k, inst, getpid(), dir, &t, &f);
  if (t.ovf || f.ovf) { warn("capture path too long; not capturing ", k->name, NULL); return -1; }
  if (mkdir_p(dir) || (mkdir(cap.tmp, 0755) && errno != EEXIST)) {
    int e = errno;
    warn("cannot create ", cap.tmp, ": ", strerror(e), NULL);
    record_failure(k->name, inst, e, cap.tmp);
    return -1;
  }
  cap.k = k;
  cap.instance = inst;
  cap.scratch = NULL;
  cap.scratch_len = 0;
  cap.slots = NULL;
  cap.byval = NULL;
  cap.written = 0;
  cap.pre_fd = -1;
  cap.worker = g_child;
  if (!g_child) cap.threads = 0; /* a snapshot process was told before the fork */
  cap.live_bytes = __atomic_load_n(&g_live, __ATOMIC_RELAXED);
  cap.pages = cfg.pages && !(k->flags & R3_KFLAG_WHOLE_HEAP);
  if (stack_region(k, slots, main_thread) < 0 || image_regions(k, slots) < 0) {
    cleanup_tmp();
    return -1;
  }
  foreign_args(k, slots);
  int64_t na = nargs_of(k);
  uint64_t need = (uint64_t)na * 8;
  for (int64_t i = 0; k->byval_sizes && i < na; i++)
    if (k->byval_sizes[i] > 0) need += (uint64_t)k->byval_sizes[i];
  if (need) { /* outside the arena, so the capture does not change the heap it records */
    size_t len = (need + g_page - 1) & ~(g_page - 1);
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      warn("cannot save arguments of ", k->name, ": ", strerror(errno), NULL);
      cleanup_tmp();
      return -1;
    }
    cap.scratch = m;
    cap.scratch_len = len;
    cap.slots = (uint64_t *)m;
    cap.byval = (unsigned char *)m + na * 8;
    if (na && slots) memcpy(cap.slots, slots, (size_t)na * 8);
    unsigned char *bv = cap.byval;
    for (int64_t i = 0; k->byval_sizes && i < na; i++) {
      int64_t sz = k->byval_sizes[i];
      if (sz <= 0) continue;
      if (slots && slots[i]) memcpy(bv, (const void *)(uintptr_t)slots[i], (size_t)sz);
      bv += sz;
    }
  }
  char pre[PATHMAX];
  path_t p = {pre, 0, sizeof pre, 0};
  pa(&p, cap.tmp); pa(&p, "/pre.bin");
  int err = 0, xfsz = xfsz_ignore();
  if (p.ovf) err = ENAMETOOLONG;
  else if (!cap.pages) err = write_image(pre, k, 0);
  else {
    /* the runtimes' chunks, globals and stack now; the touched pages when the call returns */
    wbuf_t *w = &cap.pre_w;
    int fd = open_image(pre, w, g_wbuf, sizeof g_wbuf);
    if (fd < 0) err = errno;
    else {
      wb_put(w, "R3MEM1\0\0", 8);
      w->total = 8;
      emit_fixed(w, k, 0);
      wb_flush(w); /* direct: the last partial block waits in w for the touched pages */
      err = w->err;
      cap.written += w->total;
      w->total = 0;
      cap.pre_fd = fd;
      if (!err && trk_begin()) {
        warn("cannot track the pages ", k->name, " touches; capturing the whole heap", NULL);
        close(fd);
        cap.pre_fd = -1;
        cap.pages = 0;
        cap.written = 0;
        err = write_image(pre, k, 0);
      }
    }
  }
  xfsz_restore(xfsz);
  if (err) {
    warn("cannot write ", pre, ": ", strerror(err), NULL);
    cleanup_tmp();
    record_failure(k->name, inst, err, pre);
    if (cap.scratch) munmap(cap.scratch, cap.scratch_len);
    return -1;
  }
  if (g_child && !cap.pages) /* no page tracking to find what it reaches: copy what it might write */
    for (int i = 0; i < g_nsys; i++)
      if (g_sys[i].shared && (g_sys[i].prot & PROT_WRITE)) sys_privatize(&g_sys[i]);
  heap_lock();
  g_nnew = 0;
  g_new_overflow = 0;
  g_mark_new = 1;
  heap_unlock();
  t_cap_depth = depth;
  return 0;
}

/* one more block left live, [lo, hi) of chunk c: joined to the last range when c starts
 * where that range ends (lock held) */
static void add_left(chunk_t *c) {
  uintptr_t lo = (uintptr_t)(c + 1), hi = (uintptr_t)c + c->size;
  g_left_blocks++;
  g_left_bytes += hi - lo;
  if (g_nleft && g_left[g_nleft - 1][1] == (uintptr_t)c) {
    g_left[g_nleft - 1][1] = hi;
    return;
  }
  if (g_nleft == g_left_cap) {
    uint64_t cap = g_left_cap ? 2 * g_left_cap : 256;
    void *m = g_left ? mremap(g_left, g_left_cap * sizeof *g_left, cap * sizeof *g_left, MREMAP_MAYMOVE)
                     : map_scratch(cap * sizeof *g_left);
    if (!m || m == MAP_FAILED) { g_left_short = 1; return; }
    g_left = m;
    g_left_cap = cap;
  }
  g_left[g_nleft][0] = lo;
  g_left[g_nleft][1] = hi;
  g_nleft++;
}

static void take_if_left(chunk_t *c) {
  if (is_state(c, ST_LIVE) && (c->tag & F_NEW)) {
    c->tag &= ~(uint64_t)F_NEW;
    add_left(c);
  }
}

/* the blocks allocated during the call and still live, in address order, into g_left: from
 * the list, or from a walk of the application's pool when the list overflowed */
static void collect_left(void) {
  heap_lock();
  g_mark_new = 0;
  g_nleft = g_left_blocks = g_left_bytes = 0;
  g_left_short = 0;
  if (!g_new_overflow) {
    sort_records(g_new, g_nnew, 1);
    for (size_t i = 0; i < g_nnew; i++) /* a repeat was freed and taken again: one block */
      if (!i || g_new[i] != g_new[i - 1]) take_if_left((chunk_t *)g_new[i]);
  } else {
    struct pool *pl = &g_pool[POOL_APP];
    for (uintptr_t h = pl->base; h < pl->top;) {
      chunk_t *c = (chunk_t *)h;
      if (chunk_bad(pl, h, c->size)) { g_left_short = 1; break; }
      take_if_left(c);
      h += c->size;
    }
  }
  g_nnew = 0;
  heap_unlock();
}

static void write_meta(wbuf_t *w, struct r3_kinfo *k, const void *ret, uint64_t incl) {
  int64_t na = nargs_of(k);
  wb_s(w, "{\"kernel\": "); wb_jstr(w, k->name);
  wb_s(w, ", \"tu_dir\": "); wb_jstr(w, k->tu_dir);
  wb_s(w, ", \"instance\": "); wb_i(w, cap.instance);
  wb_s(w, ", \"pid\": "); wb_u(w, (uint64_t)getpid());
  wb_s(w, ", \"args\": [");
  for (int64_t i = 0; i < na; i++) {
    if (i) wb_s(w, ", ");
    wb_hex(w, cap.slots ? cap.slots[i] : 0);
  }
  wb_s(w, "], \"byval\": [");
  const unsigned char *bv = cap.byval;
  for (int64_t i = 0; i < na; i++) {
    if (i) wb_s(w, ", ");
    int64_t sz = k->byval_sizes ? k->byval_sizes[i] : 0;
    if (sz > 0) { wb_hexbytes(w, bv, (size_t)sz); bv += sz; }
    else wb_s(w, "null");
  }
  wb_s(w, "], \"ret\": ");
  if (k->ret_size > 0 && ret) wb_hexbytes(w, ret, (size_t)k->ret_size);
  else wb_s(w, "null");
  omp_int_fn max_threads = omp_fn(1);
  wb_s(w, ", \"threads\": "); wb_i(w, cap.threads ? cap.threads : (max_threads ? max_threads() : 1));
  wb_s(w, ", \"instance_ns\": "); wb_u(w, incl);
  wb_s(w, ", \"arena_base\": "); wb_hex(w, g_base);
  wb_s(w, ", \"arena_end\": "); wb_hex(w, __atomic_load_n(&g_pool[POOL_APP].top, __ATOMIC_RELAXED));
  wb_s(w, ", \"runtime_base\": "); wb_hex(w, g_pool[POOL_RT].base);
  wb_s(w, ", \"runtime_end\": "); wb_hex(w, __atomic_load_n(&g_pool[POOL_RT].top, __ATOMIC_RELAXED));
  wb_s(w, ", \"memory\": {\"mode\": "); wb_jstr(w, cap.pages ? "pages" : "heap");
  wb_s(w, ", \"live_bytes\": "); wb_u(w, cap.live_bytes);
  wb_s(w, ", \"touched_bytes\": "); wb_u(w, cap.pages ? trk.touched * g_page : cap.live_bytes);
  if (cap.pages) {
    wb_s(w, ", \"faults\": "); wb_u(w, trk.faults);
    wb_s(w, ", \"blocks_bytes\": "); wb_u(w, cap.blocks);
    wb_s(w, ", \"runs\": "); wb_u(w, cap.runs);
  }
  wb_s(w, ", \"thread\": "); wb_jstr(w, cap.worker ? "worker" : "main");
  /* blocks allocated during the call and still live: [address, size] ranges, blocks next
   * to each other joined */
  wb_s(w, ", \"left_blocks\": "); wb_u(w, g_left_blocks);
  wb_s(w, ", \"left_bytes\": "); wb_u(w, g_left_bytes);
  if (g_left_short) wb_s(w, ", \"left_listed\": false");
  wb_s(w, ", \"left\": [");
  for (uint64_t i = 0; i < g_nleft; i++) {
    if (i) wb_s(w, ", ");
    wb_s(w, "["); wb_u(w, g_left[i][0]); wb_s(w, ", "); wb_u(w, g_left[i][1] - g_left[i][0]); wb_s(w, "]");
  }
  wb_s(w, "]");
  wb_s(w, "}");
  if (!cap.pages && g_nsys) { /* what ingest looks for pointers into, with no page tracking to say */
    wb_s(w, ", \"system_maps\": [");
    for (int i = 0; i < g_nsys; i++) {
      char perms[5] = {(g_sys[i].prot & PROT_READ) ? 'r' : '-', (g_sys[i].prot & PROT_WRITE) ? 'w' : '-', '-',
                       g_sys[i].shared ? 's' : 'p', 0};
      if (i) wb_s(w, ", ");
      wb_s(w, "{\"lo\": "); wb_hex(w, g_sys[i].lo);
      wb_s(w, ", \"hi\": "); wb_hex(w, g_sys[i].hi);
      wb_s(w, ", \"perms\": "); wb_jstr(w, perms);
      wb_s(w, "}");
    }
    wb_s(w, "]");
  }
  if (cap.nforeign) { /* arguments into mappings no image holds (foreign_args) */
    wb_s(w, ", \"foreign\": [");
    for (int i = 0; i < cap.nforeign; i++) {
      if (i) wb_s(w, ", ");
      wb_s(w, "{\"arg\": "); wb_i(w, cap.foreign[i].arg);
      wb_s(w, ", \"lo\": "); wb_hex(w, cap.foreign[i].lo);
      wb_s(w, ", \"hi\": "); wb_hex(w, cap.foreign[i].hi);
      wb_s(w, ", \"perms\": "); wb_jstr(w, cap.foreign[i].perms);
      wb_s(w, ", \"name\": "); wb_jstr(w, cap.foreign[i].name);
      wb_s(w, "}");
    }
    wb_s(w, "]");
  }
  wb_s(w, ", \"globals\": [");
  for (int64_t i = 0; k->globals && i < k->nglobals; i++) {
    const struct r3_global *g = &k->globals[i];
    if (i) wb_s(w, ", ");
    wb_s(w, "{\"name\": "); wb_jstr(w, g->name);
    wb_s(w, ", \"addr\": "); wb_hex(w, (uint64_t)(uintptr_t)g->addr);
    wb_s(w, ", \"size\": "); wb_i(w, g->size);
    wb_s(w, "}");
  }
  wb_s(w, "]}\n");
}

/* finish the capture: post-state, meta, rename; 0 on success */
static int capture_end(struct r3_kinfo *k, const void *ret, uint64_t incl) {
  char p[PATHMAX];
  path_t b = {p, 0, sizeof p, 0};
  int err = 0, xfsz = xfsz_ignore();
  collect_left();
  if (cap.pages) {
    trk_end();
    for (int i = 0; i < trk.nreached; i++) add_foreign(k, -1, &trk.reached[i]); /* sys_fault */
    if (trk.failed || trk.ev_overflow) {
      warn("capture of ", k->name, trk.failed ? ": its touched pages are too scattered to track"
                                              : ": it allocates too often to track", "; its next call is captured whole",
           NULL);
      k->flags |= R3_KFLAG_WHOLE_HEAP;
      __atomic_fetch_sub(&k->captured, 1, __ATOMIC_RELAXED); /* this instance did not count */
      err = -1;
    } else if (trk.touched * g_page > cfg.max_bytes) {
      char a[32], c[32];
      warn("capture of ", k->name, " dropped: it touched ", fmt_u64(a + sizeof a, trk.touched * g_page),
           " bytes, more than R3_MAX_CAPTURE_BYTES=", fmt_u64(c + sizeof c, cfg.max_bytes), NULL);
      err = -1;
    } else {
      cap.blocks = trk_blocks_bytes();
      cap.runs = trk_runs();
      collect_stdio();
      for (int i = 0; i < g_nio && trk.nev < MAX_EVENTS; i++, trk.nev++) {
        trk.ev[trk.nev][0] = g_io[i][0];
        trk.ev[trk.nev][1] = g_io[i][1];
      }
      trk_sort_events();
      wbuf_t *w = &cap.pre_w;
      trk_emit(w, 0);
      err = wb_finish(w);
      cap.written += w->total;
      if (close(cap.pre_fd) && !err) err = errno;
      cap.pre_fd = -1;
      pa(&b, cap.tmp); pa(&b, "/post.bin");
      wbuf_t v;
      int fd = err ? -1 : open_image(p, &v, g_wbuf, sizeof g_wbuf);
      if (!err && fd < 0) err = errno;
      if (fd >= 0) {
        wb_put(&v, "R3MEM1\0\0", 8);
        v.total = 8;
        trk_emit(&v, 1);
        if (!v.err) emit_fixed(&v, k, 1);
        err = wb_finish(&v);
        cap.written += v.total;
        if (close(fd) && !err) err = errno;
      }
    }
  } else {
    pa(&b, cap.tmp); pa(&b, "/post.bin");
    collect_stdio();
    err = write_image(p, k, 1);
  }
  if (!err) {
    b.n = 0;
    pa(&b, cap.tmp); pa(&b, "/meta.json");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) err = errno;
    else {
      wbuf_t w = {.fd = fd, .cap = sizeof g_wbuf, .buf = g_wbuf};
      write_meta(&w, k, ret, incl);
      wb_flush(&w);
      err = w.err;
      if (close(fd) && !err) err = errno;
    }
  }
  if (!err && g_budget_used + cap.written > cfg.budget) { /* charged when its size is known */
    char c[32];
    warn("capture of ", k->name, " dropped: capture budget R3_CAPTURE_BUDGET=", fmt_u64(c + sizeof c, cfg.budget),
         " bytes is spent; no further kernels are captured (record fewer with --kernel)", NULL);
    g_budget_warned = 1;
    g_budget_used = cfg.budget;
    err = -2;
  }
  if (!err && rename(cap.tmp, cap.fin)) err = errno;
  xfsz_restore(xfsz);
  if (err) {
    if (err > 0) warn("capture of ", k->name, " failed: ", strerror(err), NULL);
    cleanup_tmp();
    if (err > 0) record_failure(k->name, cap.instance, err, cap.tmp);
  } else {
    __atomic_fetch_add(&g_budget_used, cap.written, __ATOMIC_RELAXED);
    count_call_pages(k);
  }
  if (cap.pages) trk_keep();
  if (cap.scratch) munmap(cap.scratch, cap.scratch_len);
  cap.scratch = NULL;
  cap.nstk = 0;
  cap.nimg = 0;
  cap.nforeign = 0;
  t_cap_depth = -1;
  return err;
}

static uint64_t file_size(const char *dir, const char *name) {
  char p[PATHMAX];
  path_t b = {p, 0, sizeof p, 0};
  pa(&b, dir); pa(&b, "/"); pa(&b, name);
  struct stat st;
  return (!b.ovf && stat(p, &st) == 0) ? (uint64_t)st.st_size : 0;
}

/* capture this call in a snapshot process (see above); returns in the parent once the child
 * is done, and in the child ready to run the kernel */
static void capture_forked(struct r3_kinfo *k, const uint64_t *slots, int depth) {
  uint64_t t0 = now_ns();
  int64_t inst = __atomic_add_fetch(&k->captured, 1, __ATOMIC_RELAXED);
  int main_thread = (pid_t)syscall(SYS_gettid) == getpid();
  omp_int_fn in_parallel = omp_fn(0), max_threads = omp_fn(1);
  /* nested parallel regions are inactive by default: one thread inside a parallel region */
  int64_t threads = (in_parallel && in_parallel()) ? 1 : (max_threads ? max_threads() : 1);
  int errfd = fcntl(g_warn_fd, F_DUPFD_CLOEXEC, 3);
  t_snapshot_fork = 1;
  pid_t pid = fork();
  t_snapshot_fork = 0;
  if (pid == 0) {
    g_child = 1;
    if (__atomic_load_n(&trk.active, __ATOMIC_ACQUIRE)) trk_abandon(); /* the parent's capture, not ours */
    cap.pre_fd = -1;
    cap.threads = threads;
    if (errfd >= 0) g_warn_fd = errfd;
    int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (nul >= 0) { dup2(nul, 1); dup2(nul, 2); close(nul); } /* the application's output: once */
    if (capture_begin(k, slots, depth, inst, main_thread)) _exit(3);
    return;
  }
  if (errfd >= 0) close(errfd);
  if (pid < 0) {
    warn("cannot start a snapshot process to capture ", k->name, ": ", strerror(errno), NULL);
  } else {
    int status = 0, timed_out = 0;
    uint64_t deadline = t0 + cfg.fork_timeout_s * 1000000000ull;
    struct timespec ts = {0, 100000};
    for (;;) {
      pid_t r = waitpid(pid, &status, WNOHANG);
      if (r == pid) break;
      if (r < 0 && errno != EINTR) { status = 0; break; } /* reaped by the application */
      if (now_ns() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        timed_out = 1;
        break;
      }
      nanosleep(&ts, NULL);
      if (ts.tv_nsec < 20000000) ts.tv_nsec *= 2;
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    if (code == 5) {
      g_budget_used = cfg.budget; /* the child found the budget spent, and said so */
    } else if (code == 4) {
      /* the child dropped its capture and said why */
    } else if (timed_out || WIFSIGNALED(status) || code) {
      char dir[PATHMAX], tmp[PATHMAX], fin[PATHMAX];
      path_t t = {tmp, 0, sizeof tmp, 0}, f = {fin, 0, sizeof fin, 0};
      capture_paths(k, inst, pid, dir, &t, &f);
      if (!t.ovf) remove_capture_dir(tmp); /* what the child left half-written */
      char s[32];
      warn("capture of ", k->name, " in a snapshot process failed: ",
           timed_out ? "timed out (R3_CAPTURE_TIMEOUT)" : WIFSIGNALED(status) ? "killed by signal " : "exit status ",
           timed_out ? "" : fmt_u64(s + sizeof s, (uint64_t)(WIFSIGNALED(status) ? WTERMSIG(status)
                                                                                  : WEXITSTATUS(status))), NULL);
    } else {
      char dir[PATHMAX], tmp[PATHMAX], fin[PATHMAX];
      path_t t = {tmp, 0, sizeof tmp, 0}, f = {fin, 0, sizeof fin, 0};
      capture_paths(k, inst, pid, dir, &t, &f);
      if (!f.ovf) __atomic_fetch_add(&g_budget_used, file_size(fin, "pre.bin") + file_size(fin, "post.bin"),
                                     __ATOMIC_RELAXED);
    }
  }
  release_capture(&g_forking);
  pause_add(now_ns() - t0);
}

/* done with captures: no call of k will be captured from now on */
static int capture_done(struct r3_kinfo *k) {
  if (!cfg.have_dir || cfg.capture_none || (k->flags & R3_KFLAG_NO_CAPTURE)) return 1;
  if (enough_calls(k)) return 1;
  return __atomic_load_n(&k->sel, __ATOMIC_RELAXED) == 2;
}

/* tc_slot: see __r3_enter_tc (NULL from __r3_enter) */
static inline void enter(struct r3_kinfo *k, const uint64_t *slots, void **tc_slot) {
  if (__atomic_load_n(&k->registered, __ATOMIC_ACQUIRE) != 2) {
    config_once();
    register_kernel(k);
  }
  struct tcount *tc = tcount_of(k);
  uint64_t n = tc ? tc->calls++ : (uint64_t)__atomic_fetch_add(&k->calls, 1, __ATOMIC_RELAXED);
  if (tc) tc->probed++;
  int d = t_depth;
  if (d >= 0 && d < MAXDEPTH) t_stack[d].k = k;
  __atomic_signal_fence(__ATOMIC_SEQ_CST); /* the profiler's handler never sees a stale top frame */
  t_depth = d + 1;
  if (d == 0 && tc) tc->top_calls++;
  if (d < 0 || d >= MAXDEPTH) return; /* counted, not timed */
  struct frame *f = &t_stack[d];
  f->child = 0;
  if (t_main < 0) t_main = (pid_t)syscall(SYS_gettid) == getpid();
  if (t_main) {
    int32_t parent = d > 0 ? m_node[d - 1] : 0;
    int32_t node = parent >= 0 && k->id >= 0 ? cct_enter(parent, (int32_t)k->id) : -1;
    m_node[d] = k->id >= 0 ? node : parent; /* -1: outside the tree (it was full) */
  }
  if (d > 0 && !(t_stack[d - 1].k->flags & R3_KFLAG_PARENT))
    __atomic_fetch_or(&t_stack[d - 1].k->flags, R3_KFLAG_PARENT, __ATOMIC_RELAXED);
  uint64_t period = tc ? probe_period(tc, n) : 1;
  f->scale = (n & (period - 1)) ? 0 : period;
  int where = want_capture(k);
  if (where != CAP_NONE) {
    uint64_t t0 = now_ns();
    t_pausing++;
    if (!f->scale) f->scale = 1; /* a captured call is always timed */
    if (where == CAP_FORK) {
      capture_forked(k, slots, d);
    } else {
      int64_t inst = __atomic_add_fetch(&k->captured, 1, __ATOMIC_RELAXED);
      if (capture_begin(k, slots, d, inst, 1)) release_capture(&g_capturing);
      pause_add(now_ns() - t0);
    }
    t_pausing--;
  }
  if (tc && tc_slot) {
    *tc_slot = tc;
    tc->block = t_block;
    /* Skipped calls push no frame: a kernel calling others keeps its probes (its children's
     * time would be charged to its caller), and so does one called at the top of the main
     * thread's stack (its calls there are counted as top calls) */
    int top_counted = t_block->main_thread && (d == 0 || tc->top_calls);
    tc->skip_mask = (period > 1 && !top_counted && !(k->flags & R3_KFLAG_PARENT) && capture_done(k))
                        ? period - 1 : 0;
  }
  if (f->scale) {
    f->paused0 = t_paused;
    f->start = now_ns();
  }
}

void __r3_enter(struct r3_kinfo *k, const uint64_t *slots) { enter(k, slots, NULL); }

void __r3_enter_tc(struct r3_kinfo *k, const uint64_t *slots, void **tc_slot) { enter(k, slots, tc_slot); }

void __r3_exit(struct r3_kinfo *k, const void *ret) {
  int d = --t_depth;
  if (d < 0) { t_depth = 0; return; } /* unbalanced exit */
  if (d >= MAXDEPTH) return;
  struct frame *f = &t_stack[d];
  uint64_t incl = 0;
  if (f->scale) {
    uint64_t span = now_ns() - f->start, paused = t_paused - f->paused0 + cfg.clock_ns;
    incl = span > paused ? span - paused : 0;
    uint64_t self = incl > f->child ? incl - f->child : 0, sc = f->scale;
    struct tcount *tc = tcount_of(k);
    if (tc) {
      tc->total_ns += incl * sc;
      tc->self_ns += self * sc;
      if (d == 0) tc->top_ns += incl * sc;
    } else {
      __atomic_fetch_add(&k->total_ns, (int64_t)(incl * sc), __ATOMIC_RELAXED);
      __atomic_fetch_add(&k->self_ns, (int64_t)(self * sc), __ATOMIC_RELAXED);
    }
    if (d > 0) t_stack[d - 1].child += incl * sc;
    if (t_main > 0 && k->id >= 0 && m_node[d] > 0) g_cct[m_node[d]].ns += incl * sc;
  }
  if (t_cap_depth == d) {
    uint64_t t0 = now_ns();
    t_pausing++;
    int err = capture_end(k, ret, incl);
    if (g_child) _exit(err == 0 ? 0 : err == -2 ? 5 : 4); /* the snapshot process is done (see capture_forked) */
    release_capture(&g_capturing);
    pause_add(now_ns() - t0);
    t_pausing--;
  }
}

/* ---- where the main thread's time goes: a statistical profiler ----
 * Timing a short call is biased: its clock readings serialize it, while untimed calls
 * overlap their cache misses with the code around them. XSBench's 0.2 us grid search,
 * timed on one call in 32, came out longer than its caller and than the whole run. So a
 * timer on the main thread's CPU clock interrupts it every R3_SAMPLE_US (default 1000; 0:
 * off) of its CPU time, and each tick counts for the kernel running its own code then (the
 * top frame, or a fast-path leaf), and for the outermost one (the bottom frame, or the
 * leaf if no frame is pushed). capture.load_profiles takes shares of the run from these
 * counts where there are enough of them. */
static timer_t g_prof_timer;
static pid_t g_prof_pid;      /* the process the timer ticks in (a fork's child has none) */
static uint64_t g_prof_ns;    /* the interval */
static uint64_t g_prof_ticks; /* the main thread's ticks, less those taken while pausing */
/* signals that brought them: the kernel checks a CPU-time timer at its scheduler tick, so
 * one signal may carry several ticks (si_overrun), all landing where that one did: the
 * signals, not the ticks, are the independent samples (capture.load_profiles) */
static uint64_t g_prof_events;

static void prof_tick(int sig, siginfo_t *si, void *uc) {
  (void)sig;
  (void)uc;
  uint64_t n = 1 + (si->si_code == SI_TIMER && si->si_overrun > 0 ? (uint64_t)si->si_overrun : 0);
  if (t_pausing) return;
  g_prof_ticks += n;
  g_prof_events++;
  struct tblock *b = t_block;
  if (!b) return;
  struct tcount *tc = b->leaf, *outer = tc;
  int d = t_depth;
  if (d > 0) {
    const struct r3_kinfo *k0 = t_stack[0].k;
    outer = k0 && k0->id >= 0 ? &b->c[k0->id] : NULL;
  }
  if (outer) outer->outer_samples += n;
  if (g_cct && !g_cct_busy && d >= 0 && d <= MAXDEPTH) {
    int32_t node = d > 0 ? m_node[d - 1] : 0;
    if (node >= 0 && tc) { /* a fast-path leaf runs below this frame: its node, if it has one */
      int32_t leaf = cct_child(node, (int32_t)(tc - b->c));
      node = leaf > 0 ? leaf : node;
    }
    if (node >= 0) g_cct[node].samples += n;
  }
  if (!tc) {
    if (d <= 0 || d > MAXDEPTH) return;
    const struct r3_kinfo *k = t_stack[d - 1].k;
    if (!k || k->id < 0) return;
    tc = &b->c[k->id];
  }
  tc->samples += n;
}

static void prof_start(void) {
  const char *s = getenv("R3_SAMPLE_US");
  uint64_t us = 1000;
  if (s && *s && parse_num(s, &us, 0)) {
    warn("bad R3_SAMPLE_US=", s, "; using 1000", NULL);
    us = 1000;
  }
  if (!us || !cfg.have_dir || (pid_t)syscall(SYS_gettid) != getpid()) return;
  struct sigaction sa, old;
  if (sigaction(SIGPROF, NULL, &old) || old.sa_handler != SIG_DFL) return; /* the application's own */
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = prof_tick;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGPROF, &sa, NULL)) return;
  struct sigevent sev;
  memset(&sev, 0, sizeof sev);
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = SIGPROF;
  sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
  struct itimerspec its;
  its.it_interval.tv_sec = (time_t)(us / 1000000);
  its.it_interval.tv_nsec = (long)(us % 1000000) * 1000;
  its.it_value = its.it_interval;
  if (timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &g_prof_timer)) {
    signal(SIGPROF, SIG_DFL);
    return;
  }
  if (timer_settime(g_prof_timer, 0, &its, NULL)) {
    timer_delete(g_prof_timer);
    signal(SIGPROF, SIG_DFL);
    return;
  }
  g_prof_ns = us * 1000;
  g_prof_pid = getpid();
}

/* Stops the ticks: 1 if the counts stand for this process's run (its timer ticked all
 * along, into our handler: the application did not take SIGPROF over) */
static int prof_stop(void) {
  if (!g_prof_pid || g_prof_pid != getpid()) return 0;
  timer_delete(g_prof_timer);
  g_prof_pid = 0;
  struct sigaction cur;
  return sigaction(SIGPROF, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == prof_tick;
}

/* ------------------------------------------------------------------------- */
/* process start / exit                                                       */
/* ------------------------------------------------------------------------- */

/* in the child of a fork: a snapshot process (capture_forked goes on), or a process of the
 * application's, which records nothing (g_forked) and drops what its parent was capturing */
static void atfork_child(void) {
  atfork_release();
  if (t_snapshot_fork) return;
  g_forked = 1;
  if (__atomic_load_n(&trk.active, __ATOMIC_ACQUIRE)) trk_abandon();
  if (cap.pre_fd >= 0) close(cap.pre_fd); /* the parent's: it writes and removes it */
  cap.pre_fd = -1;
  t_cap_depth = -1;
  g_mark_new = 0;
}

__attribute__((constructor(101))) static void r3_init(void) {
  config_once();
  dl_iterate_phdr(rt_text_cb, NULL);
  pthread_atfork(atfork_prepare, atfork_release, atfork_child);
  prof_start();
}

static int g_profile_written;

__attribute__((destructor(101))) static void r3_fini(void) {
  config_once();
  if (g_child || g_forked || !cfg.have_dir || __atomic_exchange_n(&g_profile_written, 1, __ATOMIC_ACQ_REL)) return;
  int sampled = prof_stop();
  uint64_t app_ns = now_ns() - cfg.t_start;
  pid_t pid = getpid();
  char tmp[PATHMAX], fin[PATHMAX], buf[8192];
  path_t t = {tmp, 0, sizeof tmp, 0}, f = {fin, 0, sizeof fin, 0};
  pa(&t, cfg.dir); pa(&t, "/.tmp-profile."); pa_u(&t, (uint64_t)pid); pa(&t, ".json");
  pa(&f, cfg.dir); pa(&f, "/profile."); pa_u(&f, (uint64_t)pid); pa(&f, ".json");
  if (t.ovf || f.ovf) return;
  char dir[PATHMAX];
  memcpy(dir, cfg.dir, r3_strlen(cfg.dir) + 1);
  if (mkdir_p(dir)) { warn("cannot create ", cfg.dir, ": ", strerror(errno), NULL); return; }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) { warn("cannot write ", tmp, ": ", strerror(errno), NULL); return; }
  wbuf_t w = {.fd = fd, .cap = sizeof buf, .buf = buf};
  wb_s(&w, "{\"pid\": "); wb_u(&w, (uint64_t)pid);
  wb_s(&w, ", \"app_ns\": "); wb_u(&w, app_ns);
  wb_s(&w, ", \"paused_ns\": "); wb_u(&w, __atomic_load_n(&g_paused, __ATOMIC_RELAXED));
  wb_s(&w, ", \"arena_peak_bytes\": "); wb_u(&w, __atomic_load_n(&g_live_peak, __ATOMIC_RELAXED));
  wb_s(&w, ", \"arena_used_bytes\": ");
  wb_u(&w, g_base ? __atomic_load_n(&g_pool[POOL_APP].peak, __ATOMIC_RELAXED) - g_base : 0);
  wb_s(&w, ", \"arena_base\": "); wb_hex(&w, g_base);
  wb_s(&w, ", \"sample_ns\": "); wb_u(&w, sampled ? g_prof_ns : 0);
  wb_s(&w, ", \"main_samples\": "); wb_u(&w, sampled ? g_prof_ticks : 0);
  wb_s(&w, ", \"main_sample_events\": "); wb_u(&w, sampled ? g_prof_events : 0);
  wb_s(&w, ", \"kernels\": [");
  int first = 1;
  for (struct r3_kinfo *k = __atomic_load_n(&g_kernels, __ATOMIC_ACQUIRE); k; k = k->next) {
    uint64_t calls = (uint64_t)__atomic_load_n(&k->calls, __ATOMIC_RELAXED);
    uint64_t total = (uint64_t)__atomic_load_n(&k->total_ns, __ATOMIC_RELAXED);
    uint64_t self = (uint64_t)__atomic_load_n(&k->self_ns, __ATOMIC_RELAXED);
    uint64_t main_self = 0, main_top = 0, top_ns = 0, main_top_ns = 0, main_samples = 0, main_outer = 0;
    uint64_t probed = calls;
    int timed_sample = 0;
    if (k->id >= 0)
      for (struct tblock *b = __atomic_load_n(&g_blocks, __ATOMIC_ACQUIRE); b; b = b->next) {
        const struct tcount *c = &b->c[k->id];
        calls += c->calls;
        probed += c->probed;
        total += c->total_ns;
        self += c->self_ns;
        top_ns += c->top_ns;
        if (b->main_thread) {
          main_self += c->self_ns;
          main_top += c->top_calls;
          main_top_ns += c->top_ns;
          main_samples += c->samples;
          main_outer += c->outer_samples;
        }
        timed_sample |= c->period > 1;
      }
    if (!first) wb_s(&w, ",");
    first = 0;
    wb_s(&w, "\n  {\"name\": "); wb_jstr(&w, k->name);
    wb_s(&w, ", \"id\": "); wb_i(&w, k->id);
    wb_s(&w, ", \"tu_dir\": "); wb_jstr(&w, k->tu_dir);
    wb_s(&w, ", \"calls\": "); wb_u(&w, calls);
    wb_s(&w, ", \"probed_calls\": "); wb_u(&w, probed);
    wb_s(&w, ", \"total_ns\": "); wb_u(&w, total);
    wb_s(&w, ", \"self_ns\": "); wb_u(&w, self);
    wb_s(&w, ", \"main_self_ns\": "); wb_u(&w, main_self);
    wb_s(&w, ", \"main_top_calls\": "); wb_u(&w, main_top);
    wb_s(&w, ", \"top_ns\": "); wb_u(&w, top_ns);
    wb_s(&w, ", \"main_top_ns\": "); wb_u(&w, main_top_ns);
    wb_s(&w, ", \"main_samples\": "); wb_u(&w, sampled ? main_samples : 0);
    wb_s(&w, ", \"main_outer_samples\": "); wb_u(&w, sampled ? main_outer : 0);
    wb_s(&w, ", \"sampled\": "); wb_s(&w, timed_sample ? "true" : "false");
    wb_s(&w, ", \"captured\": "); wb_i(&w, __atomic_load_n(&k->captured, __ATOMIC_RELAXED));
    wb_s(&w, "}");
  }
  wb_s(&w, "],\n \"cct_complete\": "); wb_s(&w, g_cct_full ? "false" : "true");
  wb_s(&w, ",\n \"cct\": ["); /* by node (0: the root): [parent, kernel id, ns, samples] */
  for (int32_t i = 0; i < g_cct_n; i++) {
    if (i) wb_s(&w, ",");
    wb_s(&w, "["); wb_i(&w, g_cct[i].parent); wb_s(&w, ","); wb_i(&w, g_cct[i].kid);
    wb_s(&w, ","); wb_u(&w, g_cct[i].ns); wb_s(&w, ","); wb_u(&w, sampled ? g_cct[i].samples : 0); wb_s(&w, "]");
  }
  wb_s(&w, "]}\n");
  int xfsz = xfsz_ignore();
  wb_flush(&w);
  xfsz_restore(xfsz);
  int err = w.err;
  if (close(fd) && !err) err = errno;
  if (!err && rename(tmp, fin)) err = errno;
  if (err) {
    warn("cannot write ", fin, ": ", strerror(err), NULL);
    unlink(tmp);
    record_failure(NULL, 0, err, fin);
  }
}

/* ------------------------------------------------------------------------- */
/* the application's mappings                                                  */
/* ------------------------------------------------------------------------- */
/* Memory a program maps itself (large buffers, custom allocators, an input file mapped
 * whole) is application data as much as its heap, and a capture holds the arena: a kernel
 * on an mmap'ed array recorded without it crashed in replay. So mmap serves private
 * anonymous read-write mappings, and mappings of regular files that nothing writes back
 * (private, or shared read-only: their contents, read in), from the application's pool,
 * where page tracking and whole-heap images hold them and replay maps them where they
 * were. Shared anonymous or writable shared mappings (memory shared with another process, a
 * file written through memory), fixed addresses, stacks, huge pages, other protections and
 * the runtimes' own maps go to the system; a captured kernel given a pointer into one is
 * marked unreplayable (foreign_args). munmap and mremap follow. */
#undef mmap
#undef munmap
#undef mremap

#define MMAP_COPY_MAX (4ull << 30) /* a larger file is mapped by the system, not read in */

/* a mapping served from the arena: [lo, hi) still mapped, of the block at `block` (its user
 * pointer) whose bytes end at `end` */
struct amap { uintptr_t lo, hi, block, end; };
static struct amap *g_maps; /* sorted by lo; a scratch map, grown as needed */
static size_t g_nmaps, g_maps_cap;

static size_t maps_find(uintptr_t a) { /* the first map with hi > a (lock held) */
  size_t l = 0, r = g_nmaps;
  while (l < r) {
    size_t m = (l + r) / 2;
    if (g_maps[m].hi <= a) l = m + 1;
    else r = m;
  }
  return l;
}

static int maps_add(uintptr_t lo, uintptr_t hi, uintptr_t end) {
  maps_lock();
  if (g_nmaps == g_maps_cap) {
    size_t n = g_maps_cap ? 2 * g_maps_cap : 256;
    void *m = g_maps ? sys_mremap(g_maps, g_maps_cap * sizeof *g_maps, n * sizeof *g_maps, MREMAP_MAYMOVE, NULL)
                     : map_scratch(n * sizeof *g_maps);
    if (!m || m == MAP_FAILED) { maps_unlock(); return -1; }
    g_maps = m;
    g_maps_cap = n;
  }
  size_t i = maps_find(lo);
  memmove(g_maps + i + 1, g_maps + i, (g_nmaps - i) * sizeof *g_maps);
  g_maps[i] = (struct amap){lo, hi, lo, end};
  g_nmaps++;
  maps_unlock();
  return 0;
}

static int served(int prot, int flags, int fd) {
  if (flags & (MAP_FIXED | MAP_FIXED_NOREPLACE | MAP_GROWSDOWN | MAP_STACK | MAP_HUGETLB | MAP_32BIT)) return 0;
  int type = flags & MAP_TYPE;
  /* private anonymous: also reserved (PROT_NONE) for a custom allocator to open later; the
   * arena's pages are open already (a correct program never sees the difference) */
  if (flags & MAP_ANONYMOUS) return type == MAP_PRIVATE && !(prot & ~(PROT_READ | PROT_WRITE));
  if (fd < 0) return 0;
  if (type == MAP_PRIVATE) return prot == PROT_READ || prot == (PROT_READ | PROT_WRITE);
  return type == MAP_SHARED && prot == PROT_READ;
}

/* an arena block of len bytes (a multiple of the page), page-aligned, zeros or fd's contents
 * from off; NULL: let the system map it */
static void *arena_map(size_t len, int fd, off_t off) {
  struct stat st;
  if (fd >= 0 && (fstat(fd, &st) || !S_ISREG(st.st_mode) || off < 0 || (off & (off_t)(g_page - 1)) ||
                  len > MMAP_COPY_MAX))
    return NULL;
  int saved = errno, zero = 0;
  char *p = heap_memalign_z(g_page, len, 0, &zero);
  if (!p) { errno = saved; return NULL; }
  size_t got = 0;
  if (fd >= 0) {
    /* the system writes no protected page (EFAULT): open them first in a tracked capture */
    if (__atomic_load_n(&trk.active, __ATOMIC_ACQUIRE))
      for (size_t i = 0; i < len; i += g_page) ((volatile char *)p)[i] = 0;
    while (got < len) {
      ssize_t r = pread(fd, p + got, len - got, off + (off_t)got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) { heap_free(p); errno = saved; return NULL; } /* the system says why */
      if (r == 0) break; /* past the end of the file: zeros */
      got += (size_t)r;
    }
  }
  if (!zero && got < len) memset(p + got, 0, len - got);
  if (maps_add((uintptr_t)p, (uintptr_t)p + len, (uintptr_t)p + usable_size(p))) { heap_free(p); errno = saved; return NULL; }
  errno = saved;
  return p;
}

static void *app_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off, unsigned own) {
  if (len && len <= (1ull << 46) && served(prot, flags, fd) && !own) {
    void *p = arena_map((len + g_page - 1) & ~(size_t)(g_page - 1), (flags & MAP_ANONYMOUS) ? -1 : fd, off);
    if (p) return p;
  }
  void *p = sys_mmap(addr, len, prot, flags, fd, off);
  if (p != MAP_FAILED && !own)
    sys_add((uintptr_t)p, ((uintptr_t)p + len + g_page - 1) & ~(uintptr_t)(g_page - 1), prot, flags);
  return p;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  return app_mmap(addr, len, prot, flags, fd, off, CALLER_OWNER());
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  return app_mmap(addr, len, prot, flags, fd, off, CALLER_OWNER());
}

int munmap(void *addr, size_t len) {
  uintptr_t a = (uintptr_t)addr;
  if (!g_base || a < g_base || a >= g_end) {
    int r = sys_munmap(addr, len);
    if (!r) sys_remove(a, (a + len + g_page - 1) & ~(uintptr_t)(g_page - 1));
    return r;
  }
  if ((a & (g_page - 1)) || !len) { errno = EINVAL; return -1; }
  uintptr_t b = a + ((len + g_page - 1) & ~(uintptr_t)(g_page - 1));
  for (;;) { /* the blocks whose every page is unmapped now are freed, one at a time */
    uintptr_t gone = 0;
    maps_lock();
    for (size_t i = maps_find(a); i < g_nmaps && g_maps[i].lo < b; i++) {
      struct amap *m = &g_maps[i];
      if (a <= m->lo && b >= m->hi) {
        gone = m->block;
        memmove(m, m + 1, (g_nmaps - i - 1) * sizeof *m);
        g_nmaps--;
        break;
      }
      if (a <= m->lo) m->lo = b; /* the head: unmapped pages stay, unused */
      else if (b >= m->hi) m->hi = a; /* the tail */
      /* a hole in the middle: the block stays whole until the rest is unmapped */
    }
    maps_unlock();
    if (!gone) return 0; /* never fails on arena memory: what is not a mapping stays as it is */
    heap_free((void *)gone);
  }
}

void *mremap(void *old, size_t old_size, size_t new_size, int flags, ...) {
  uintptr_t a = (uintptr_t)old;
  if (!g_base || a < g_base || a >= g_end) {
    void *to = NULL;
    if (flags & MREMAP_FIXED) {
      va_list ap;
      va_start(ap, flags);
      to = va_arg(ap, void *);
      va_end(ap);
    }
    int prot = 0, shared = 0;
    maps_lock();
    for (int i = 0; i < g_nsys; i++)
      if (g_sys[i].lo == a) { prot = g_sys[i].prot; shared = g_sys[i].shared; }
    maps_unlock();
    void *p = sys_mremap(old, old_size, new_size, flags, to);
    if (p != MAP_FAILED && prot) {
      sys_remove(a, a + old_size);
      sys_add((uintptr_t)p, ((uintptr_t)p + new_size + g_page - 1) & ~(uintptr_t)(g_page - 1), prot,
              shared ? MAP_SHARED : MAP_PRIVATE);
    }
    return p;
  }
  (void)old_size; /* the map says how much is mapped */
  if ((flags & ~MREMAP_MAYMOVE) || !new_size || new_size > (1ull << 46) || (a & (g_page - 1))) {
    errno = EINVAL;
    return MAP_FAILED;
  }
  uintptr_t want = (new_size + g_page - 1) & ~(uintptr_t)(g_page - 1), cur = 0;
  maps_lock();
  size_t i = maps_find(a);
  if (i == g_nmaps || g_maps[i].lo != a) { maps_unlock(); errno = EFAULT; return MAP_FAILED; }
  struct amap *m = &g_maps[i];
  if (a + want <= m->end) { /* within its block: shrink, or grow into bytes it already has */
    uintptr_t from = m->hi;
    m->hi = a + want;
    maps_unlock(); /* before the memset: a tracked page faults, and the handler takes trk.lock */
    if (a + want > from) memset((void *)from, 0, a + want - from);
    return old;
  }
  cur = m->hi - a;
  maps_unlock();
  if (!(flags & MREMAP_MAYMOVE)) { errno = ENOMEM; return MAP_FAILED; }
  void *q = arena_map(want, -1, 0);
  if (!q) { errno = ENOMEM; return MAP_FAILED; }
  memcpy(q, old, cur);
  munmap(old, cur);
  return q;
}
