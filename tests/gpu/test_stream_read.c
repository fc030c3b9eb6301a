/* GPU check of stream_read: the xor fold of a random buffer equals the CPU's. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/stream_read.h"
#include "runtime/ref/stream_read.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void test_stream_read(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0);
    size_t bytes = 64u << 20;
    uint32_t *h = xmalloc(bytes);
    for (size_t i = 0; i < bytes / 4; i++)
        h[i] = (uint32_t)dsk_rng_u64(&r);
    CUdeviceptr d = dev_upload(h, bytes), out = dev_alloc(4096 * 4);
    int blocks = 4 * c->g->sms;
    must(op_stream_read(c->k, c->s, d, bytes, out, blocks), "stream_read");
    uint32_t *o = xmalloc((size_t)blocks * 4);
    dev_download(o, out, (size_t)blocks * 4);
    uint32_t want = ref_stream_read_fold(h, bytes / 4), got = 0;
    for (int b = 0; b < blocks; b++)
        got ^= o[b];
    check(c, got == want, "stream_read", "64 MiB", "xor fold %08x, cpu %08x", got, want);
    dev_free(d);
    dev_free(out);
    free(h);
    free(o);
}
