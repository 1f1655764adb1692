#ifndef R3MK_H
#define R3MK_H

#define R3MK_VERSION "2.1.0"

/* run-length encode n bytes of in into out (room for 2n bytes); the encoded length */
int r3mk_encode(const unsigned char *in, int n, unsigned char *out);
/* decode what r3mk_encode wrote; the decoded length */
int r3mk_decode(const unsigned char *in, int n, unsigned char *out);

#endif
