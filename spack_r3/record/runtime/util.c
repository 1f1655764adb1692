#include "r3rt_internal.h"

/* OpenMP entry points: the weak references when the executable links an OpenMP runtime,
 * else whatever the process has loaded (e.g. libomp pulled in by a shared library). */
HIDDEN omp_int_fn omp_fn(int max_threads) {
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

HIDDEN size_t r3_strlen(const char *s) { size_t n = 0; while (s[n]) n++; return n; }

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
HIDDEN int g_warn_fd = 2;

/* one line to stderr: "r3-record runtime: " + parts (NULL-terminated) + "\n" */
HIDDEN void warn(const char *first, ...) {
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

HIDDEN char *fmt_u64(char *end, uint64_t v) { /* writes backwards, returns start */
  *--end = 0;
  do { *--end = (char)('0' + v % 10); v /= 10; } while (v);
  return end;
}

HIDDEN char *fmt_hex(char *end, uint64_t v) { /* "0x..." backwards */
  static const char hx[] = "0123456789abcdef";
  *--end = 0;
  do { *--end = hx[v & 15]; v >>= 4; } while (v);
  *--end = 'x';
  *--end = '0';
  return end;
}

/* strerror without locale or malloc (used while the heap lock is held) */
HIDDEN const char *err_text(int err, char *b, size_t cap) {
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
HIDDEN int parse_num(const char *s, uint64_t *out, int hex_default) {
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

HIDDEN const char *r3_getenv(const char *name) {
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

HIDDEN uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

