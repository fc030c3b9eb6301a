// Hopper's warpgroup MMA (wgmma, sm_90a): D[64 x N] += A[64 x 16] · B[N x 16]ᵀ with bf16 operands read from
// shared memory through matrix descriptors and fp32 D in registers, issued by one warpgroup (four warps,
// 128 threads) together. Both operands are K-major tiles of 128-byte rows (64 bf16) in the 128-byte swizzle:
// row r of a tile whose base is 1024-byte aligned is at r * 128, its 16-byte chunk c at chunk c ^ (r % 8);
// eight rows (1024 bytes) are one swizzle atom, the descriptor's stride between atoms. The k16 slice kk of
// such a tile starts kk * 32 bytes into row 0 (dsk_wgmma_desc(base + 32 kk)).
// D's layout (per warp w of the warpgroup, lane l, g = l / 4, t = l % 4): register 4j + 2h + e holds
// D[16w + g + 8h][8j + 2t + e], the mma.m16n8 layout of dsk_mma.cuh repeated over N / 8 column tiles.
// Ordering: smem written by the threads (cp.async or stores) is made visible to wgmma with
// dsk_fence_proxy_async by the writer before the barrier; dsk_wgmma_fence before the first wgmma that
// uses registers the threads wrote; dsk_wgmma_commit closes a group, dsk_wgmma_wait<N> leaves at most N
// groups of this warpgroup in flight (then their D and smem reads are done).
// Under DSK_EMU the emulator runs each wgmma when a wait covers it, from the descriptors, per thread: a
// stage overwritten before its wait gives wrong sums there as it would on the GPU.
#pragma once
#include "dskit_kernel.cuh"

// Descriptor of a K-major 128-byte-swizzled tile at shared address saddr (16-byte units; LBO unused with
// this swizzle: 1; SBO 1024 bytes between 8-row atoms; layout type 1 = 128-byte swizzle).
__device__ __forceinline__ u64 dsk_wgmma_desc(u32 saddr)
{
    return (u64)((saddr & 0x3ffffu) >> 4) | (u64)1 << 16 | (u64)(1024 >> 4) << 32 | (u64)1 << 62;
}

#ifndef DSK_EMU
__device__ __forceinline__ void dsk_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void dsk_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void dsk_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void dsk_wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// D[64 x 256] += A[64 x 16] · B[256 x 16]ᵀ, both operands in shared memory (descriptors), fp32 D in 128
// registers per thread. Asynchronous: D may not be read or written until dsk_wgmma_wait has covered it.
__device__ __forceinline__ void dsk_wgmma_m64n256k16_bf16(float d[128], u64 da, u64 db)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,"
        "%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,"
        "%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,"
        "%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,"
        "%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,"
        "%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]),
          "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
          "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),
          "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]),
          "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(1)
        : "memory");
}

// D[64 x 128] += A[64 x 16] · B[128 x 16]ᵀ, both operands in shared memory (descriptors), fp32 D in 64
// registers per thread. Asynchronous: D may not be read or written until dsk_wgmma_wait has covered it.
__device__ __forceinline__ void dsk_wgmma_m64n128k16_bf16(float d[64], u64 da, u64 db)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,"
        "%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,"
        "%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(1)
        : "memory");
}

#else
// The emulator: a wgmma is recorded with the group it belongs to and run when a wait covers the group.
struct dsk_emu_wg_op {
    u64 da, db;
    float *d;
    int n, group;
};
#define DSK_EMU_WG_OPS 16
static dsk_emu_wg_op dsk_emu_wg[1024][DSK_EMU_WG_OPS];
static int dsk_emu_wg_n[1024], dsk_emu_wg_groups[1024];

// Element (r, k) of the K-major swizzled matrix a descriptor names.
__device__ __forceinline__ float dsk_emu_wg_elem(u64 desc, int r, int k)
{
    u32 a = (u32)(desc & 0x3fffu) << 4, sbo = (u32)((desc >> 32) & 0x3fffu) << 4;
    a += (u32)(r / 8) * sbo + (u32)(r % 8) * 128u + (u32)k * 2u;
    a ^= ((a >> 7) & 7u) << 4;
    return bf16_bits_to_f32(*(const u16 *)(emu_dynamic_smem() + a));
}
__device__ __forceinline__ void dsk_emu_wg_run(const dsk_emu_wg_op &o)
{
    const int t = threadIdx.x & 127, w = t >> 5, g = (t & 31) >> 2, q = t & 3;
    for (int j = 0; j < o.n / 8; j++)
        for (int e = 0; e < 4; e++) {
            int r = 16 * w + g + 8 * (e >> 1), c = 8 * j + 2 * q + (e & 1);
            float s = o.d[4 * j + e];
            for (int k = 0; k < 16; k++)
                s += dsk_emu_wg_elem(o.da, r, k) * dsk_emu_wg_elem(o.db, c, k);
            o.d[4 * j + e] = s;
        }
}
__device__ __forceinline__ void dsk_emu_wg_issue(float *d, u64 da, u64 db, int n)
{
    const int t = threadIdx.x;
    if (dsk_emu_wg_n[t] == DSK_EMU_WG_OPS)
        emu_fail("wgmma: more than %d in flight in thread %d (a dsk_wgmma_wait is missing)", DSK_EMU_WG_OPS, t);
    dsk_emu_wg[t][dsk_emu_wg_n[t]++] = {da, db, d, n, dsk_emu_wg_groups[t]};
}
__device__ __forceinline__ void dsk_fence_proxy_async() {}
__device__ __forceinline__ void dsk_wgmma_fence() {}
__device__ __forceinline__ void dsk_wgmma_commit() { dsk_emu_wg_groups[threadIdx.x]++; }
template <int N> __device__ __forceinline__ void dsk_wgmma_wait()
{
    const int t = threadIdx.x, done = dsk_emu_wg_groups[t] - N; /* groups below this one must be done */
    int k = 0;
    for (int i = 0; i < dsk_emu_wg_n[t]; i++)
        if (dsk_emu_wg[t][i].group < done)
            dsk_emu_wg_run(dsk_emu_wg[t][i]);
        else
            dsk_emu_wg[t][k++] = dsk_emu_wg[t][i];
    dsk_emu_wg_n[t] = k;
}
__device__ __forceinline__ void dsk_wgmma_m64n256k16_bf16(float d[128], u64 da, u64 db) { dsk_emu_wg_issue(d, da, db, 256); }
__device__ __forceinline__ void dsk_wgmma_m64n128k16_bf16(float d[64], u64 da, u64 db) { dsk_emu_wg_issue(d, da, db, 128); }
#endif
