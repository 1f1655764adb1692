/* spack-r3 record runtime: what its files share (r3rt.c has the overview).
 *
 * The runtime is one object (runtime.py links its files into r3rt.o and keeps only the ABI of
 * r3rt.h and the libc functions it defines global): what one file uses of another is
 * declared here, HIDDEN. */
#ifndef R3RT_INTERNAL_H
#define R3RT_INTERNAL_H

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

/* The runtime defines mmap, munmap and mremap for the application (see "the application's
 * mappings", mappings.c); its own maps go straight to the system. */
static inline void *sys_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off) {
  return (void *)syscall(SYS_mmap, a, n, prot, flags, fd, off);
}
static inline int sys_munmap(void *a, size_t n) { return (int)syscall(SYS_munmap, a, n); }
static inline void *sys_mremap(void *a, size_t n, size_t m, int flags, void *to) {
  return (void *)syscall(SYS_mremap, a, n, m, flags, to);
}
#define mmap sys_mmap
#define munmap sys_munmap
#define mremap(a, n, m, flags) sys_mremap(a, n, m, flags, NULL)

#define TLS __thread __attribute__((tls_model("initial-exec")))
#define UNUSED __attribute__((unused))
/* what was static to the one file the runtime was: visible to its files, not outside the object */
#define HIDDEN __attribute__((visibility("hidden")))

extern char **environ;
extern int omp_in_parallel(void) __attribute__((weak));
extern int omp_get_max_threads(void) __attribute__((weak));

typedef int (*omp_int_fn)(void);

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* ---- the arena heap (arena.c) ---- */
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

static inline int is_state(const chunk_t *c, unsigned st) {
  return (c->tag & TAG_MAGIC_MASK) == TAG_MAGIC && (c->tag & ST_MASK) == st;
}

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

#define CALLER_OWNER() owner_of(__builtin_return_address(0))
#define MAX_NEW 4096

/* ---- buffered output, paths (output.c) ---- */
typedef struct {
  int fd, err;
  size_t n, cap;
  char *buf;
  uint64_t total; /* bytes of image records emitted (emit_region) */
  int direct;     /* fd is O_DIRECT: only whole DIO_ALIGN blocks are written until wb_finish */
  uint64_t size;  /* bytes put: the file's size once finished */
} wbuf_t;

#define DIO_BUF (4u << 20)

/* path builder */
typedef struct { char *p; size_t n, cap; int ovf; } path_t;

/* ---- configuration (config.c) ---- */
#define PATHMAX 4096
#define MAXK 4096 /* kernels with counters of their own (and R3_INSTANCE_BYTES counts) */

struct kcalls {
  uint64_t union_bytes;  /* pages touched by the captured calls together */
  uint64_t blocks_bytes; /* the blocks holding the last captured call's pages */
  unsigned char *seen;   /* a bit a page of the application pool (shared map) */
};

struct config {
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
};

/* ---- probes (probes.c) ---- */
#define MAXDEPTH 256

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
  uint64_t call;    /* its index among this thread's calls of k (calls.c logs the main thread's) */
  uint64_t args[4]; /* its first argument slots, kept only for the call log (R3_CALL_LOG) */
};

struct cct_node { int32_t parent, kid, first_child, next_sibling; uint64_t ns, samples; };

/* ---- captures (capture.c) ---- */
struct capture {
  struct r3_kinfo *k;
  int64_t instance;
  uint64_t call;        /* its index among the calling thread's calls of k (calls.c) */
  int64_t pick;         /* the picked call it stands for (R3_CAPTURE_CALLS), or -1 */
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
};

/* ---- touched pages, the mappings the system serves (pages.c) ---- */
/* a line of /proc/self/maps: [lo, hi), "rw-p", and what is mapped ("" anonymous, a file's
 * path, "[stack]") */
struct mapent { uintptr_t lo, hi; char perms[5]; char name[256]; };

#define MAXSYS 64

struct sysmap { uintptr_t lo, hi; int prot, shared, closed; };

#define MAX_EVENTS (1 << 16)

struct tracker {
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
};

enum { CAP_NONE, CAP_HERE, CAP_FORK };

/* util.c (small helpers: messages, numbers, environment) */
HIDDEN omp_int_fn omp_fn(int max_threads);
HIDDEN size_t r3_strlen(const char *s);
extern HIDDEN int g_warn_fd;
HIDDEN void warn(const char *first, ...);
HIDDEN char *fmt_u64(char *end, uint64_t v);
HIDDEN char *fmt_hex(char *end, uint64_t v);
HIDDEN const char *err_text(int err, char *b, size_t cap);
HIDDEN int parse_num(const char *s, uint64_t *out, int hex_default);
HIDDEN const char *r3_getenv(const char *name);
HIDDEN uint64_t now_ns(void);

/* arena.c (arena heap) */
extern HIDDEN struct pool g_pool[2];
extern HIDDEN uintptr_t g_base, g_end;
extern HIDDEN uint64_t g_live, g_live_peak;
extern HIDDEN uint64_t g_page;
HIDDEN void heap_lock(void);
HIDDEN void heap_unlock(void);
HIDDEN int rt_text_cb(struct dl_phdr_info *info, size_t sz, void *data);
HIDDEN unsigned owner_of(const void *pc);
HIDDEN void sort_records(uintptr_t *a, size_t n, size_t stride);
extern HIDDEN uintptr_t g_new[MAX_NEW];
extern HIDDEN size_t g_nnew;
extern HIDDEN int g_new_overflow, g_mark_new;
extern HIDDEN uintptr_t (*g_left)[2];
extern HIDDEN uint64_t g_left_cap, g_nleft, g_left_blocks, g_left_bytes;
extern HIDDEN int g_left_short;
HIDDEN void heap_free(void *p);
HIDDEN void *heap_memalign_z(size_t align, size_t n, unsigned own, int *zero);
HIDDEN size_t usable_size(void *p);
HIDDEN void atfork_prepare(void);
HIDDEN void atfork_release(void);

/* output.c (buffered output to a file descriptor, paths) */
HIDDEN void wb_flush(wbuf_t *w);
/* a JSON file written through w into tmp: flushed, closed, renamed to fin; a failure warned and recorded */
HIDDEN void wb_commit(wbuf_t *w, const char *tmp, const char *fin);
HIDDEN void wb_put(wbuf_t *w, const void *p, size_t n);
HIDDEN int wb_finish(wbuf_t *w);
HIDDEN void wb_s(wbuf_t *w, const char *s);
HIDDEN void wb_u(wbuf_t *w, uint64_t v);
HIDDEN void wb_i(wbuf_t *w, int64_t v);
HIDDEN void wb_hex(wbuf_t *w, uint64_t v);
HIDDEN void wb_hexbytes(wbuf_t *w, const void *p, size_t n);
HIDDEN void wb_jstr(wbuf_t *w, const char *s);
HIDDEN void pa(path_t *b, const char *s);
HIDDEN void pa_u(path_t *b, uint64_t v);
HIDDEN int mkdir_p(char *path);

/* config.c (configuration) */
extern HIDDEN struct kcalls *g_kcalls;
HIDDEN void *map_shared(size_t len);
extern HIDDEN struct config cfg;
HIDDEN void config_once(void);
HIDDEN int selected(const char *name);

/* probes.c (probes: counters, calling-context tree) */
extern HIDDEN TLS struct frame t_stack[MAXDEPTH];
extern HIDDEN TLS int t_depth;
extern HIDDEN uint64_t g_paused;
HIDDEN void pause_add(uint64_t ns);
extern HIDDEN TLS int t_cap_depth;
extern HIDDEN TLS int t_pausing;
extern HIDDEN TLS struct tblock *t_block;
extern HIDDEN struct r3_kinfo *g_kernels;
extern HIDDEN struct tblock *g_blocks;
extern HIDDEN struct cct_node *g_cct;
extern HIDDEN int32_t g_cct_n;
extern HIDDEN int g_cct_full;
extern HIDDEN volatile int g_cct_busy;
extern HIDDEN int32_t m_node[MAXDEPTH];
HIDDEN int32_t cct_child(int32_t parent, int32_t kid);

/* capture.c (captures) */
extern HIDDEN int g_capturing;
extern HIDDEN int g_child;
extern HIDDEN TLS int t_snapshot_fork;
extern HIDDEN int g_forked;
extern HIDDEN struct capture cap;
HIDDEN void emit_header(wbuf_t *w, uint64_t addr, uint64_t size, uint64_t kind);
HIDDEN void emit_region(wbuf_t *w, uint64_t addr, uint64_t size, uint64_t kind, const void *data);
HIDDEN int chunk_bad(const struct pool *pl, uintptr_t h, uint64_t sz);
HIDDEN int xfsz_ignore(void);
HIDDEN void xfsz_restore(int ignored);
HIDDEN void record_failure(const char *name, int64_t inst, int err, const char *where);
HIDDEN void release_capture(int *flag);
HIDDEN int want_capture(struct r3_kinfo *k);
HIDDEN int capture_begin(struct r3_kinfo *k, const uint64_t *slots, int depth, int64_t inst, int main_thread);
HIDDEN int capture_end(struct r3_kinfo *k, const void *ret, uint64_t incl);
HIDDEN void capture_forked(struct r3_kinfo *k, const uint64_t *slots, int depth);
HIDDEN int capture_done(struct r3_kinfo *k);

/* pages.c (touched pages, the mappings the system serves) */
extern HIDDEN struct sysmap g_sys[MAXSYS];
extern HIDDEN int g_nsys;
HIDDEN void maps_lock(void);
HIDDEN void maps_unlock(void);
HIDDEN void maps_lock_for_fork(int take);
HIDDEN void sys_add(uintptr_t lo, uintptr_t hi, int prot, int flags);
HIDDEN void sys_remove(uintptr_t a, uintptr_t b);
extern HIDDEN struct tracker trk;
HIDDEN void trk_lock_for_fork(int take);
HIDDEN void heap_event(uintptr_t lo, uintptr_t hi); /* allocator writes inside a page-tracked capture */
HIDDEN void sys_privatize(struct sysmap *m);
HIDDEN void *map_scratch(size_t len);
HIDDEN void trk_keep(void);
HIDDEN int trk_begin(void);
HIDDEN void trk_end(void);
HIDDEN void trk_abandon(void);
HIDDEN void trk_sort_events(void);
HIDDEN uint64_t trk_blocks_bytes(void);
HIDDEN uint64_t trk_runs(void);
HIDDEN void trk_emit(wbuf_t *w, int post);

/* regions.c (regions beside the heap: stack, loaded objects' data, foreign mappings) */
HIDDEN int64_t nargs_of(const struct r3_kinfo *k);
HIDDEN int mapping_of(uintptr_t a, struct mapent *out);
HIDDEN int stack_region(struct r3_kinfo *k, const uint64_t *slots, int main_thread);
HIDDEN int image_regions(struct r3_kinfo *k, const uint64_t *slots);
HIDDEN void add_foreign(struct r3_kinfo *k, int64_t arg, const struct mapent *e);
HIDDEN void foreign_args(struct r3_kinfo *k, const uint64_t *slots);

/* calls.c (which calls carry a kernel's time: the call log, the calls named to capture) */
extern HIDDEN TLS uint64_t t_call;
extern HIDDEN TLS int t_call_main;
HIDDEN int calllog_on(void);
HIDDEN void calllog_add(struct r3_kinfo *k, uint64_t call, uint64_t ns, const uint64_t *args);
HIDDEN void calllog_write(void);
HIDDEN int calllog_pick(struct r3_kinfo *k, uint64_t call, int main);
extern HIDDEN TLS uint64_t t_pick;
HIDDEN void calllog_taken(struct r3_kinfo *k, uint64_t pick);
HIDDEN int calllog_picks_done(struct r3_kinfo *k);

/* profiler.c (the statistical profiler) */
extern HIDDEN uint64_t g_prof_ns;
extern HIDDEN uint64_t g_prof_ticks;
extern HIDDEN uint64_t g_prof_events;
HIDDEN void prof_start(void);
HIDDEN int prof_stop(void);

#endif /* R3RT_INTERNAL_H */
