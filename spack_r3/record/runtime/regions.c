#include "r3rt_internal.h"

HIDDEN int64_t nargs_of(const struct r3_kinfo *k) {
  return k->nargs < 0 ? 0 : (k->nargs > 65536 ? 65536 : k->nargs);
}

/* ---- the caller's stack (kind 4) ----
 * A kernel may receive pointers into its callers' frames: C local arrays, C++ objects passed
 * by reference, struct-return (sret) buffers. Replay maps the recorded stack range at its
 * recorded address, so one region from the lowest such pointer up to the top of the thread's
 * stack (its outermost frame) keeps them valid. It lies above the kernel's own frames (and
 * above the noinline probe wrapper's), so between enter and exit only the kernel's writes
 * through its arguments change it: pre and post images hold it at the same address and size. */
#define STACK_MAX (64ull << 20)

/* the mapping holding address a, from /proc/self/maps (read(2), no malloc): 1 if found */
HIDDEN int mapping_of(uintptr_t a, struct mapent *out) {
  char buf[4096], line[512];
  size_t ln = 0;
  int found = 0;
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  for (;;) {
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    for (ssize_t i = 0; i < r && !found; i++) {
      char c = buf[i];
      if (c != '\n') {
        if (ln < sizeof line - 1) line[ln++] = c;
        continue;
      }
      line[ln] = 0;
      ln = 0;
      /* "lo-hi perms offset dev inode   name" in hex */
      uint64_t lo = 0, hi = 0;
      const char *s = line;
      int ok = 1, d = 0;
      for (; *s && *s != '-'; s++, d++) {
        int v = (*s >= '0' && *s <= '9') ? *s - '0' : (*s >= 'a' && *s <= 'f') ? *s - 'a' + 10 : -1;
        if (v < 0) { ok = 0; break; }
        lo = lo * 16 + (uint64_t)v;
      }
      if (!ok || *s != '-' || !d) continue;
      for (s++, d = 0; *s && *s != ' '; s++, d++) {
        int v = (*s >= '0' && *s <= '9') ? *s - '0' : (*s >= 'a' && *s <= 'f') ? *s - 'a' + 10 : -1;
        if (v < 0) { ok = 0; break; }
        hi = hi * 16 + (uint64_t)v;
      }
      if (!ok || !d || a < lo || a >= hi) continue;
      found = 1;
      out->lo = (uintptr_t)lo;
      out->hi = (uintptr_t)hi;
      while (*s == ' ') s++;
      size_t k = 0;
      for (; k < 4 && s[k] && s[k] != ' '; k++) out->perms[k] = s[k];
      out->perms[k] = 0;
      for (int field = 0; field < 4 && *s; field++) { /* perms offset dev inode */
        while (*s && *s != ' ') s++;
        while (*s == ' ') s++;
      }
      for (k = 0; s[k] && k < sizeof out->name - 1; k++) out->name[k] = s[k];
      out->name[k] = 0;
    }
    if (found) break;
  }
  close(fd);
  return found;
}

/* the end of the mapping holding address a, or 0 */
/* main_stack (if not NULL): set when that mapping is the main thread's stack */
static uintptr_t mapping_end(uintptr_t a, int *main_stack) {
  struct mapent e;
  if (!mapping_of(a, &e)) return 0;
  if (main_stack) *main_stack = strstr(e.name, "[stack]") != NULL;
  return e.hi;
}

extern void *__libc_stack_end __attribute__((weak));

/* The top of the main thread's stack as far as frames go (found once): glibc's
 * __libc_stack_end, the stack pointer at process entry. Above it lie argc, argv, the
 * environment and the auxiliary vector, which a capture must not carry (environment
 * variables may hold secrets); a pointer into them is not a stack pointer here. Without
 * __libc_stack_end (another libc): the end of the stack's mapping in /proc/self/maps. */
static uintptr_t main_stack_top(void) {
  static uintptr_t top;
  if (!top) {
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (&__libc_stack_end && (uintptr_t)__libc_stack_end > here)
      top = ((uintptr_t)__libc_stack_end + 15) & ~(uintptr_t)15;
    else
      top = mapping_end(here, NULL);
  }
  return top;
}


/* the thread pointer: on x86-64 the static TLS blocks lie just below it, the thread control
 * block at it; both sit at the top of a thread's stack mapping, above its frames */
static uintptr_t thread_pointer(void) {
#if defined(__x86_64__)
  uintptr_t tp;
  __asm__("mov %%fs:0, %0" : "=r"(tp));
  return tp;
#else
  return 0;
#endif
}

/* the lowest address of the calling thread's static TLS blocks (every loaded module's) */
static int tls_cb(struct dl_phdr_info *info, size_t sz, void *data) {
  uintptr_t *low = (uintptr_t *)data;
  if (sz >= offsetof(struct dl_phdr_info, dlpi_tls_data) + sizeof info->dlpi_tls_data && info->dlpi_tls_data &&
      (uintptr_t)info->dlpi_tls_data < *low)
    *low = (uintptr_t)info->dlpi_tls_data;
  return 0;
}

/* choose the kind-4 regions for a capture of k with these argument slots: from the lowest
 * argument pointing into the calling thread's stack up to its top, and likewise for the main
 * thread's stack when a worker gets pointers into it (a driver's locals shared with its
 * parallel loop); -1: a region is too large, and a capture without it would not replay */
HIDDEN int stack_region(struct r3_kinfo *k, const uint64_t *slots, int main_thread) {
  cap.nstk = 0;
  int64_t na = nargs_of(k);
  if (!slots || !na) return 0;
  uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
  uintptr_t own_top = main_thread ? main_stack_top() : mapping_end(sp, NULL);
  uintptr_t lo[2] = {UINTPTR_MAX, UINTPTR_MAX}, top[2] = {own_top, main_thread ? 0 : main_stack_top()};
  uintptr_t own_hi = 0; /* the highest argument into the calling thread's stack */
  for (int64_t i = 0; i < na; i++) {
    if (k->byval_sizes && k->byval_sizes[i] > 0) continue; /* saved with the arguments */
    uintptr_t v = (uintptr_t)slots[i];
    if (!v || (v >= g_base && v < g_end)) continue;
    if (v > sp && v < own_top) {
      if (v < lo[0]) lo[0] = v;
      if (v > own_hi) own_hi = v;
    } else if (top[1] && v < top[1] && v < lo[1]) {
      int main_stack = 0;
      if (mapping_end(v, &main_stack) && main_stack) lo[1] = v;
    } else if (v >= main_stack_top()) {
      int main_stack = 0;
      if (mapping_end(v, &main_stack) && main_stack) {
        /* argv, the environment, the auxiliary vector: never recorded (they may hold secrets) */
        warn("not capturing ", k->name ? k->name : "?",
             ": an argument points to the program's arguments or environment, which captures never hold", NULL);
        return -1;
      }
    }
  }
  for (int g = 0; g < 2; g++) {
    if (lo[g] == UINTPTR_MAX || !top[g]) continue;
    uintptr_t l = lo[g] & ~(uintptr_t)15;
    if (top[g] - l > STACK_MAX) {
      char a[32];
      warn("not capturing ", k->name ? k->name : "?", ": an argument points ", fmt_u64(a + sizeof a, top[g] - l),
           " bytes below the stack top (more than 64 MiB of stack to record)", NULL);
      return -1;
    }
    int n = cap.nstk++;
    cap.stk[n].lo = l;
    cap.stk[n].hi = top[g];
    cap.stk[n].tls_lo = 0;
    if (g == 0 && !main_thread) {
      /* a worker's TLS (errno, the OpenMP runtime's thread data) sits above its outermost
       * frame: left out unless an argument points into it; then restored, never compared
       * (it changes with whatever the thread does) */
      uintptr_t tp = thread_pointer(), low = tp;
      if (tp > l && tp < top[g]) {
        dl_iterate_phdr(tls_cb, &low);
        uintptr_t t = (low - 64) & ~(uintptr_t)15; /* a little below: alignment padding */
        if (own_hi < t) cap.stk[n].hi = t > l ? t : l;
        else cap.stk[n].tls_lo = t > l ? t : l;
      }
    }
  }
  return 0;
}

/* ---- loaded objects' data (kinds 6 and 2) ----
 * An argument may point into the executable's or a library's own data: a string literal
 * (XSBench passes "RESULTS" to center_print), a constant table, a global array another unit
 * defines. No heap or stack image holds it, and replay runs in another process: the object
 * the symbol table says holds it is recorded (read-only data without a symbol, a literal:
 * from the argument to its segment's end), and replay maps it at its address. Code
 * segments are left out (a function pointer cannot be replayed this way). */
#define IMAGE_MAX (64ull << 20)
struct seg_find { uintptr_t a, lo, hi, bias; const char *path; int writable, found; };

static int seg_cb(struct dl_phdr_info *info, size_t sz, void *data) {
  (void)sz;
  struct seg_find *f = (struct seg_find *)data;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (ph->p_type != PT_LOAD || f->a < lo || f->a >= hi) continue;
    if (!(ph->p_flags & PF_X)) {
      f->lo = lo;
      f->hi = hi;
      f->bias = info->dlpi_addr;
      f->path = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "/proc/self/exe";
      f->writable = (ph->p_flags & PF_W) != 0;
      f->found = 1;
    }
    return 1;
  }
  return 0;
}

/* The data object holding f->a, from the object file's symbol table (.symtab, else .dynsym):
 * a global array of another unit is compared as itself, not with the rest of its segment,
 * which holds whatever else changes meanwhile (the probes' counters, this runtime's state).
 * 0 and [*lo, *hi) when found. */
static int symbol_extent(const struct seg_find *f, uintptr_t *lo, uintptr_t *hi) {
  int fd = open(f->path, O_RDONLY | O_CLOEXEC), found = 0;
  if (fd < 0) return -1;
  struct stat st;
  void *m = fstat(fd, &st) == 0 && st.st_size > (off_t)sizeof(ElfW(Ehdr))
                ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  close(fd);
  if (m == MAP_FAILED) return -1;
  const unsigned char *b = (const unsigned char *)m;
  size_t len = (size_t)st.st_size;
  const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)m;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_shoff && eh->e_shentsize == sizeof(ElfW(Shdr)) &&
      eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(ElfW(Shdr)) <= len) {
    const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(b + eh->e_shoff);
    for (int pass = 0; pass < 2 && !found; pass++) {
      for (int i = 0; i < eh->e_shnum && !found; i++) {
        if (sh[i].sh_type != (pass ? SHT_DYNSYM : SHT_SYMTAB) || sh[i].sh_entsize != sizeof(ElfW(Sym)) ||
            sh[i].sh_offset + sh[i].sh_size > len)
          continue;
        const ElfW(Sym) *sym = (const ElfW(Sym) *)(b + sh[i].sh_offset);
        for (size_t j = 0; j < sh[i].sh_size / sizeof(ElfW(Sym)); j++) {
          uintptr_t a = f->bias + sym[j].st_value;
          if (ELF64_ST_TYPE(sym[j].st_info) == STT_OBJECT && sym[j].st_size && f->a >= a &&
              f->a < a + sym[j].st_size) {
            *lo = a;
            *hi = a + sym[j].st_size;
            found = 1;
            break;
          }
        }
      }
    }
  }
  munmap(m, len);
  return found ? 0 : -1;
}

static int in_global(const struct r3_kinfo *k, uintptr_t v) {
  for (int64_t i = 0; k->globals && i < k->nglobals; i++) {
    uintptr_t g = (uintptr_t)k->globals[i].addr;
    if (g && v >= g && v < g + (uint64_t)k->globals[i].size) return 1;
  }
  return 0;
}

/* argument slot i as an address no region taken so far holds, else 0: passed by value, below
 * `lowest` (null, or an integer rather than an address), in the arena, in a global the kernel
 * references, or in a stack or loaded-object region already chosen */
static uintptr_t unheld_arg(const struct r3_kinfo *k, const uint64_t *slots, int64_t i, uintptr_t lowest) {
  if (k->byval_sizes && k->byval_sizes[i] > 0) return 0;
  uintptr_t v = (uintptr_t)slots[i];
  if (v < lowest || (v >= g_base && v < g_end) || in_global(k, v)) return 0;
  int held = 0;
  for (int j = 0; j < cap.nstk; j++) held |= v >= cap.stk[j].lo && v < cap.stk[j].hi;
  for (int j = 0; j < cap.nimg; j++) held |= v >= cap.img[j].lo && v < cap.img[j].hi;
  return held ? 0 : v;
}

/* choose the kind-6/2 regions for the argument slots; -1: one would be too large */
HIDDEN int image_regions(struct r3_kinfo *k, const uint64_t *slots) {
  cap.nimg = 0;
  int64_t na = nargs_of(k);
  for (int64_t i = 0; slots && i < na; i++) {
    uintptr_t v = unheld_arg(k, slots, i, 4096);
    if (!v) continue;
    struct seg_find f = {v, 0, 0, 0, NULL, 0, 0};
    dl_iterate_phdr(seg_cb, &f);
    if (!f.found) continue;
    uintptr_t lo = v, hi = f.hi;
    if (symbol_extent(&f, &lo, &hi) && f.writable) {
      warn("not capturing ", k->name ? k->name : "?", ": an argument points into the static data of ", f.path,
           ", whose symbol table does not say where that object ends (stripped?)", NULL);
      return -1;
    }
    if (hi - lo > IMAGE_MAX) {
      if (f.writable) {
        char a[32];
        warn("not capturing ", k->name ? k->name : "?", ": an argument points into a static object of ",
             fmt_u64(a + sizeof a, hi - lo), " bytes (more than 64 MiB to record)", NULL);
        return -1;
      }
      hi = lo + IMAGE_MAX;
    }
    /* a later argument below this one in the same segment: one region from the lower */
    int merged = 0;
    for (int j = 0; j < cap.nimg && !merged; j++)
      if (cap.img[j].hi == hi && lo < cap.img[j].lo) { cap.img[j].lo = lo; merged = 1; }
    if (merged) continue;
    if (cap.nimg == (int)(sizeof cap.img / sizeof cap.img[0])) break;
    cap.img[cap.nimg].lo = lo;
    cap.img[cap.nimg].hi = hi;
    cap.img[cap.nimg].writable = f.writable;
    cap.nimg++;
  }
  return 0;
}

/* ---- memory no image holds ----
 * An argument may point into a mapping that is neither the arena, a stack region, nor a
 * loaded object's data: memory mmap'ed shared or at a fixed address (mmap in mappings.c serves the
 * rest from the arena), another thread's stack, a library's own maps. Replay would not find
 * it: the mappings go into meta.json ("foreign"), and ingest marks the capture unreplayable
 * naming the region, where the argument is a pointer (an integer may look like an address),
 * rather than leave a capture that crashes in replay. Code (a function pointer) is left as
 * before. */
/* one more such mapping, e, reached through argument arg (-1: through the kernel's data) */
HIDDEN void add_foreign(struct r3_kinfo *k, int64_t arg, const struct mapent *e) {
  int n = cap.nforeign;
  if (n == (int)(sizeof cap.foreign / sizeof cap.foreign[0])) return;
  for (int i = 0; i < n; i++)
    if (cap.foreign[i].lo == e->lo) return;
  cap.nforeign = n + 1;
  cap.foreign[n].arg = arg;
  cap.foreign[n].lo = e->lo;
  cap.foreign[n].hi = e->hi;
  memcpy(cap.foreign[n].perms, e->perms, sizeof e->perms);
  size_t l = r3_strlen(e->name);
  if (l >= sizeof cap.foreign[n].name) l = sizeof cap.foreign[n].name - 1;
  memcpy(cap.foreign[n].name, e->name, l);
  cap.foreign[n].name[l] = 0;
  char a[32], b[32];
  warn("capture of ", k->name ? k->name : "?", arg < 0 ? ": the kernel reaches " : ": an argument points into ",
       fmt_hex(a + sizeof a, e->lo), "-", fmt_hex(b + sizeof b, e->hi), " ", e->perms, " ",
       e->name[0] ? e->name : "(anonymous)", ", a mapping no capture holds; it will not replay", NULL);
}

HIDDEN void foreign_args(struct r3_kinfo *k, const uint64_t *slots) {
  cap.nforeign = 0;
  int64_t na = nargs_of(k);
  for (int64_t i = 0; slots && i < na; i++) {
    uintptr_t v = unheld_arg(k, slots, i, 65536);
    struct mapent e;
    if (!v || !mapping_of(v, &e) || strchr(e.perms, 'x')) continue;
    add_foreign(k, i, &e);
  }
}
