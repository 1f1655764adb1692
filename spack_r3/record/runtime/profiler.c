#include "r3rt_internal.h"

/* ---- where the main thread's time goes: a statistical profiler ----
 * Timing a short call is biased: its clock readings serialize it, while untimed calls
 * overlap their cache misses with the code around them. XSBench's sub-microsecond grid
 * search, timed on a sample of its calls, came out longer than its caller and than the
 * whole run. So a
 * timer on the main thread's CPU clock interrupts it every R3_SAMPLE_US (default 1000; 0:
 * off) of its CPU time, and each tick counts for the kernel running its own code then (the
 * top frame, or a fast-path leaf), and for the outermost one (the bottom frame, or the
 * leaf if no frame is pushed). record/profiles.py takes shares of the run from these
 * counts where there are enough of them. */
static timer_t g_prof_timer;
static pid_t g_prof_pid;      /* the process the timer ticks in (a fork's child has none) */
HIDDEN uint64_t g_prof_ns;    /* the interval */
HIDDEN uint64_t g_prof_ticks; /* the main thread's ticks, less those taken while pausing */
/* signals that brought them: the kernel checks a CPU-time timer at its scheduler tick, so
 * one signal may carry several ticks (si_overrun), all landing where that one did: the
 * signals, not the ticks, are the independent samples (record/profiles.py) */
HIDDEN uint64_t g_prof_events;

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

HIDDEN void prof_start(void) {
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
HIDDEN int prof_stop(void) {
  if (!g_prof_pid || g_prof_pid != getpid()) return 0;
  timer_delete(g_prof_timer);
  g_prof_pid = 0;
  struct sigaction cur;
  return sigaction(SIGPROF, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == prof_tick;
}
