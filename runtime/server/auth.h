/* API keys (--api-key-file): one key per line, or "sha256:" and its 64 hex digits. Only the digests are
 * kept; a presented key is hashed and compared with every digest in constant time. */
#ifndef DSK_SERVER_AUTH_H
#define DSK_SERVER_AUTH_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t (*digests)[32];
    size_t n;
} srv_keys;

/* Read the key file. Refused: not a regular file, readable or writable by group or others, over 1 MiB,
 * no key in it, a malformed sha256: line (the message names the line). */
int srv_keys_load(const char *path, srv_keys *out);
void srv_keys_free(srv_keys *k);
/* Whether an "Authorization" header value ("Bearer KEY") carries one of the keys. With no keys loaded
 * every request passes. */
int srv_keys_check(const srv_keys *k, const char *authorization);

#endif
