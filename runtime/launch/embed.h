/* Host launcher of the embed family (kit/src/embed.cu; reference runtime/ref/embed.h). The variant comes
 * from the family's rule (manifest/rules/rules.h), the kernel from the kit by family and parameters. */
#ifndef DSK_LAUNCH_EMBED_H
#define DSK_LAUNCH_EMBED_H

#include "runtime/driver/kit.h"

/* x [rows][hc][d] bf16 = table[ids[r]] (bf16 [vocab][d]) in every stream, pi [rows][hc] fp32 = one-hot(0).
 * ids: i32 [rows], validated by the caller: an id outside [0, vocab) is not read and gives zero streams.
 * Pointers 16-byte aligned, d a multiple of 8. */
int op_embed(const kit *k, CUstream s, CUdeviceptr table, int vocab, CUdeviceptr ids, CUdeviceptr x, CUdeviceptr pi,
             int rows, int hc, int d);

#endif
