/* Host launcher of the stream_read family (kit/src/stream_read.cu): the streaming-read roofline.
 * The variant comes from the family's rule (manifest/rules/rules.h), the kernel from the kit by family and
 * parameters, never by file. */
#ifndef DSK_LAUNCH_STREAM_READ_H
#define DSK_LAUNCH_STREAM_READ_H

#include "runtime/driver/kit.h"

#include <stddef.h>
#include <stdint.h>

/* Read `bytes` (a multiple of 16) from src with `blocks` blocks; one u32 per block to out. */
int op_stream_read(const kit *k, CUstream s, CUdeviceptr src, uint64_t bytes, CUdeviceptr out, int blocks);

#endif
