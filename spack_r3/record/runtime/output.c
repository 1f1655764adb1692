#include "r3rt_internal.h"

/* ------------------------------------------------------------------------- */
/* buffered output to a file descriptor                                        */
/* ------------------------------------------------------------------------- */


/* Memory images are written with O_DIRECT where the file system takes it: a buffered write
 * first allocates page-cache pages, which a VM here fills at ~0.4-0.6 GB/s, against ~3 GB/s
 * straight to the disk (dd, 200 MB), and a capture of tens of GB would push the
 * application's own data out of the page cache. */
#define DIO_ALIGN 4096

static void wb_write(wbuf_t *w, const char *c, size_t n) {
  while (n && !w->err) {
    ssize_t r = write(w->fd, c, n);
    if (r < 0 && errno == EINVAL && w->direct) { /* refused after all: go on buffered */
      fcntl(w->fd, F_SETFL, fcntl(w->fd, F_GETFL) & ~O_DIRECT);
      w->direct = 0;
      continue;
    }
    if (r < 0) { if (errno == EINTR) continue; w->err = errno ? errno : EIO; break; }
    c += r; n -= (size_t)r;
  }
}

HIDDEN void wb_flush(wbuf_t *w) { /* direct: the whole blocks; the rest stays buffered */
  size_t n = w->direct ? w->n & ~(size_t)(DIO_ALIGN - 1) : w->n;
  wb_write(w, w->buf, n);
  if (n < w->n) memmove(w->buf, w->buf + n, w->n - n);
  w->n -= n;
}

HIDDEN void wb_put(wbuf_t *w, const void *p, size_t n) {
  const char *c = (const char *)p;
  w->size += n;
  if (n >= w->cap && !w->direct) { /* large: write straight from the source */
    wb_flush(w);
    wb_write(w, c, n);
    return;
  }
  while (n && !w->err) {
    size_t k = w->cap - w->n < n ? w->cap - w->n : n;
    memcpy(w->buf + w->n, c, k);
    w->n += k;
    c += k;
    n -= k;
    if (w->n == w->cap) wb_flush(w);
  }
}

/* write what is left (direct: the last block padded, then the file cut to its size) */
HIDDEN int wb_finish(wbuf_t *w) {
  if (w->direct && w->n & (DIO_ALIGN - 1)) {
    size_t pad = DIO_ALIGN - (w->n & (DIO_ALIGN - 1));
    memset(w->buf + w->n, 0, pad);
    w->n += pad;
    wb_flush(w);
    if (!w->err && ftruncate(w->fd, (off_t)w->size)) w->err = errno;
  }
  wb_flush(w);
  return w->err;
}

HIDDEN void wb_s(wbuf_t *w, const char *s) { wb_put(w, s, r3_strlen(s)); }
HIDDEN void wb_u(wbuf_t *w, uint64_t v) { char b[32]; wb_s(w, fmt_u64(b + sizeof b, v)); }
HIDDEN void wb_i(wbuf_t *w, int64_t v) {
  if (v < 0) { wb_s(w, "-"); wb_u(w, (uint64_t)0 - (uint64_t)v); }
  else wb_u(w, (uint64_t)v);
}
HIDDEN void wb_hex(wbuf_t *w, uint64_t v) { /* JSON string "0x..." */
  char b[32];
  wb_s(w, "\"");
  wb_s(w, fmt_hex(b + sizeof b, v));
  wb_s(w, "\"");
}
HIDDEN void wb_hexbytes(wbuf_t *w, const void *p, size_t n) { /* JSON string of hex digits */
  static const char hx[] = "0123456789abcdef";
  const unsigned char *b = (const unsigned char *)p;
  char t[256];
  size_t k = 0;
  wb_s(w, "\"");
  for (size_t i = 0; i < n; i++) {
    t[k++] = hx[b[i] >> 4];
    t[k++] = hx[b[i] & 15];
    if (k == sizeof t) { wb_put(w, t, k); k = 0; }
  }
  wb_put(w, t, k);
  wb_s(w, "\"");
}
HIDDEN void wb_jstr(wbuf_t *w, const char *s) { /* JSON string or null */
  static const char hx[] = "0123456789abcdef";
  if (!s) { wb_s(w, "null"); return; }
  wb_s(w, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') { char e[2] = {'\\', (char)c}; wb_put(w, e, 2); }
    else if (c == '\n') wb_s(w, "\\n");
    else if (c == '\t') wb_s(w, "\\t");
    else if (c == '\r') wb_s(w, "\\r");
    else if (c < 0x20 || c == 0x7f) {
      char e[6] = {'\\', 'u', '0', '0', hx[c >> 4], hx[c & 15]};
      wb_put(w, e, 6);
    } else wb_put(w, &c, 1);
  }
  wb_s(w, "\"");
}

HIDDEN void pa(path_t *b, const char *s) {
  size_t l = r3_strlen(s);
  if (b->n + l + 1 > b->cap) { b->ovf = 1; return; }
  memcpy(b->p + b->n, s, l + 1);
  b->n += l;
}
HIDDEN void pa_u(path_t *b, uint64_t v) { char t[32]; pa(b, fmt_u64(t + sizeof t, v)); }

HIDDEN int mkdir_p(char *path) { /* modifies path temporarily */
  for (char *s = path + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    int r = mkdir(path, 0755);
    *s = '/';
    if (r && errno != EEXIST) return -1;
  }
  if (mkdir(path, 0755) && errno != EEXIST) return -1;
  return 0;
}

/* The one way a JSON file of the runtime is finished: the rename makes it whole or absent,
 * and a file size limit fails the write (EFBIG), not the process (SIGXFSZ). */
HIDDEN void wb_commit(wbuf_t *w, const char *tmp, const char *fin) {
  int xfsz = xfsz_ignore();
  wb_flush(w);
  xfsz_restore(xfsz);
  int err = w->err;
  if (close(w->fd) && !err) err = errno;
  if (!err && rename(tmp, fin)) err = errno;
  if (err) {
    warn("cannot write ", fin, ": ", strerror(err), NULL);
    unlink(tmp);
    record_failure(NULL, 0, err, fin);
  }
}
