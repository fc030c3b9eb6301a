/* SHA-256 (FIPS 180-4), for API keys: the server keeps only digests and compares them in constant time.
 * None of the Debian libraries dskit already links provides it (libarchive, xxhash do not). */
#ifndef DSK_SERVER_SHA256_H
#define DSK_SERVER_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t len;     /* bytes hashed so far */
    uint8_t buf[64];  /* a partial block */
    size_t nbuf;
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
void sha256_final(sha256_ctx *c, uint8_t out[32]);
void sha256(const void *data, size_t n, uint8_t out[32]);

/* Whether a and b (n bytes each) are equal, in time that depends on n only. */
int sha256_equal_ct(const uint8_t *a, const uint8_t *b, size_t n);

#endif
