/* What the launch recorders share (r3offload.c for OpenMP target regions, r3cuda.c for
 * CUDA launches): the record settings, read once from the environment (R3_RECORD_DIR,
 * R3_CAPTURE, R3_INSTANCES), the choice of the kernels to capture, and the clock. Each
 * recorder is an object of its own, loaded apart from the other, so each keeps its own copy
 * (static). */
#ifndef R3_LAUNCHREC_H
#define R3_LAUNCHREC_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char g_dir[2048];     /* R3_RECORD_DIR, made absolute */
static char g_capture[4096]; /* R3_CAPTURE: the names to capture, comma-separated */
static int g_have_dir, g_capture_all, g_capture_none, g_ready;
static uint64_t g_instances = 1; /* R3_INSTANCES: the calls of each kernel captured */

static inline uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void config(void) {
  if (g_ready) return;
  const char *s = getenv("R3_RECORD_DIR");
  if (s && *s) {
    if (s[0] != '/' && getcwd(g_dir, sizeof g_dir - 600)) strcat(g_dir, "/");
    if (strlen(g_dir) + strlen(s) < sizeof g_dir - 512) { strcat(g_dir, s); g_have_dir = 1; }
  }
  s = getenv("R3_CAPTURE");
  if (!s || !*s || !strcmp(s, "*")) g_capture_all = 1;
  else if (!strcmp(s, "none")) g_capture_none = 1;
  else snprintf(g_capture, sizeof g_capture, "%s", s);
  s = getenv("R3_INSTANCES");
  if (s && *s && atoll(s) > 0) g_instances = (uint64_t)atoll(s);
  g_ready = 1;
}

static inline int selected(const char *name) { /* R3_CAPTURE: comma-separated names, or * */
  if (g_capture_none || !g_have_dir || !name) return 0;
  if (g_capture_all) return 1;
  size_t nl = strlen(name);
  for (const char *s = g_capture; *s;) {
    while (*s == ',' || *s == ' ') s++;
    const char *e = s;
    while (*e && *e != ',') e++;
    const char *t = e;
    while (t > s && t[-1] == ' ') t--;
    if (((size_t)(t - s) == nl && !strncmp(s, name, nl)) || ((size_t)(t - s) == 1 && *s == '*')) return 1;
    s = e;
  }
  return 0;
}

#endif
