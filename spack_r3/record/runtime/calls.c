#include "r3rt_internal.h"

/* ------------------------------------------------------------------------- */
/* which calls carry a kernel's time (R3_CALL_LOG, R3_CAPTURE_CALLS)            */
/* ------------------------------------------------------------------------- */
/* A kernel's calls can differ in cost by orders of magnitude (LULESH's EOS: a region of 123
 * elements once, of thousands twenty times over later), and the first call tells nothing of
 * where the time goes. Record therefore runs twice where it picks instances (record/instances.py,
 * CERE's way): a first run with R3_CALL_LOG=1 logs each timed call of each kernel on the main
 * thread (its index among the main thread's calls of that kernel, its inclusive time, its first
 * argument slots); the second names the calls to capture by index, R3_CAPTURE_CALLS=
 * "name=i,j;name2=k" (main-thread calls only). Kernels it does not name are captured as
 * before (R3_INSTANCES).
 *
 * The log keeps at most LOG_MAX calls a kernel, a uniform sample by index: when full, every
 * other entry is dropped and only indices divisible by the doubled stride are logged from then
 * on. Only the main thread writes it, so it takes no lock. */

#define LOG_MAX 4096
#define LOG_ARGS 4

struct call_entry { uint64_t call, ns, args[LOG_ARGS]; };
struct call_log { uint64_t stride, n; struct call_entry e[LOG_MAX]; };

static struct call_log *g_log[MAXK];
static int g_log_on = -1; /* R3_CALL_LOG: -1 not read yet */

struct picks { int64_t n, done; uint64_t call[64]; int taken[64]; };
static struct picks *g_picks[MAXK];
static int g_picks_read[MAXK]; /* 0 not yet, 1 read (g_picks NULL: the kernel is not named) */
static const char *g_picks_env;  /* R3_CAPTURE_CALLS, NULL when unset */
static int g_picks_env_read;

HIDDEN int calllog_on(void) {
  if (g_log_on < 0) {
    const char *s = getenv("R3_CALL_LOG");
    g_log_on = s && *s && strcmp(s, "0");
  }
  return g_log_on;
}

HIDDEN void calllog_add(struct r3_kinfo *k, uint64_t call, uint64_t ns, const uint64_t *args) {
  if (k->id < 0 || k->id >= MAXK) return;
  struct call_log *l = g_log[k->id];
  if (!l) {
    void *m = mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    l = g_log[k->id] = (struct call_log *)m;
    l->stride = 1;
  }
  if (call % l->stride) return;
  if (l->n == LOG_MAX) {
    uint64_t kept = 0;
    for (uint64_t i = 0; i < l->n; i++)
      if (l->e[i].call % (2 * l->stride) == 0) l->e[kept++] = l->e[i];
    l->n = kept;
    l->stride *= 2;
    if (call % l->stride) return;
  }
  struct call_entry *e = &l->e[l->n++];
  e->call = call;
  e->ns = ns;
  int64_t na = nargs_of(k);
  for (int i = 0; i < LOG_ARGS; i++) e->args[i] = (args && i < na) ? args[i] : 0;
}

/* calls.<pid>.json: {"kernels": [{"name", "tu_dir", "stride", "calls": [[index, ns, a0..a3], ...]}]} */
HIDDEN void calllog_write(void) {
  if (!calllog_on() || !cfg.have_dir) return;
  char tmp[PATHMAX], fin[PATHMAX], buf[1 << 16];
  path_t t = {tmp, 0, sizeof tmp, 0}, f = {fin, 0, sizeof fin, 0};
  pa(&t, cfg.dir); pa(&t, "/.tmp-calls."); pa_u(&t, (uint64_t)getpid()); pa(&t, ".json");
  pa(&f, cfg.dir); pa(&f, "/calls."); pa_u(&f, (uint64_t)getpid()); pa(&f, ".json");
  if (t.ovf || f.ovf) return;
  char dir[PATHMAX];
  memcpy(dir, cfg.dir, r3_strlen(cfg.dir) + 1);
  if (mkdir_p(dir)) { warn("cannot create ", cfg.dir, ": ", strerror(errno), NULL); return; }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) { warn("cannot write ", tmp, ": ", strerror(errno), NULL); return; }
  wbuf_t w = {.fd = fd, .cap = sizeof buf, .buf = buf};
  wb_s(&w, "{\"pid\": "); wb_u(&w, (uint64_t)getpid());
  wb_s(&w, ", \"kernels\": [");
  int first = 1;
  for (struct r3_kinfo *k = __atomic_load_n(&g_kernels, __ATOMIC_ACQUIRE); k; k = k->next) {
    if (k->id < 0 || k->id >= MAXK || !g_log[k->id]) continue;
    struct call_log *l = g_log[k->id];
    if (!first) wb_s(&w, ",");
    first = 0;
    wb_s(&w, "\n {\"name\": "); wb_jstr(&w, k->name);
    wb_s(&w, ", \"tu_dir\": "); wb_jstr(&w, k->tu_dir);
    wb_s(&w, ", \"stride\": "); wb_u(&w, l->stride);
    wb_s(&w, ", \"calls\": [");
    for (uint64_t i = 0; i < l->n; i++) {
      if (i) wb_s(&w, ",");
      wb_s(&w, "["); wb_u(&w, l->e[i].call); wb_s(&w, ","); wb_u(&w, l->e[i].ns);
      for (int a = 0; a < LOG_ARGS; a++) { wb_s(&w, ","); wb_u(&w, l->e[i].args[a]); }
      wb_s(&w, "]");
    }
    wb_s(&w, "]}");
  }
  wb_s(&w, "]}\n");
  wb_commit(&w, tmp, fin);
}

/* the calls R3_CAPTURE_CALLS names for k, or NULL where it names none (read once a kernel) */
static struct picks *picks_of(struct r3_kinfo *k) {
  if (k->id < 0 || k->id >= MAXK) return NULL;
  if (__atomic_load_n(&g_picks_read[k->id], __ATOMIC_ACQUIRE)) return g_picks[k->id];
  if (!g_picks_env_read) {
    g_picks_env = getenv("R3_CAPTURE_CALLS");
    g_picks_env_read = 1;
  }
  struct picks *p = NULL;
  size_t nl = r3_strlen(k->name);
  for (const char *s = g_picks_env; s && *s;) {
    const char *e = s;
    while (*e && *e != ';') e++;
    if ((size_t)(e - s) > nl && !strncmp(s, k->name, nl) && s[nl] == '=') {
      void *m = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m != MAP_FAILED) {
        p = (struct picks *)m;
        for (const char *c = s + nl + 1; c < e && p->n < 64;) {
          uint64_t v = 0;
          while (c < e && *c >= '0' && *c <= '9') v = v * 10 + (uint64_t)(*c++ - '0');
          p->call[p->n++] = v;
          while (c < e && (*c < '0' || *c > '9')) c++;
        }
      }
      break;
    }
    s = *e ? e + 1 : e;
  }
  g_picks[k->id] = p;
  __atomic_store_n(&g_picks_read[k->id], 1, __ATOMIC_RELEASE);
  return p;
}

HIDDEN TLS uint64_t t_pick; /* the pick calllog_pick last said yes for (its call index) */

/* -1: R3_CAPTURE_CALLS names no call of k (capture as R3_INSTANCES says); 1: capture this
 * call (``call``: its index among the main thread's calls, ``main``: on the main thread); 0 not.
 * A picked call that could not be captured (another capture was in progress: a kernel called
 * inside one being captured) is taken at the kernel's next call: t_pick says which pick. */
HIDDEN int calllog_pick(struct r3_kinfo *k, uint64_t call, int main) {
  struct picks *p = picks_of(k);
  if (!p) return -1;
  if (!main) return 0;
  for (int64_t i = 0; i < p->n; i++)
    if (!p->taken[i] && p->call[i] <= call) {
      t_pick = p->call[i];
      return 1;
    }
  return 0;
}

/* the capture of pick ``pick`` of k began: it is not taken again */
HIDDEN void calllog_taken(struct r3_kinfo *k, uint64_t pick) {
  struct picks *p = picks_of(k);
  for (int64_t i = 0; p && i < p->n; i++)
    if (p->call[i] == pick) p->taken[i] = 1;
}

/* the calls named for k were all taken (a named kernel takes no other) */
HIDDEN int calllog_picks_done(struct r3_kinfo *k) {
  struct picks *p = picks_of(k);
  return p && __atomic_load_n(&k->captured, __ATOMIC_RELAXED) >= p->n;
}
