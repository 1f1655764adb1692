/* spack-r3 record runtime for OpenMP target offload (linked beside r3rt.o into offload
 * executables by r3-record).
 *
 * It defines __tgt_target_kernel, which an offload executable's host code calls for every
 * `target` region; the executable's own definition wins over libomptarget's, and the real
 * one is found with dlsym(RTLD_NEXT). Every launch is timed (profile.<pid>.offload.json, the
 * region's share of the run). A selected region's first R3_INSTANCES launches are captured:
 *
 *   1. __tgt_target_data_begin_mapper with the launch's own map list: the region's data is
 *      mapped (and copied to the device) once more than the launch itself maps it;
 *   2. each mapped section is found on the device (omp_get_mapped_ptr) and read back
 *      (omp_target_memcpy): pre.bin, at device addresses;
 *   3. the launch itself, which finds everything present and copies nothing;
 *   4. the same sections read again: post.bin;
 *   5. __tgt_target_data_end_mapper: the extra reference goes, `from` data comes back to
 *      the host as the launch would have brought it.
 *
 * The `declare target` globals the region uses (record/offload.py lists them after the unit's
 * folder) are sections too (kind 2, always compared): each is found by its host counterpart,
 * the offload entry of the same name, whose device copy omp_get_mapped_ptr gives (libomptarget
 * maps every global of a loaded image). A `declare target link` variable's reference pointer
 * is such a global; the device copy it points at must be one of the launch's mapped sections
 * (unlinked()), which replay restores with the pointer. A static device global has no entry:
 * on the host plugin it is a local object of the device image this process loaded, found by
 * the image's symbol table (static_global(); on a GPU plugin the capture says why not). A
 * firstprivate aggregate is passed by
 * reference to a device copy libomptarget makes at the launch from the host object: its bytes
 * (ArgSizes) are the argument's "byval" data, and replay passes a pointer to a copy of them.
 *
 * Only OpenMP's device memory interface touches device memory, so the same code serves the
 * host plugin and the GPU plugins. The kernel's arguments are what libomptarget passes the
 * device function: a null dyn_ptr first (LLVM 19's kernels take one), then each
 * TARGET_PARAM entry: a literal's value, or the device address of a mapped base pointer.
 * A region is found by its host entry address in the executable's offload entry table
 * (__start_omp_offloading_entries), which names its device function; the record launcher
 * wrote <R3_RECORD_DIR>/offload/<name> holding the folder of its unit's device IR.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "launchrec.h"

/* libomptarget's ABI (LLVM 19, openmp/libomptarget/include/Shared/APITypes.h) */
typedef struct {
  uint32_t Version;
  uint32_t NumArgs;
  void **ArgBasePtrs;
  void **ArgPtrs;
  int64_t *ArgSizes;
  int64_t *ArgTypes;
  void **ArgNames;
  void **ArgMappers;
  uint64_t Tripcount;
  uint64_t Flags;
  uint32_t NumTeams[3];
  uint32_t ThreadLimit[3];
  uint32_t DynCGroupMem;
} KernelArgsTy;

struct tgt_offload_entry {
  void *addr;
  char *name;
  size_t size;
  int32_t flags;
  int32_t reserved;
};

#define MAP_LITERAL 0x100
#define MAP_PRIVATE 0x80
#define MAP_TARGET_PARAM 0x20
#define MAP_TO 0x01
#define MAP_FROM 0x02

typedef int (*kernel_fn)(void *, int64_t, int32_t, int32_t, void *, KernelArgsTy *);
typedef void (*mapper_fn)(void *, int64_t, int32_t, void **, void **, int64_t *, int64_t *, void **, void **);

extern struct tgt_offload_entry __start_omp_offloading_entries[] __attribute__((weak));
extern struct tgt_offload_entry __stop_omp_offloading_entries[] __attribute__((weak));
extern void *omp_get_mapped_ptr(const void *, int) __attribute__((weak));
extern int omp_target_memcpy(void *, const void *, size_t, size_t, size_t, int, int) __attribute__((weak));
extern int omp_get_initial_device(void) __attribute__((weak));
extern int omp_get_default_device(void) __attribute__((weak));
extern int omp_get_max_threads(void) __attribute__((weak));

#define MAXR 512   /* regions with counters */
#define MAXSEC 256 /* mapped sections of one launch */
#define MAXGLOB 64 /* device globals of one region */

struct region {
  void *host;      /* entry address (the region's id) */
  const char *name; /* its device function */
  char tu_dir[1024];
  int tu_known;
  char *globals[MAXGLOB]; /* the device globals its device function uses */
  uint64_t static_size[MAXGLOB]; /* a static one's size in the device IR; 0: one with an entry */
  int nglobals;
  uint64_t calls, ns, main_ns, main_calls, captured;
};

static struct region g_regions[MAXR];
static int g_nregions;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_t0, g_paused;

static void warn(const char *a, const char *b) {
  fprintf(stderr, "r3offload: %s%s\n", a, b ? b : "");
}

__attribute__((constructor)) static void r3o_init(void) { g_t0 = now_ns(); config(); }

static struct region *region_of(void *host) { /* lock held */
  for (int i = 0; i < g_nregions; i++)
    if (g_regions[i].host == host) return &g_regions[i];
  if (g_nregions == MAXR) return NULL;
  struct region *r = &g_regions[g_nregions++];
  r->host = host;
  if (__start_omp_offloading_entries)
    for (struct tgt_offload_entry *e = __start_omp_offloading_entries; e < __stop_omp_offloading_entries; e++)
      if (e->addr == host) { r->name = e->name; break; }
  if (r->name && g_have_dir) { /* the unit's folder, as the record launcher left it */
    char path[4096];
    snprintf(path, sizeof path, "%s/offload/%s", g_dir, r->name);
    FILE *f = fopen(path, "re");
    char line[4096];
    if (f && fgets(line, sizeof line, f)) { /* the folder, then "global <name>" or "static <name> <size>" a global */
      size_t n = strlen(line);
      while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == ' ')) n--;
      if (n > 0 && n < sizeof r->tu_dir) { memcpy(r->tu_dir, line, n); r->tu_dir[n] = 0; r->tu_known = 1; }
      while (fgets(line, sizeof line, f)) {
        n = strlen(line);
        while (n > 0 && line[n - 1] == '\n') line[--n] = 0;
        unsigned long long size = 0;
        char *sp = strncmp(line, "static ", 7) ? NULL : strrchr(line + 7, ' ');
        if (sp) { *sp = 0; size = strtoull(sp + 1, NULL, 10); }
        if ((strncmp(line, "global ", 7) && !(sp && size)) || !line[7]) continue;
        if (r->nglobals == MAXGLOB || !(r->globals[r->nglobals] = strdup(line + 7))) { r->tu_known = 0; break; }
        r->static_size[r->nglobals++] = size;
      }
    }
    if (f) fclose(f);
  }
  return r;
}

struct section { uint64_t dev, size; unsigned char *pre, *post; int global; };

static int by_addr(const void *a, const void *b) {
  const struct section *x = a, *y = b;
  return x->dev < y->dev ? -1 : x->dev > y->dev;
}

/* a device global's host counterpart: the offload entry of its name (a variable: a size) */
static struct tgt_offload_entry *entry_of(const char *name) {
  if (!__start_omp_offloading_entries) return NULL;
  for (struct tgt_offload_entry *e = __start_omp_offloading_entries; e < __stop_omp_offloading_entries; e++)
    if (e->size && e->name && !strcmp(e->name, name)) return e;
  return NULL;
}

/* A static device global has no offload entry, and OpenMP's interface finds a device
 * address only through a host address (omp_get_mapped_ptr); libomptarget's plugins look
 * globals up by name (dlsym, cuModuleGetGlobal, hsa_executable_get_symbol_by_name) for
 * entries only. The host plugin's image, though, is a shared object this process loaded
 * (dlopen of a file it wrote): its symbol table (.symtab, not loaded) names the static as a
 * local object. The image is the loaded object that exports the region's device function
 * (the host fallback of the same name is local, and the executable's own is skipped). */
struct image_search {
  const char *kernel, *name;
  int found, matches;
  uint64_t addr, size;
};

static void *read_at(int fd, uint64_t off, uint64_t len) { /* malloc'd; NULL on a short read */
  unsigned char *buf = len && len < (1ull << 32) ? malloc(len) : NULL;
  for (uint64_t got = 0; buf && got < len;) {
    ssize_t n = pread(fd, buf + got, len - got, (off_t)(off + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) { free(buf); buf = NULL; }
    else got += (uint64_t)n;
  }
  return buf;
}

/* the device image's symbol table (pread: this runtime's own mmap would be the record's) */
static void search_symtab(int fd, struct image_search *q, uint64_t base) {
  Elf64_Ehdr *eh = read_at(fd, 0, sizeof *eh);
  Elf64_Shdr *sh = NULL;
  if (!eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_shentsize != sizeof *sh || !(sh = read_at(fd, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof *sh))) {
    free(eh);
    return;
  }
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
    Elf64_Sym *sym = read_at(fd, sh[i].sh_offset, sh[i].sh_size);
    char *str = read_at(fd, sh[sh[i].sh_link].sh_offset, sh[sh[i].sh_link].sh_size + 1);
    if (sym && str) {
      uint64_t strsize = sh[sh[i].sh_link].sh_size;
      str[strsize] = 0;
      for (size_t k = 0; k < sh[i].sh_size / sizeof *sym; k++) {
        if (sym[k].st_name >= strsize || sym[k].st_shndx == SHN_UNDEF) continue;
        const char *nm = str + sym[k].st_name;
        int bind = ELF64_ST_BIND(sym[k].st_info), type = ELF64_ST_TYPE(sym[k].st_info);
        if (type == STT_FUNC && bind != STB_LOCAL && !strcmp(nm, q->kernel)) q->found = 1;
        if (type == STT_OBJECT && bind == STB_LOCAL && !strcmp(nm, q->name)) {
          q->matches++;
          q->addr = base + sym[k].st_value;
          q->size = sym[k].st_size;
        }
      }
    }
    free(sym);
    free(str);
    break;
  }
  free(sh);
  free(eh);
}

static int search_object(struct dl_phdr_info *info, size_t sz, void *arg) {
  struct image_search *q = arg;
  (void)sz;
  if (!info->dlpi_name || !info->dlpi_name[0]) return 0; /* the executable: the host side */
  void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD); /* it exports the region's device function */
  int image = h && dlsym(h, q->kernel);
  if (h) dlclose(h);
  if (!image) return 0;
  int fd = open(info->dlpi_name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  search_symtab(fd, q, (uint64_t)info->dlpi_addr);
  close(fd);
  if (q->found) return 1;
  q->matches = 0;
  return 0;
}

static const char *static_global(struct region *r, int g, uint64_t *addr, uint64_t *size) {
  static char why[512];
  struct image_search q = {r->name, r->globals[g], 0, 0, 0, 0};
  dl_iterate_phdr(search_object, &q);
  if (!q.found)
    snprintf(why, sizeof why,
             "its static device global %.200s has no offload entry, and no device image loaded in this process "
             "shows it (only the host plugin's image can be searched, by its symbol table)",
             r->globals[g]);
  else if (q.matches != 1)
    snprintf(why, sizeof why, "its static device global %.200s is %s in the device image's symbol table",
             r->globals[g], q.matches ? "not the only local object of that name" : "not a local object");
  else if (q.size != r->static_size[g])
    snprintf(why, sizeof why, "its static device global %.200s has %llu bytes in the device image, %llu in its IR",
             r->globals[g], (unsigned long long)q.size, (unsigned long long)r->static_size[g]);
  else {
    *addr = q.addr;
    *size = q.size;
    return NULL;
  }
  return why;
}

/* The region's device globals (name, device address, size), from their host counterparts;
 * NULL, or why one cannot be found. */
static const char *device_globals(struct region *r, int dev, uint64_t *addr, uint64_t *size) {
  static char why[512];
  for (int g = 0; g < r->nglobals; g++) {
    if (r->static_size[g]) {
      const char *no = static_global(r, g, &addr[g], &size[g]);
      if (no) return no;
      continue;
    }
    struct tgt_offload_entry *e = entry_of(r->globals[g]);
    void *d = e ? omp_get_mapped_ptr(e->addr, dev) : NULL;
    if (!d) {
      snprintf(why, sizeof why, "its device global %.200s was not found on the device (%s)", r->globals[g],
               e ? "its host counterpart is not mapped" : "no offload entry of that name");
      return why;
    }
    addr[g] = (uint64_t)(uintptr_t)d;
    size[g] = (uint64_t)e->size;
  }
  return NULL;
}

/* the launch's mapped sections on the device and the region's device globals (``nglob`` of
 * them at ``gaddr``), overlaps joined; -1 where a section is not mapped */
static int sections(KernelArgsTy *ka, int dev, struct section *out, int nglob, const uint64_t *gaddr,
                    const uint64_t *gsize) {
  int n = 0;
  for (uint32_t i = 0; i < ka->NumArgs; i++) {
    int64_t t = ka->ArgTypes[i];
    if ((t & (MAP_LITERAL | MAP_PRIVATE)) || ka->ArgSizes[i] <= 0 || !ka->ArgPtrs[i]) continue;
    void *d = omp_get_mapped_ptr(ka->ArgPtrs[i], dev);
    if (!d) return -1;
    if (n == MAXSEC) return -1;
    out[n].dev = (uint64_t)(uintptr_t)d;
    out[n].size = (uint64_t)ka->ArgSizes[i];
    n++;
  }
  for (int g = 0; g < nglob; g++) {
    if (n == MAXSEC) return -1;
    out[n].dev = gaddr[g];
    out[n].size = gsize[g];
    out[n].global = 1;
    n++;
  }
  qsort(out, (size_t)n, sizeof *out, by_addr);
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (m && out[i].dev <= out[m - 1].dev + out[m - 1].size) { /* a global mapped by name: still a global */
      uint64_t end = out[i].dev + out[i].size;
      if (end > out[m - 1].dev + out[m - 1].size) out[m - 1].size = end - out[m - 1].dev;
      out[m - 1].global |= out[i].global;
    } else {
      out[m++] = out[i];
    }
  }
  return m;
}

static int read_device(struct section *s, int n, int dev, int post) {
  int host = omp_get_initial_device();
  for (int i = 0; i < n; i++) {
    unsigned char *buf = malloc(s[i].size ? s[i].size : 1);
    if (!buf) return -1;
    if (omp_target_memcpy(buf, (void *)(uintptr_t)s[i].dev, s[i].size, 0, 0, host, dev)) { free(buf); return -1; }
    if (post) s[i].post = buf; else s[i].pre = buf;
  }
  return 0;
}

/* A `declare target link` variable is reached through its reference pointer
 * (<name>_decl_tgt_ref_ptr, a global with an offload entry), which libomptarget points at the
 * variable's device copy when the launch maps it (clang maps a link variable a region uses,
 * implicitly if the map clauses do not name it). The capture holds what the region saw only
 * if that copy is among the launch's mapped sections: NULL, or why not. */
#define LINK_SUFFIX "_decl_tgt_ref_ptr"
static const char *unlinked(struct region *r, const uint64_t *gaddr, struct section *s, int n) {
  static char why[512];
  size_t ls = strlen(LINK_SUFFIX);
  for (int g = 0; g < r->nglobals; g++) {
    size_t len = strlen(r->globals[g]);
    if (len <= ls || strcmp(r->globals[g] + len - ls, LINK_SUFFIX)) continue;
    uint64_t target = 0;
    for (int i = 0; i < n; i++) /* the reference pointer's bytes, in its global's section */
      if (s[i].dev <= gaddr[g] && gaddr[g] + 8 <= s[i].dev + s[i].size)
        memcpy(&target, s[i].pre + (gaddr[g] - s[i].dev), 8);
    int held = 0;
    for (int i = 0; i < n; i++)
      if (s[i].dev <= target && target < s[i].dev + s[i].size && (target < gaddr[g] || target >= gaddr[g] + 8))
        held = 1;
    if (!held) {
      snprintf(why, sizeof why,
               "its `declare target link` variable %.*s points at 0x%llx, outside the data the launch maps",
               (int)(len - ls), r->globals[g], (unsigned long long)target);
      return why;
    }
  }
  return NULL;
}

static int put(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

static void json_str(FILE *f, const char *s) { /* a JSON string: a folder's path may hold quotes */
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

static int write_image(const char *path, struct section *s, int n, int post) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int bad = put(f, "R3MEM1\0\0", 8);
  static const unsigned char zeros[8];
  for (int i = 0; i < n && !bad; i++) {
    /* kind 1 (heap: compared); in post.bin kind 5 where the launch changed nothing; a device
     * global kind 2 (always compared, its bytes in both images) */
    int same = post && !s[i].global && !memcmp(s[i].pre, s[i].post, s[i].size);
    uint64_t hdr[3] = {s[i].dev, s[i].size, same ? 5 : s[i].global ? 2 : 1};
    bad |= put(f, hdr, sizeof hdr);
    if (!same) {
      bad |= put(f, post ? s[i].post : s[i].pre, s[i].size);
      if (s[i].size % 8) bad |= put(f, zeros, 8 - s[i].size % 8);
    }
  }
  bad |= fclose(f);
  return bad;
}

static void failure_mark(const char *name, int err) {
  char path[4096];
  snprintf(path, sizeof path, "%s/captures/.error-%d-%s-0-%d", g_dir, err, name, (int)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) close(fd);
}

static void hex(FILE *f, const unsigned char *p, uint64_t n) {
  fputc('"', f);
  for (uint64_t i = 0; i < n; i++) fprintf(f, "%02x", p[i]);
  fputc('"', f);
}

static void write_capture(struct region *r, uint64_t instance, KernelArgsTy *ka, int dev, int32_t nteams,
                          int32_t tlimit, struct section *s, int n, uint64_t ns, const char *why,
                          unsigned char **fp, const uint64_t *gaddr, const uint64_t *gsize) {
  char dir[4096], tmp[4096], path[4200];
  snprintf(dir, sizeof dir, "%s/captures", g_dir);
  mkdir(g_dir, 0755);
  mkdir(dir, 0755);
  snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%llu-%d", dir, r->name, (unsigned long long)instance, (int)getpid());
  if (mkdir(tmp, 0755) && errno != EEXIST) { failure_mark(r->name, errno); return; }
  int bad = 0;
  snprintf(path, sizeof path, "%s/pre.bin", tmp);
  bad |= write_image(path, s, n, 0);
  snprintf(path, sizeof path, "%s/post.bin", tmp);
  bad |= write_image(path, s, n, 1);
  snprintf(path, sizeof path, "%s/meta.json", tmp);
  FILE *f = fopen(path, "w");
  if (!f) bad = 1;
  else {
    uint64_t bytes = 0, mapped = 0;
    for (int i = 0; i < n; i++) bytes += s[i].size;
    for (uint32_t i = 0; i < ka->NumArgs; i++)
      if (!(ka->ArgTypes[i] & (MAP_LITERAL | MAP_PRIVATE)) && ka->ArgSizes[i] > 0) mapped += (uint64_t)ka->ArgSizes[i];
    fprintf(f, "{\"kernel\": ");
    json_str(f, r->name);
    fprintf(f, ", \"tu_dir\": ");
    json_str(f, r->tu_dir);
    fprintf(f, ", \"instance\": %llu, \"pid\": %d, \"args\": [\"0x0\"", (unsigned long long)instance, (int)getpid());
    for (uint32_t i = 0; i < ka->NumArgs; i++) {
      int64_t t = ka->ArgTypes[i];
      if (!(t & MAP_TARGET_PARAM)) continue;
      uint64_t v;
      if (t & MAP_LITERAL) v = (uint64_t)(uintptr_t)ka->ArgPtrs[i];
      else {
        void *d = ka->ArgPtrs[i] ? omp_get_mapped_ptr(ka->ArgPtrs[i], dev) : NULL;
        v = d ? (uint64_t)((char *)d - ((char *)ka->ArgPtrs[i] - (char *)ka->ArgBasePtrs[i]))
              : (uint64_t)(uintptr_t)ka->ArgBasePtrs[i];
      }
      fprintf(f, ", \"0x%llx\"", (unsigned long long)v);
    }
    fprintf(f, "], \"byval\": [null"); /* a firstprivate aggregate's bytes; the others null */
    for (uint32_t i = 0; i < ka->NumArgs; i++) {
      if (!(ka->ArgTypes[i] & MAP_TARGET_PARAM)) continue;
      fprintf(f, ", ");
      if (fp[i]) hex(f, fp[i], (uint64_t)ka->ArgSizes[i]);
      else fprintf(f, "null");
    }
    fprintf(f, "], \"globals\": [");
    for (int g = 0; g < (why ? 0 : r->nglobals); g++) {
      fprintf(f, "%s{\"name\": ", g ? ", " : "");
      json_str(f, r->globals[g]);
      fprintf(f, ", \"addr\": \"0x%llx\", \"size\": %llu}", (unsigned long long)gaddr[g], (unsigned long long)gsize[g]);
    }
    fprintf(f, "]");
    fprintf(f, ", \"ret\": null, \"threads\": %d, \"instance_ns\": %llu, \"arena_base\": \"0x0\", "
               "\"arena_end\": \"0x0\", \"memory\": {\"mode\": \"mapped\", \"live_bytes\": %llu, "
               "\"touched_bytes\": %llu, \"mapped_bytes\": %llu, \"thread\": \"main\"}, "
               "\"launch\": {\"backend\": \"offload\", \"device\": %d, \"num_teams\": %d, \"thread_limit\": %d, "
               "\"kernel_num_teams\": %u, \"kernel_thread_limit\": %u}",
            omp_get_max_threads ? omp_get_max_threads() : 1, (unsigned long long)ns, (unsigned long long)bytes,
            (unsigned long long)bytes, (unsigned long long)mapped, dev, nteams, tlimit, ka->NumTeams[0],
            ka->ThreadLimit[0]);
    if (why) {
      fprintf(f, ", \"unreplayable\": ");
      json_str(f, why);
    }
    fprintf(f, "}\n");
    bad |= fclose(f);
  }
  char fin[4096];
  snprintf(fin, sizeof fin, "%s/%s-%llu-%d", dir, r->name, (unsigned long long)instance, (int)getpid());
  if (bad || rename(tmp, fin)) { failure_mark(r->name, errno ? errno : EIO); warn("cannot write ", tmp); }
}

static int is_main_thread(void) { return (pid_t)syscall(SYS_gettid) == getpid(); }

int __tgt_target_kernel(void *loc, int64_t device, int32_t nteams, int32_t tlimit, void *host, KernelArgsTy *ka) {
  static kernel_fn real;
  static mapper_fn begin, end;
  if (!real) {
    real = (kernel_fn)dlsym(RTLD_NEXT, "__tgt_target_kernel");
    begin = (mapper_fn)dlsym(RTLD_NEXT, "__tgt_target_data_begin_mapper");
    end = (mapper_fn)dlsym(RTLD_NEXT, "__tgt_target_data_end_mapper");
    if (!real) { warn("libomptarget's __tgt_target_kernel is not loaded", NULL); return 1; }
  }
  config();
  KernelArgsTy *orig = ka;
  pthread_mutex_lock(&g_lock);
  struct region *r = region_of(host);
  uint64_t instance = 0;
  int capture = r && r->name && r->tu_known && selected(r->name) && r->captured < g_instances && begin && end &&
                omp_get_mapped_ptr && omp_target_memcpy && omp_get_initial_device;
  if (capture) instance = ++r->captured;
  pthread_mutex_unlock(&g_lock);
  int dev = (int)(device < 0 ? (omp_get_default_device ? omp_get_default_device() : 0) : device);
  struct section secs[MAXSEC];
  int n = -1;
  const char *why = NULL;
  uint64_t gaddr[MAXGLOB], gsize[MAXGLOB];
  unsigned char **fp = NULL; /* each firstprivate aggregate's bytes, by map entry */
  uint64_t p0 = 0;
  KernelArgsTy saved;
  void *copies = NULL;
  if (capture) { /* the launch's own map list, as the caller passed it (the launch may change *ka: XSBench's
                  * end_mapper saw 4 of its 10 entries) */
    size_t n8 = (size_t)ka->NumArgs * 8;
    saved = *ka;
    copies = malloc(6 * n8 + 8);
    if (!copies) capture = 0;
    else {
      char *c = copies;
      void **from[6] = {ka->ArgBasePtrs, ka->ArgPtrs, (void **)ka->ArgSizes, (void **)ka->ArgTypes, ka->ArgNames,
                        ka->ArgMappers};
      void **to[6];
      for (int j = 0; j < 6; j++, c += n8) {
        to[j] = from[j] ? (void **)c : NULL;
        if (from[j]) memcpy(c, from[j], n8);
      }
      saved.ArgBasePtrs = to[0]; saved.ArgPtrs = to[1]; saved.ArgSizes = (int64_t *)to[2];
      saved.ArgTypes = (int64_t *)to[3]; saved.ArgNames = to[4]; saved.ArgMappers = to[5];
      ka = &saved;
    }
  }
  if (capture) {
    p0 = now_ns();
    begin(loc, device, (int32_t)ka->NumArgs, ka->ArgBasePtrs, ka->ArgPtrs, ka->ArgSizes, ka->ArgTypes, ka->ArgNames,
          ka->ArgMappers);
    memset(secs, 0, sizeof secs);
    why = device_globals(r, dev, gaddr, gsize);
    n = sections(ka, dev, secs, why ? 0 : r->nglobals, gaddr, gsize);
    fp = calloc(ka->NumArgs ? ka->NumArgs : 1, sizeof *fp);
    if (!fp) n = -1;
    for (uint32_t i = 0; i < ka->NumArgs && n >= 0; i++) {
      int64_t t = ka->ArgTypes[i];
      if (!(t & MAP_PRIVATE) || (t & MAP_LITERAL) || !(t & MAP_TARGET_PARAM)) continue;
      /* the device copy starts where the host object does: the argument points at it */
      if (ka->ArgPtrs[i] != ka->ArgBasePtrs[i] || ka->ArgSizes[i] <= 0 || !ka->ArgPtrs[i])
        why = "a firstprivate argument passed by reference that is not a whole object";
      else if ((fp[i] = malloc((size_t)ka->ArgSizes[i])))
        memcpy(fp[i], ka->ArgPtrs[i], (size_t)ka->ArgSizes[i]);
      else
        n = -1;
    }
    if (n < 0 || read_device(secs, n, dev, 0)) n = -1;
    if (n >= 0 && !why) why = unlinked(r, gaddr, secs, n);
    __atomic_add_fetch(&g_paused, now_ns() - p0, __ATOMIC_RELAXED);
  }
  uint64_t t0 = now_ns();
  int rc = real(loc, device, nteams, tlimit, host, orig);
  uint64_t dt = now_ns() - t0;
  if (capture) {
    p0 = now_ns();
    if (n >= 0 && !rc && !read_device(secs, n, dev, 1))
      write_capture(r, instance, ka, dev, nteams, tlimit, secs, n, dt, why, fp, gaddr, gsize);
    else if (n < 0)
      warn("a mapped section was not found on the device; not captured: ", r->name);
    end(loc, device, (int32_t)ka->NumArgs, ka->ArgBasePtrs, ka->ArgPtrs, ka->ArgSizes, ka->ArgTypes, ka->ArgNames,
        ka->ArgMappers);
    for (int i = 0; i < (n > 0 ? n : 0); i++) { free(secs[i].pre); free(secs[i].post); }
    for (uint32_t i = 0; fp && i < ka->NumArgs; i++) free(fp[i]);
    free(fp);
    free(copies);
    __atomic_add_fetch(&g_paused, now_ns() - p0, __ATOMIC_RELAXED);
  }
  if (r) {
    int on_main = is_main_thread();
    pthread_mutex_lock(&g_lock);
    r->calls++;
    r->ns += dt;
    if (on_main) { r->main_ns += dt; r->main_calls++; }
    pthread_mutex_unlock(&g_lock);
  }
  return rc;
}

/* The regions' counts, in the form of r3rt.c's profile.<pid>.json (record/profiles.py):
 * a launch is its region's own time, on the thread that launched it. */
__attribute__((destructor)) static void r3o_fini(void) {
  if (!g_have_dir || !g_nregions) return;
  char tmp[4096], fin[4096];
  snprintf(tmp, sizeof tmp, "%s/.tmp-profile.%d.offload.json", g_dir, (int)getpid());
  snprintf(fin, sizeof fin, "%s/profile.%d.offload.json", g_dir, (int)getpid());
  mkdir(g_dir, 0755);
  FILE *f = fopen(tmp, "w");
  if (!f) { warn("cannot write ", tmp); return; }
  fprintf(f, "{\"pid\": %d, \"app_ns\": %llu, \"paused_ns\": %llu, \"backend\": \"offload\", \"kernels\": [",
          (int)getpid(), (unsigned long long)(now_ns() - g_t0), (unsigned long long)g_paused);
  int first = 1;
  for (int i = 0; i < g_nregions; i++) {
    struct region *r = &g_regions[i];
    if (!r->name) continue; /* (a timed run of a tuned build has no unit folders: tu_dir "") */
    fprintf(f, "%s{\"name\": ", first ? "" : ", ");
    json_str(f, r->name);
    fprintf(f, ", \"tu_dir\": ");
    json_str(f, r->tu_dir);
    fprintf(f, ", \"id\": -1, \"calls\": %llu, \"total_ns\": %llu, "
               "\"self_ns\": %llu, \"main_self_ns\": %llu, \"main_top_calls\": %llu, \"top_ns\": %llu, "
               "\"main_top_ns\": %llu, \"captured\": %llu}",
            (unsigned long long)r->calls, (unsigned long long)r->ns,
            (unsigned long long)r->ns, (unsigned long long)r->main_ns, (unsigned long long)r->main_calls,
            (unsigned long long)r->ns, (unsigned long long)r->main_ns, (unsigned long long)r->captured);
    first = 0;
  }
  fprintf(f, "]}\n");
  if (fclose(f) || rename(tmp, fin)) warn("cannot write ", fin);
}
