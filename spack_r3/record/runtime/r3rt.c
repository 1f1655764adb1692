/* spack-r3 record runtime, linked into every recorded application.
 *
 * 1. Arena heap: malloc and friends are defined here and interpose libc's for the
 *    whole process. Every allocation comes from one fixed virtual-address arena
 *    (R3_ARENA_BASE, R3_ARENA_SIZE), so a capture can be replayed by mapping the
 *    arena at the same address: no pointer rebasing. The heap is walkable: each
 *    chunk starts with a 16-byte header {size, tag}. The application's private mappings
 *    (mmap) come from the arena too; the rest are watched (mappings.c).
 * 2. Probes: __r3_enter/__r3_exit count and time every kernel call (inclusive and
 *    self time, snapshot work excluded); profile.<pid>.json at exit.
 * 3. Captures: memory images before/after selected kernel instances plus meta.json,
 *    written into a temporary directory and renamed when complete; one that cannot be
 *    written leaves a marker that fails the record (record_failure).
 * 4. One process is the run: a process the application forks records nothing (g_forked).
 *
 * One file a subsystem: util.c (messages, numbers, environment), arena.c (1), output.c
 * (buffered output, paths), config.c, probes.c (2), profiler.c, capture.c (3), pages.c
 * (touched pages), calls.c (which calls carry the time: the call log, calls named to
 * capture), regions.c (stack, loaded objects, foreign mappings), mappings.c (mmap,
 * munmap, mremap), this file (process start and exit); r3rt_internal.h declares what they
 * share.
 *
 * Rules for these files: never call anything that may malloc while holding the heap
 * lock; no stdio; output through open(2)/write(2) and our own formatters.
 */
#include "r3rt_internal.h"

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
  calllog_write();
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
  wb_commit(&w, tmp, fin);
}
