#include "r3rt_internal.h"

/* ------------------------------------------------------------------------- */
/* probes                                                                      */
/* ------------------------------------------------------------------------- */
/* A probe writes no shared cache line: calls and times go to counters of the calling thread
 * (one block per thread, found again at exit through a global list). A kernel called often
 * and briefly is timed on a sample of its calls: after SAMPLE_AFTER calls on a thread, one
 * whose calls took under SAMPLE_SHORT_NS on average is timed once every SAMPLE_PERIOD calls,
 * and that call's time counts SAMPLE_PERIOD times (R3_PROBE_SAMPLING=0 times every call). */

#define SAMPLE_AFTER 1024
#define SAMPLE_SHORT_NS 5000
#define SAMPLE_PERIOD 32

/* top_calls: calls with no recorded kernel below them on the thread's stack (replay.cachestate
   counts what those touch as what runs between another kernel's calls) */


HIDDEN TLS struct frame t_stack[MAXDEPTH];
HIDDEN TLS int t_depth;
HIDDEN TLS uint64_t t_call;  /* the call being entered: its index among this thread's calls of its kernel */
HIDDEN TLS int t_call_main;  /* ... and whether this is the main thread */
static TLS uint64_t t_paused;    /* ns this thread spent taking snapshots */
HIDDEN uint64_t g_paused;        /* ns the main thread spent taking snapshots: not the application's time */

static TLS int t_main = -1; /* this thread is the process's main thread: 1, 0, -1 not known yet */
/* Time a thread spent on a snapshot or a page copy. Summed over threads it exceeds the
 * wall-clock time it cost the run: the page faults of a capture in progress are taken by
 * every thread of the kernel's team at once, each waiting on the others' copies, and a
 * worker's captures overlap the main thread's own work (XSBench's event loop with
 * --instances auto: nearly the whole run counted "paused" while the main thread ran
 * outside snapshots, and every share read 100%). The main thread, which takes part in
 * every parallel region and waits at its end for the workers' pauses, stands for the
 * run's clock. */
HIDDEN void pause_add(uint64_t ns) {
  t_paused += ns;
  if (t_main < 0) t_main = (pid_t)syscall(SYS_gettid) == getpid();
  if (t_main) __atomic_fetch_add(&g_paused, ns, __ATOMIC_RELAXED);
}
HIDDEN TLS int t_cap_depth = -1; /* frame index of the capture in progress, -1 none */
HIDDEN TLS int t_pausing;        /* taking a snapshot or a page copy: profiler ticks are not the app's */
HIDDEN TLS struct tblock *t_block;
static TLS int t_block_failed;

HIDDEN struct r3_kinfo *g_kernels;
HIDDEN struct tblock *g_blocks;
static int64_t g_nkernels;

/* ---- the globals a kernel reaches through other units (record/reach.py) ----
 * The executable's link adds a table naming, per kernel, the globals its callees in other
 * units touch, which its own unit cannot see; its constructor hands it here. A kernel
 * registering takes them into its own list (k->globals: captured, compared and replayed
 * at their addresses alike). A null address: a weak reference the link left unresolved. */
struct r3_extra { const char *kernel, *tu_dir, *name; void *addr; int64_t size; };
static const struct r3_extra *g_extra;
static int64_t g_nextra;

void __r3_extra_globals(const struct r3_extra *table, int64_t n) {
  g_extra = table;
  g_nextra = n;
}

static int extra_of(const struct r3_kinfo *k, const struct r3_extra *e) {
  if (!e->addr || e->size <= 0 || strcmp(e->kernel, k->name) || strcmp(e->tu_dir, k->tu_dir)) return 0;
  for (int64_t i = 0; k->globals && i < k->nglobals; i++)
    if (k->globals[i].addr == e->addr) return 0;
  return 1;
}

static void add_extra_globals(struct r3_kinfo *k) {
  if (!g_extra || !k->name || !k->tu_dir) return;
  int64_t n = 0;
  for (int64_t i = 0; i < g_nextra; i++) n += extra_of(k, &g_extra[i]);
  if (!n) return;
  size_t bytes = (size_t)(k->nglobals + n) * sizeof(struct r3_global);
  void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return;
  struct r3_global *all = (struct r3_global *)m;
  int64_t used = 0;
  for (int64_t i = 0; k->globals && i < k->nglobals; i++) all[used++] = k->globals[i];
  for (int64_t i = 0; i < g_nextra; i++) {
    const struct r3_extra *e = &g_extra[i];
    if (!extra_of(k, e)) continue;
    all[used].name = e->name;
    all[used].addr = e->addr;
    all[used].size = e->size;
    used++;
  }
  k->globals = all;
  k->nglobals = used;
}

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
  add_extra_globals(k);
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
HIDDEN struct cct_node *g_cct;  /* node 0: the root (outside every kernel) */
HIDDEN int32_t g_cct_n;
HIDDEN int g_cct_full;          /* a context did not fit: the tree is incomplete */
HIDDEN volatile int g_cct_busy; /* a node being added: the profiler's handler leaves the tree alone */
HIDDEN int32_t m_node[MAXDEPTH]; /* the main thread's frames: each one's node (or its caller's, where
                                  * the frame's kernel has no counters) */

HIDDEN int32_t cct_child(int32_t parent, int32_t kid) {
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
 * each page they first touch), and a kernel timed on every one of its millions of calls
 * (XSBench's grid search under a capture of its driver) spent a share of the run in the clock. */
static inline uint64_t probe_period(struct tcount *tc, uint64_t n) {
  if (tc->period > 1) return tc->period;
  if (!cfg.sampling || n < SAMPLE_AFTER || (n & (n - 1))) return 1;
  return tc->period = (tc->total_ns < (uint64_t)SAMPLE_SHORT_NS * n) ? SAMPLE_PERIOD : 1;
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
  f->call = n;
  if (t_main > 0 && calllog_on()) {
    int64_t na = nargs_of(k);
    for (int i = 0; i < 4; i++) f->args[i] = (slots && i < na) ? slots[i] : 0;
  }
  t_call = n;
  t_call_main = t_main > 0 && tc;
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
    if (t_main > 0 && calllog_on()) calllog_add(k, f->call, incl, f->args);
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
