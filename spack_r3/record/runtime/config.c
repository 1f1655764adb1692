#include "r3rt_internal.h"

/* ------------------------------------------------------------------------- */
/* configuration                                                               */
/* ------------------------------------------------------------------------- */


HIDDEN struct kcalls *g_kcalls; /* MAXK entries, shared map (config_load); NULL without R3_INSTANCE_BYTES */

HIDDEN void *map_shared(size_t len) {
  void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return m == MAP_FAILED ? NULL : m;
}

HIDDEN struct config cfg;

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
 * (sub-microsecond calls) came out longer than the whole run. The least time between two
 * readings is taken off each timed call: never more than what the clock itself costs. */
static uint64_t clock_cost(void) {
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < 200; i++) {
    uint64_t a = now_ns(), b = now_ns();
    if (b - a < best) best = b - a;
  }
  return best == UINT64_MAX ? 0 : best;
}

HIDDEN void config_once(void) {
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

HIDDEN int selected(const char *name) {
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
