// EXL3 tile decode, lane by lane (exl3.md §2): lane l of a warp turns the trellis words of one 16x16
// tile into the four fp16x2 registers of an mma.m16n8k16 A fragment of the TRANSPOSED tile,
// A[i][k] = W_hat[k][i] (i = output column, k = input row). Lane l decodes trellis positions
// 8l..8l+7 (§2.4), which are exactly that fragment: {e0,e1} = A[l/4][2(l%4)+0,1], {e4,e5} = A[l/4+8][..],
// {e2,e3} = A[l/4][2(l%4)+8,9], {e6,e7} = A[l/4+8][2(l%4)+8,9].
//
// The file is plain C that is also valid C++: the kernels include it with the CUDA primitives below,
// and the CPU test tests/exl3gpu/test_exl3_dq.c includes it with host versions of the same primitives
// (EXL3_HOST_PRIMITIVES), so the bit manipulation is checked against the CPU decoder without a GPU.
// K (bits per weight) and CB (codebook) are compile-time constants at every call site; every branch
// on them folds away.
#pragma once

#ifdef __CUDACC__
#include "dskit_kernel.cuh"
#define EXL3_FN __device__ __forceinline__
typedef unsigned int exl3_u32;
// Upper 32 bits of (hi:lo) << s, s in 0..31.
EXL3_FN exl3_u32 exl3_fshl(exl3_u32 lo, exl3_u32 hi, exl3_u32 s) { return __funnelshift_l(lo, hi, s); }
// Bytes of {b:a} picked by the 4 selector nibbles (values 0..7).
EXL3_FN exl3_u32 exl3_prmt(exl3_u32 a, exl3_u32 b, exl3_u32 sel) { return __byte_perm(a, b, sel); }
// c + sum of the 4 unsigned bytes of a times those of b.
EXL3_FN exl3_u32 exl3_dp4a(exl3_u32 a, exl3_u32 b, exl3_u32 c) { return __dp4a(a, b, c); }
// (a AND b) XOR c in one LOP3.
EXL3_FN exl3_u32 exl3_andxor(exl3_u32 a, exl3_u32 b, exl3_u32 c)
{
    exl3_u32 d;
    asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
// fp16x2 a*b + c, round to nearest even, on packed bits.
EXL3_FN exl3_u32 exl3_hfma2(exl3_u32 a, exl3_u32 b, exl3_u32 c)
{
    exl3_u32 d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
// {lo(a) + hi(a), lo(b) + hi(b)} in fp16, round to nearest even: two HADD2 with half selectors and a
// PRMT, so more of the work leaves the integer ALU pipe than with two PRMTs and one HADD2.
EXL3_FN exl3_u32 exl3_hsum2(exl3_u32 a, exl3_u32 b)
{
    exl3_u32 d;
    asm("{.reg .f16 a0, a1, b0, b1, va, vb;\n\t"
        "mov.b32 {a0, a1}, %1;\n\t"
        "mov.b32 {b0, b1}, %2;\n\t"
        "add.rn.f16 va, a0, a1;\n\t"
        "add.rn.f16 vb, b0, b1;\n\t"
        "mov.b32 %0, {va, vb};}"
        : "=r"(d)
        : "r"(a), "r"(b));
    return d;
}
#else
#ifndef EXL3_HOST_PRIMITIVES
#error "exl3_dq.cuh: outside NVRTC, define EXL3_HOST_PRIMITIVES and the exl3_* primitives first"
#endif
#endif

#define EXL3_MCG_MULT_U 0xCBAC1FEDu
#define EXL3_MUL1_MULT_U 0x83DCD12Du
#define EXL3_3INST_MULT_U 89226354u
#define EXL3_3INST_ADD_U 64248484u

// Words (32-bit) one lane loads per tile, and the aligned registers they are funnelled into.
//   field  = stream bits [(8l+1)K-16, (8l+8)K) (mod 256K) holding the lane's 8 states, 7K+16 bits;
//   o_l    = position of the field's first bit inside its first word (MSB first);
//   delta  = lane-invariant part of o_l; K = 4 and 8 have o_l the same on every lane (20, 24) and use
//            the loaded words as they are, the other K shift them by o_l - delta first (one funnel
//            shift per aligned register) so that every state sits at a compile-time position.
#define EXL3_NW(K) ((K) <= 4 ? 2 : 3)
#define EXL3_DELTA(K) ((K) == 4 ? 20 : (K) == 8 ? 24 : (K))
#define EXL3_NR(K) ((EXL3_DELTA(K) + 7 * (K) + 16 + 31) / 32)
#define EXL3_ALIGNED(K) ((K) == 4 || (K) == 8)

typedef struct {
    int word[3];  // word index (0..8K-1) of the lane's j-th loaded word
    int shift;    // funnel shift o_l - delta (K = 3: 48 - o_l, the 64-bit shift of the lane's first state)
} exl3_lane;

// Per-lane constants of the tile geometry (the same for every tile of a matrix).
EXL3_FN exl3_lane exl3_lane_setup(int K, int lane)
{
    exl3_lane L;
    int bits = 256 * K;
    int f = ((8 * lane + 1) * K - 16 + bits) % bits;
    int w0 = f >> 5;
    int o = f & 31;
    for (int j = 0; j < 3; j++)
        L.word[j] = (w0 + j) % (8 * K);
    L.shift = EXL3_ALIGNED(K) ? 0 : K == 3 ? 48 - o : o - EXL3_DELTA(K);
    return L;
}

// The 16-bit state at MSB-first position p of the register array R (R[0] first), p a constant.
EXL3_FN exl3_u32 exl3_state_at(const exl3_u32 *R, int p)
{
    int j = p >> 5, r = p & 31;
    if (r > 16)
        return exl3_fshl(R[j + 1], R[j], (exl3_u32)r) >> 16;
    int b = 16 - r;
    if (b == 0)
        return R[j] & 0xFFFFu;
    if (b == 16)
        return R[j] >> 16;
    if (b == 8)
        return exl3_prmt(R[j], 0u, 0x4421u);
    return (R[j] >> b) & 0xFFFFu;
}

// The lane's 8 states s[e] (e = 0..7, trellis positions 8l+e) from its loaded words W[0..NW-1].
EXL3_FN void exl3_states(int K, const exl3_u32 *W, exl3_u32 sh, exl3_u32 *s)
{
    exl3_u32 R[3];
    if (K == 3) {
    } else if (EXL3_ALIGNED(K)) {
        R[0] = W[0];
        R[1] = W[1];
        R[2] = EXL3_NW(K) > 2 ? W[2] : 0u;
    } else {
        for (int j = 0; j < 3; j++) {
            if (j < EXL3_NR(K))
                R[j] = j + 1 < EXL3_NW(K) ? exl3_fshl(W[j + 1], W[j], sh) : W[j] << sh;
            else
                R[j] = 0u;
        }
    }
    if (K == 4) {
        // windows at MSB-first positions 4, 8 and 28 (the words themselves sit at 0 and 32): 11 ops
        exl3_u32 d4 = exl3_fshl(R[1], R[0], 4u), d8 = exl3_fshl(R[1], R[0], 8u), d28 = exl3_fshl(R[1], R[0], 28u);
        s[0] = d4 & 0xFFFFu;                 // p 20
        s[1] = d8 & 0xFFFFu;                 // p 24
        s[2] = d28 >> 16;                    // p 28
        s[3] = R[1] >> 16;                   // p 32
        s[4] = exl3_prmt(d28, 0u, 0x4421u);  // p 36
        s[5] = exl3_prmt(R[1], 0u, 0x4421u); // p 40
        s[6] = d28 & 0xFFFFu;                // p 44
        s[7] = R[1] & 0xFFFFu;               // p 48
        return;
    }
    if (K == 3) {
        // 37 bits inside one 64-bit window: one 64-bit shift by a per-lane amount and a mask per state,
        // no alignment (16 ops); `sh` holds 48 - o_l, the shift of state 0
        unsigned long long X = ((unsigned long long)W[0] << 32) | W[1];
        for (int e = 0; e < 8; e++)
            s[e] = (exl3_u32)(X >> (sh - 3 * e)) & 0xFFFFu;
        return;
    }
    if (K == 2) {
        // p = 2..16 in R[0]; windows R<<2, R<<4, R<<6 give each state a byte-aligned home: 12 ops
        exl3_u32 d2 = R[0] << 2, d4 = R[0] << 4, d6 = R[0] << 6;
        // (the top halves through PRMT: ptxas turns (R << a) >> 16 back into a shift and a mask)
        s[0] = exl3_prmt(d2, 0u, 0x4432u);   // p 2
        s[1] = exl3_prmt(d4, 0u, 0x4432u);   // p 4
        s[2] = exl3_prmt(d6, 0u, 0x4432u);   // p 6
        s[3] = exl3_prmt(R[0], 0u, 0x4421u); // p 8
        s[4] = exl3_prmt(d2, 0u, 0x4421u);   // p 10
        s[5] = exl3_prmt(d4, 0u, 0x4421u);   // p 12
        s[6] = exl3_prmt(d6, 0u, 0x4421u);   // p 14
        s[7] = R[0] & 0xFFFFu;               // p 16
        return;
    }
    for (int e = 0; e < 8; e++)
        s[e] = exl3_state_at(R, EXL3_DELTA(K) + e * K);
}

// Two states -> fp16x2 (low half = sa), codebook CB (exl3.md §2.5).
EXL3_FN exl3_u32 exl3_pair(int CB, exl3_u32 sa, exl3_u32 sb)
{
    if (CB == 2) {
        // MUL1: byte sum + 0x6400 is the fp16 bit pattern of h = 1024 + B; one fp16 fma finishes both
        exl3_u32 ha = exl3_dp4a(sa * EXL3_MUL1_MULT_U, 0x01010101u, 0x6400u);
        exl3_u32 hb = exl3_dp4a(sb * EXL3_MUL1_MULT_U, 0x01010101u, 0x6400u);
        return exl3_hfma2(exl3_prmt(ha, hb, 0x5410u), 0x1EEE1EEEu, 0xC931C931u);
    }
    exl3_u32 xa, xb;
    if (CB == 1) {
        xa = sa * EXL3_MCG_MULT_U;
        xb = sb * EXL3_MCG_MULT_U;
    } else {
        xa = sa * EXL3_3INST_MULT_U + EXL3_3INST_ADD_U;
        xb = sb * EXL3_3INST_MULT_U + EXL3_3INST_ADD_U;
    }
    return exl3_hsum2(exl3_andxor(xa, 0x8FFF8FFFu, 0x3B603B60u), exl3_andxor(xb, 0x8FFF8FFFu, 0x3B603B60u));
}

// Decode the lane's part of one tile into its A fragment a[0..3] (see the top of the file).
EXL3_FN void exl3_decode_frag(int K, int CB, const exl3_u32 *W, exl3_u32 sh, exl3_u32 *a)
{
    exl3_u32 s[8];
    exl3_states(K, W, sh, s);
    a[0] = exl3_pair(CB, s[0], s[1]);
    a[1] = exl3_pair(CB, s[4], s[5]);
    a[2] = exl3_pair(CB, s[2], s[3]);
    a[3] = exl3_pair(CB, s[6], s[7]);
}
