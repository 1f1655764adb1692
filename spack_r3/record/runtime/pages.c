#include "r3rt_internal.h"

/* ---- touched pages ----
 * A page-tracked capture protects the application pool's pages (PROT_NONE) when the kernel
 * is called; the first access to a page faults, the handler copies the page as it was (its
 * pre-state) and opens it. At exit, pre.bin gets those copies and post.bin the same pages
 * as they are, less the byte ranges the allocator rewrote during the call (chunks the kernel
 * allocated or freed: replay allocates elsewhere and ignores frees of recorded memory).
 * A page with nothing behind it yet (fresh calloc'ed memory: never written) is not copied:
 * reading it would map the kernel's shared zero page, and the kernel's first write would
 * then copy it and shoot down every thread's TLB (xs-proxy's large results array: a
 * sizeable share of the run). Such pages are marked TRK_ZERO and recorded as zeros. */

/* ---- the application's mappings the system serves ----
 * (see "the application's mappings", mappings.c): shared memory, fixed addresses and the
 * like, which no image holds. A page-tracked capture closes them too, so that a kernel that
 * reaches one (through a pointer in its data, where foreign_args does not look) is found at
 * its first access: the mapping is opened again and named in meta.json, and ingest marks the
 * capture unreplayable. In a snapshot process a shared mapping is first replaced by a
 * private copy: the kernel's writes there must not reach the memory the application shares
 * (its parent then makes the same call). */

HIDDEN struct sysmap g_sys[MAXSYS];
HIDDEN int g_nsys;
/* the lock of g_sys and of the arena's mappings (g_maps): taken after the heap lock and
 * trk.lock where they are held too, never the other way round */
static char g_maps_lock;
HIDDEN void maps_lock(void) { while (__atomic_test_and_set(&g_maps_lock, __ATOMIC_ACQUIRE)) cpu_relax(); }
HIDDEN void maps_unlock(void) { __atomic_clear(&g_maps_lock, __ATOMIC_RELEASE); }
HIDDEN void maps_lock_for_fork(int take) { if (take) maps_lock(); else maps_unlock(); }

HIDDEN void sys_add(uintptr_t lo, uintptr_t hi, int prot, int flags) {
  if (!prot || (prot & PROT_EXEC) || (flags & (MAP_STACK | MAP_GROWSDOWN))) return; /* never a kernel's data */
  maps_lock();
  if (g_nsys < MAXSYS) g_sys[g_nsys++] = (struct sysmap){lo, hi, prot, (flags & MAP_TYPE) != MAP_PRIVATE, 0};
  maps_unlock();
}

HIDDEN void sys_remove(uintptr_t a, uintptr_t b) { /* [a, b) unmapped: what is left of each */
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

HIDDEN struct tracker trk = {.pagemap = -1};

#define TRK_COPIED 1 /* pre-state in the mirror */
#define TRK_ZERO 2   /* no page behind it before the call: zeros, not copied */

HIDDEN void trk_lock_for_fork(int take) {
  if (take) while (__atomic_test_and_set(&trk.lock, __ATOMIC_ACQUIRE)) cpu_relax();
  else __atomic_clear(&trk.lock, __ATOMIC_RELEASE);
}

HIDDEN void heap_event(uintptr_t lo, uintptr_t hi) { /* heap lock held */
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
HIDDEN void sys_privatize(struct sysmap *m) {
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

HIDDEN void *map_scratch(size_t len) {
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
 * (LULESH: many captures, each copying many pages). A mirror larger than SCRATCH_KEEP is
 * given back. */
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
HIDDEN void trk_keep(void) {
  if (trk.touched * g_page > SCRATCH_KEEP) trk_free();
}

HIDDEN int trk_begin(void) {
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

HIDDEN void trk_end(void) {
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
HIDDEN void trk_abandon(void) {
  if (trk.hi > trk.lo) mprotect((void *)trk.lo, trk.hi - trk.lo, PROT_READ | PROT_WRITE);
  sys_close_all(0); /* the lock: released by the fork handlers, or held by nobody else here */
  __atomic_store_n(&trk.active, 0, __ATOMIC_RELEASE);
  sigaction(SIGSEGV, &trk.old, NULL);
  trk_free();
}

/* the allocator's ranges, sorted and merged */
HIDDEN void trk_sort_events(void) {
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
HIDDEN uint64_t trk_blocks_bytes(void) {
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
HIDDEN uint64_t trk_runs(void) {
  size_t npages = (trk.hi - trk.lo) / g_page;
  uint64_t runs = 0;
  for (size_t i = 0; i < npages; i++)
    if (trk.bits[i] && (i == 0 || !trk.bits[i - 1])) runs++;
  return runs;
}

/* touched pages as runs: pre (from the copies) or post (live, less the allocator's ranges) */
HIDDEN void trk_emit(wbuf_t *w, int post) {
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
