#include "r3rt_internal.h"

/* ------------------------------------------------------------------------- */
/* arena heap                                                                 */
/* ------------------------------------------------------------------------- */



#define SMALL_MAX (256u * 1024u)      /* requests up to this use exact class sizes */
#define SPLIT_MIN (256u * 1024u)      /* split large free chunks leaving at least this */
#define MADV_MIN (128u * 1024u)       /* give pages back when freeing chunks this large ... */
#define MADV_KEEP_MAX (32u << 20)     /* ... or, once one was freed, only those larger than it */
#define LARGE_SCAN 64

HIDDEN struct pool g_pool[2];

static char g_lock;
HIDDEN uintptr_t g_base, g_end; /* the whole arena mapping */
HIDDEN uint64_t g_live, g_live_peak;
HIDDEN uint64_t g_page = 4096;

static inline struct pool *pool_of_addr(uintptr_t u) {
  return u >= g_pool[POOL_RT].base ? &g_pool[POOL_RT] : &g_pool[POOL_APP];
}

HIDDEN void heap_lock(void) {
  unsigned spins = 0;
  while (__atomic_test_and_set(&g_lock, __ATOMIC_ACQUIRE)) {
    while (__atomic_load_n(&g_lock, __ATOMIC_RELAXED)) {
      if (++spins >= 64) { sched_yield(); spins = 0; }
      else cpu_relax();
    }
  }
}
HIDDEN void heap_unlock(void) { __atomic_clear(&g_lock, __ATOMIC_RELEASE); }

/* Chunks the OpenMP runtime allocates (team and barrier state) change whenever a parallel
 * region runs, whatever the kernel computes: images tag them kind 3 so replay restores them
 * but does not compare them. The owner is the allocation's caller: a PC in the text of a
 * loaded libomp / libgomp / libiomp5 (found at startup). */
#define MAXRT 8
static uintptr_t g_rt_lo[MAXRT], g_rt_hi[MAXRT];
static int g_nrt;

HIDDEN int rt_text_cb(struct dl_phdr_info *info, size_t sz, void *data) {
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

HIDDEN unsigned owner_of(const void *pc) {
  int n = __atomic_load_n(&g_nrt, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++)
    if ((uintptr_t)pc - g_rt_lo[i] < g_rt_hi[i] - g_rt_lo[i]) return F_RT;
  return 0;
}

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
HIDDEN void sort_records(uintptr_t *a, size_t n, size_t stride) {
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
 * are one range), and ingest (record/ingest.py) marks the capture unreplayable when the caller's
 * memory holds pointers into them. Each such block is also tagged F_NEW, so that a call
 * allocating more blocks than the list holds is found by walking the heap instead. */
HIDDEN uintptr_t g_new[MAX_NEW];
HIDDEN size_t g_nnew;
HIDDEN int g_new_overflow, g_mark_new;
HIDDEN uintptr_t (*g_left)[2]; /* [lo, hi) ranges, mmap'ed and grown as needed */
HIDDEN uint64_t g_left_cap, g_nleft, g_left_blocks, g_left_bytes;
HIDDEN int g_left_short; /* the ranges could not all be kept (no memory): a partial list */

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

HIDDEN void heap_free(void *p) {
  if (!p) return;
  heap_lock();
  chunk_t *c = live_chunk(p);
  if (!c) { heap_unlock(); return; } /* outside the arena, double free, or foreign: ignore */
  heap_event((uintptr_t)c, (uintptr_t)c + c->size);
  c->tag = TAG_MAGIC | ST_FREE;
  g_live -= c->size - HDR;
  if (c->size >= g_madv_min) {
    /* glibc's dynamic mmap threshold: a block of this size, once freed, is reused, not
     * faulted in again (LULESH frees and allocates its MB-sized temporaries every step:
     * without this, far more page faults than under glibc) */
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
HIDDEN void *heap_memalign_z(size_t align, size_t n, unsigned own, int *zero) {
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

HIDDEN size_t usable_size(void *p) {
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

HIDDEN void atfork_prepare(void) { heap_lock(); trk_lock_for_fork(1); maps_lock_for_fork(1); }
HIDDEN void atfork_release(void) { maps_lock_for_fork(0); trk_lock_for_fork(0); heap_unlock(); }
