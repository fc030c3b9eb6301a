// What the mhc kernels (kit/src/mhc_mix.cu, mhc_pre.cu) and their host launcher (runtime/launch/mhc.c)
// share. Plain C, valid C++; the host includes this file too.
#pragma once

// mhc_mix: the flattened streams (K = hc·d inputs) are cut into chunks of MHC_MIX_CHUNK inputs; each
// chunk's partial sums are stored in MHC_MIX_SLOTS floats (slot s < M: dot with hc_fn row s; slot M: the
// sum of squares; the rest unused) and the fold adds the chunks in chunk order. The chunk is fixed, so
// the order of every sum depends on K only.
#define MHC_MIX_CHUNK 256
#define MHC_MIX_SLOTS 32
#define MHC_MIX_MAX_HC 4        // M + 1 = (2 + hc)·hc + 1 sums must fit the 32 lanes of a warp
#define MHC_MIX_MAX_ROWS_CTA 64 // rows one CTA of the partial step stages in shared memory
#define MHC_MIX_SLAB 1024       // rows per launch: the workspace holds one slab
#define MHC_MIX_NCHUNK(K) (((K) + MHC_MIX_CHUNK - 1) / MHC_MIX_CHUNK)
#define MHC_MIX_THREADS 256 // threads per CTA (8 warps); the fused hc_pre's rows take this many
// arrival counters (u32, zero at rest) a launch needs: one per row block of a slab
#define MHC_MIX_COUNTERS MHC_MIX_SLAB
// workspace bytes for a slab of `rows` rows of K inputs
#define MHC_MIX_WS_BYTES(rows, K) ((size_t)(rows) * (size_t)MHC_MIX_NCHUNK(K) * MHC_MIX_SLOTS * 4)

// mhc_pre: the widest row the fused RMSNorm keeps in shared memory (bf16 elements).
#define MHC_PRE_MAX_D 16384
