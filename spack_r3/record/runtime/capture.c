#include "r3rt_internal.h"

/* ---- captures: one at a time, process-wide ----
 * On the main thread outside parallel regions a capture is taken in this process. A call on
 * another thread, or inside a parallel region, is captured in a snapshot process: the
 * calling thread forks, the child (a consistent copy of memory at the call, with this thread
 * only) records the call, runs the kernel and exits; the parent waits, then makes its own
 * call. The application's run never sees a protected page or a half-taken snapshot. */

static char g_wbuf[1 << 16];
/* One capture in this process and one snapshot process at a time; a snapshot may be taken
 * while this process captures (a kernel called in a parallel loop of the captured driver). */
HIDDEN int g_capturing; /* an in-process capture is being taken */
static int g_forking;   /* a snapshot process is running */
HIDDEN int g_child;     /* this process is a snapshot process */
HIDDEN TLS int t_snapshot_fork; /* this thread is forking a snapshot process */
/* A process the application forked that goes on running the program records nothing: its
 * calls are the parent's over again (a child calling the kernel as often as its parent
 * doubled the counts, and shares added up past the whole run). The process that started
 * stands for the run. */
HIDDEN int g_forked;
HIDDEN struct capture cap = {.pre_fd = -1};

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
HIDDEN void emit_header(wbuf_t *w, uint64_t addr, uint64_t size, uint64_t kind) {
  uint64_t h[3] = {addr, size, kind}; /* x86-64 / aarch64: little-endian */
  wb_put(w, h, sizeof h);
  w->total += sizeof h;
}

HIDDEN void emit_region(wbuf_t *w, uint64_t addr, uint64_t size, uint64_t kind, const void *data) {
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
HIDDEN int chunk_bad(const struct pool *pl, uintptr_t h, uint64_t sz) {
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
HIDDEN int xfsz_ignore(void) {
  struct sigaction cur, ign;
  if (sigaction(SIGXFSZ, NULL, &cur) || (cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL) return 0;
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  return sigaction(SIGXFSZ, &ign, NULL) == 0;
}
HIDDEN void xfsz_restore(int ignored) {
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
 * tells ingest (record/ingest.py, write_failures). Its name alone says what failed, for a disk
 * with no room left for its contents (JSON: kernel, errno, error, path); it is written
 * after the failed capture's files are removed. name NULL: the process's profile, whose
 * marker is named ".profile" (no kernel's name starts with a dot). */
HIDDEN void record_failure(const char *name, int64_t inst, int err, const char *where) {
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


HIDDEN void release_capture(int *flag) { __atomic_store_n(flag, 0, __ATOMIC_RELEASE); }

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
HIDDEN int want_capture(struct r3_kinfo *k) {
  int pick = calllog_pick(k, t_call, t_call_main); /* R3_CAPTURE_CALLS: these calls, and no other */
  if (!pick || (pick < 0 && enough_calls(k))) return CAP_NONE;
  if (pick < 0) t_pick = (uint64_t)-1;
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
  if (pick > 0) calllog_taken(k, t_pick); /* (here: a snapshot process's memory is its own) */
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
HIDDEN int capture_begin(struct r3_kinfo *k, const uint64_t *slots, int depth, int64_t inst, int main_thread) {
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
  cap.call = t_call;
  cap.pick = (int64_t)t_pick;
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
  wb_s(w, ", \"call\": "); wb_u(w, cap.call);
  if (cap.pick >= 0) { wb_s(w, ", \"picked\": "); wb_i(w, cap.pick); }
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
  /* the OpenMP runtime's settings the run had (affinity, wait policy): replay's workers take them */
  static const char *const omp_vars[] = {"OMP_PROC_BIND", "OMP_PLACES", "OMP_WAIT_POLICY", "OMP_DYNAMIC",
                                         "OMP_MAX_ACTIVE_LEVELS", "KMP_BLOCKTIME", "KMP_AFFINITY", "KMP_LIBRARY",
                                         "GOMP_SPINCOUNT", NULL};
  wb_s(w, ", \"omp_env\": {");
  int nenv = 0;
  for (int i = 0; omp_vars[i]; i++) {
    const char *v = getenv(omp_vars[i]);
    if (!v) continue;
    if (nenv++) wb_s(w, ", ");
    wb_jstr(w, omp_vars[i]); wb_s(w, ": "); wb_jstr(w, v);
  }
  wb_s(w, "}");
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
HIDDEN int capture_end(struct r3_kinfo *k, const void *ret, uint64_t incl) {
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
HIDDEN void capture_forked(struct r3_kinfo *k, const uint64_t *slots, int depth) {
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
HIDDEN int capture_done(struct r3_kinfo *k) {
  if (!cfg.have_dir || cfg.capture_none || (k->flags & R3_KFLAG_NO_CAPTURE)) return 1;
  if (calllog_pick(k, 0, 0) >= 0 ? calllog_picks_done(k) : enough_calls(k)) return 1;
  return __atomic_load_n(&k->sel, __ATOMIC_RELAXED) == 2;
}
