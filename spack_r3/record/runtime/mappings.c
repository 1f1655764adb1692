#include "r3rt_internal.h"

/* ------------------------------------------------------------------------- */
/* the application's mappings                                                  */
/* ------------------------------------------------------------------------- */
/* Memory a program maps itself (large buffers, custom allocators, an input file mapped
 * whole) is application data as much as its heap, and a capture holds the arena: a kernel
 * on an mmap'ed array recorded without it crashed in replay. So mmap serves private
 * anonymous read-write mappings, and mappings of regular files that nothing writes back
 * (private, or shared read-only: their contents, read in), from the application's pool,
 * where page tracking and whole-heap images hold them and replay maps them where they
 * were. Shared anonymous or writable shared mappings (memory shared with another process, a
 * file written through memory), fixed addresses, stacks, huge pages, other protections and
 * the runtimes' own maps go to the system; a captured kernel given a pointer into one is
 * marked unreplayable (foreign_args). munmap and mremap follow. */
#undef mmap
#undef munmap
#undef mremap

#define MMAP_COPY_MAX (4ull << 30) /* a larger file is mapped by the system, not read in */

/* a mapping served from the arena: [lo, hi) still mapped, of the block at `block` (its user
 * pointer) whose bytes end at `end` */
struct amap { uintptr_t lo, hi, block, end; };
static struct amap *g_maps; /* sorted by lo; a scratch map, grown as needed */
static size_t g_nmaps, g_maps_cap;

static size_t maps_find(uintptr_t a) { /* the first map with hi > a (lock held) */
  size_t l = 0, r = g_nmaps;
  while (l < r) {
    size_t m = (l + r) / 2;
    if (g_maps[m].hi <= a) l = m + 1;
    else r = m;
  }
  return l;
}

static int maps_add(uintptr_t lo, uintptr_t hi, uintptr_t end) {
  maps_lock();
  if (g_nmaps == g_maps_cap) {
    size_t n = g_maps_cap ? 2 * g_maps_cap : 256;
    void *m = g_maps ? sys_mremap(g_maps, g_maps_cap * sizeof *g_maps, n * sizeof *g_maps, MREMAP_MAYMOVE, NULL)
                     : map_scratch(n * sizeof *g_maps);
    if (!m || m == MAP_FAILED) { maps_unlock(); return -1; }
    g_maps = m;
    g_maps_cap = n;
  }
  size_t i = maps_find(lo);
  memmove(g_maps + i + 1, g_maps + i, (g_nmaps - i) * sizeof *g_maps);
  g_maps[i] = (struct amap){lo, hi, lo, end};
  g_nmaps++;
  maps_unlock();
  return 0;
}

static int served(int prot, int flags, int fd) {
  if (flags & (MAP_FIXED | MAP_FIXED_NOREPLACE | MAP_GROWSDOWN | MAP_STACK | MAP_HUGETLB | MAP_32BIT)) return 0;
  int type = flags & MAP_TYPE;
  /* private anonymous: also reserved (PROT_NONE) for a custom allocator to open later; the
   * arena's pages are open already (a correct program never sees the difference) */
  if (flags & MAP_ANONYMOUS) return type == MAP_PRIVATE && !(prot & ~(PROT_READ | PROT_WRITE));
  if (fd < 0) return 0;
  if (type == MAP_PRIVATE) return prot == PROT_READ || prot == (PROT_READ | PROT_WRITE);
  return type == MAP_SHARED && prot == PROT_READ;
}

/* an arena block of len bytes (a multiple of the page), page-aligned, zeros or fd's contents
 * from off; NULL: let the system map it */
static void *arena_map(size_t len, int fd, off_t off) {
  struct stat st;
  if (fd >= 0 && (fstat(fd, &st) || !S_ISREG(st.st_mode) || off < 0 || (off & (off_t)(g_page - 1)) ||
                  len > MMAP_COPY_MAX))
    return NULL;
  int saved = errno, zero = 0;
  char *p = heap_memalign_z(g_page, len, 0, &zero);
  if (!p) { errno = saved; return NULL; }
  size_t got = 0;
  if (fd >= 0) {
    /* the system writes no protected page (EFAULT): open them first in a tracked capture */
    if (__atomic_load_n(&trk.active, __ATOMIC_ACQUIRE))
      for (size_t i = 0; i < len; i += g_page) ((volatile char *)p)[i] = 0;
    while (got < len) {
      ssize_t r = pread(fd, p + got, len - got, off + (off_t)got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) { heap_free(p); errno = saved; return NULL; } /* the system says why */
      if (r == 0) break; /* past the end of the file: zeros */
      got += (size_t)r;
    }
  }
  if (!zero && got < len) memset(p + got, 0, len - got);
  if (maps_add((uintptr_t)p, (uintptr_t)p + len, (uintptr_t)p + usable_size(p))) { heap_free(p); errno = saved; return NULL; }
  errno = saved;
  return p;
}

static void *app_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off, unsigned own) {
  if (len && len <= (1ull << 46) && served(prot, flags, fd) && !own) {
    void *p = arena_map((len + g_page - 1) & ~(size_t)(g_page - 1), (flags & MAP_ANONYMOUS) ? -1 : fd, off);
    if (p) return p;
  }
  void *p = sys_mmap(addr, len, prot, flags, fd, off);
  if (p != MAP_FAILED && !own)
    sys_add((uintptr_t)p, ((uintptr_t)p + len + g_page - 1) & ~(uintptr_t)(g_page - 1), prot, flags);
  return p;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  return app_mmap(addr, len, prot, flags, fd, off, CALLER_OWNER());
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  return app_mmap(addr, len, prot, flags, fd, off, CALLER_OWNER());
}

int munmap(void *addr, size_t len) {
  uintptr_t a = (uintptr_t)addr;
  if (!g_base || a < g_base || a >= g_end) {
    int r = sys_munmap(addr, len);
    if (!r) sys_remove(a, (a + len + g_page - 1) & ~(uintptr_t)(g_page - 1));
    return r;
  }
  if ((a & (g_page - 1)) || !len) { errno = EINVAL; return -1; }
  uintptr_t b = a + ((len + g_page - 1) & ~(uintptr_t)(g_page - 1));
  for (;;) { /* the blocks whose every page is unmapped now are freed, one at a time */
    uintptr_t gone = 0;
    maps_lock();
    for (size_t i = maps_find(a); i < g_nmaps && g_maps[i].lo < b; i++) {
      struct amap *m = &g_maps[i];
      if (a <= m->lo && b >= m->hi) {
        gone = m->block;
        memmove(m, m + 1, (g_nmaps - i - 1) * sizeof *m);
        g_nmaps--;
        break;
      }
      if (a <= m->lo) m->lo = b; /* the head: unmapped pages stay, unused */
      else if (b >= m->hi) m->hi = a; /* the tail */
      /* a hole in the middle: the block stays whole until the rest is unmapped */
    }
    maps_unlock();
    if (!gone) return 0; /* never fails on arena memory: what is not a mapping stays as it is */
    heap_free((void *)gone);
  }
}

void *mremap(void *old, size_t old_size, size_t new_size, int flags, ...) {
  uintptr_t a = (uintptr_t)old;
  if (!g_base || a < g_base || a >= g_end) {
    void *to = NULL;
    if (flags & MREMAP_FIXED) {
      va_list ap;
      va_start(ap, flags);
      to = va_arg(ap, void *);
      va_end(ap);
    }
    int prot = 0, shared = 0;
    maps_lock();
    for (int i = 0; i < g_nsys; i++)
      if (g_sys[i].lo == a) { prot = g_sys[i].prot; shared = g_sys[i].shared; }
    maps_unlock();
    void *p = sys_mremap(old, old_size, new_size, flags, to);
    if (p != MAP_FAILED && prot) {
      sys_remove(a, a + old_size);
      sys_add((uintptr_t)p, ((uintptr_t)p + new_size + g_page - 1) & ~(uintptr_t)(g_page - 1), prot,
              shared ? MAP_SHARED : MAP_PRIVATE);
    }
    return p;
  }
  (void)old_size; /* the map says how much is mapped */
  if ((flags & ~MREMAP_MAYMOVE) || !new_size || new_size > (1ull << 46) || (a & (g_page - 1))) {
    errno = EINVAL;
    return MAP_FAILED;
  }
  uintptr_t want = (new_size + g_page - 1) & ~(uintptr_t)(g_page - 1), cur = 0;
  maps_lock();
  size_t i = maps_find(a);
  if (i == g_nmaps || g_maps[i].lo != a) { maps_unlock(); errno = EFAULT; return MAP_FAILED; }
  struct amap *m = &g_maps[i];
  if (a + want <= m->end) { /* within its block: shrink, or grow into bytes it already has */
    uintptr_t from = m->hi;
    m->hi = a + want;
    maps_unlock(); /* before the memset: a tracked page faults, and the handler takes trk.lock */
    if (a + want > from) memset((void *)from, 0, a + want - from);
    return old;
  }
  cur = m->hi - a;
  maps_unlock();
  if (!(flags & MREMAP_MAYMOVE)) { errno = ENOMEM; return MAP_FAILED; }
  void *q = arena_map(want, -1, 0);
  if (!q) { errno = ENOMEM; return MAP_FAILED; }
  memcpy(q, old, cur);
  munmap(old, cur);
  return q;
}
