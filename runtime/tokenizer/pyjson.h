/* JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it, because the
 * reference chat encoder (encoding.py) puts such text into prompts: ", " and ": " separators, keys in
 * insertion order, non-ASCII characters as they are, and floats in Python's shortest repr. */
#ifndef DSK_PYJSON_H
#define DSK_PYJSON_H

#include <jansson.h>

#include "runtime/common/util.h"

int pyjson_dump(dsk_buf *out, const json_t *value);

#endif
