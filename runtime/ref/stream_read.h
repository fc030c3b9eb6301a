/* CPU reference of the stream_read family: the xor of every 32-bit word of a buffer (the kernel folds
 * each block's share into one word; the xor of those words is this). */
#ifndef DSK_REF_STREAM_READ_H
#define DSK_REF_STREAM_READ_H

#include <stddef.h>
#include <stdint.h>

uint32_t ref_stream_read_fold(const uint32_t *words, size_t n);

#endif
