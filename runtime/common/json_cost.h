/* What parsing a JSON text with jansson will cost in memory, estimated in one pass over the bytes and
 * without allocating, so a reader can refuse a hostile document before building it: a 16 MiB file of
 * empty objects costs jansson about 1.3 GB (230 bytes an object), a 16 MiB tokenizer.json of a real
 * vocabulary about 100 MB. The estimate is what jansson 2.x was measured to take per value on x86-64
 * (an object 240 bytes, an array 144, a string or key 96, another scalar 48) plus the text's bytes; it
 * is an estimate of a well-formed document: a malformed one fails in jansson afterwards. */
#ifndef DSK_JSON_COST_H
#define DSK_JSON_COST_H

#include <stddef.h>

/* The estimated bytes jansson needs to parse the len bytes of text. */
size_t dsk_json_cost(const char *text, size_t len);

#endif
