/* CPU reference of the EXL3 families (exl3_recon, exl3_mm, exl3_had; exl3.md §2-§3): the bit-exact tile
 * decoder and packer, full-layer reconstruction, the 128-point Hadamard, and y = x·W with exl3.md §3's
 * rounding points. The GPU kernels are tested against these; the CPU backend computes with them. */
#ifndef DSK_REF_EXL3_H
#define DSK_REF_EXL3_H

#include "runtime/weights/exl3_linear.h"

#include <stdint.h>

/* In the functions below K must be 1..8 and codebook 0..2 (what exl3_linear_get guarantees); they do
 * not check (a codebook outside 0..2 reads as 3INST). */

/* Codebook value (fp16 bits) of a 16-bit trellis state (exl3.md §2.5). */
uint16_t exl3_codebook_value(uint16_t state, int codebook);
/* The whole codebook: 65536 fp16 bit patterns, built once on first use (thread-safe). */
const uint16_t *exl3_codebook_lut(int codebook);

/* The 256 trellis states S_p of one tile (exl3.md §2.3), in trellis order p. */
void exl3_tile_states(const uint16_t *words, int K, uint16_t states[256]);
/* Decode one 16x16 tile: words = its 16·K int16 words as stored, codebook 0 = 3INST, 1 = MCG,
 * 2 = MUL1; out in row-major (r, c) order (r along k, c along n). */
void exl3_decode_tile(const uint16_t *words, int K, int codebook, uint16_t out_fp16[256]);
/* Decode one tile to fp32 values (exact) in row-major (r, c) order, from exl3_codebook_lut_f32. */
void exl3_decode_tile_f32(const uint16_t *words, int K, const float *lut, float out[256]);
/* The codebook as fp32 values, built with the fp16 one. */
const float *exl3_codebook_lut_f32(int codebook);
/* Pack 256 K-bit values v_p (trellis order) into the tile's 16·K words (exl3.md §2.2). */
void exl3_pack_tile(const uint16_t *values, int K, uint16_t *words);
/* Trellis position p of tile element (r, c) (exl3.md §2.4). */
int exl3_tile_position(int r, int c);

/* In place on 128 values: v = H·v / sqrt(128), H the Sylvester Hadamard matrix in natural order.
 * Butterfly stages over bit 1, 2, 4, ..., 64 in fp32, then one multiply by 1/sqrt(128). */
void exl3_hadamard128(float *v);

/* W_hat (k × n fp16, row-major (in, out)): every tile decoded in place. */
void exl3_reconstruct_hat(const exl3_linear *L, uint16_t *w_hat);
/* The same as fp32 values (exact), the input of exl3_matmul_cached. */
void exl3_reconstruct_hat_f32(const exl3_linear *L, float *w_hat);
/* W in the original basis, k × n fp32: diag(suh) · H_k · W_hat · H_n · diag(svh), computed in fp32
 * (row Hadamards, then column Hadamards, then the two scales). */
void exl3_reconstruct(const exl3_linear *L, float *w);

/* The matmul's input stage for m rows: x_had = fp16(Hadamard128(fp16(x·suh))) as fp32 values (m × k).
 * x·suh is one fp32 product (exact when x is fp16 or bf16, as the GPU's input is). */
void exl3_input_transform(const exl3_linear *L, const float *x, int m, float *x_had);
/* The matmul's output stage in place on y' (m × n): y = Hadamard128(y') · svh (+ bias), fp32. */
void exl3_output_transform(const exl3_linear *L, float *y, int m);

/* y = x·W + bias for m rows of x (m × k fp32) into y (m × n fp32), with exl3.md §3's rounding points:
 * xs = fp16(x·suh); x' = fp16(Hadamard128(xs)); y' = x'·W_hat in fp32, each output summed over
 * u = 0..k-1 in ascending order (products exact); y = Hadamard128(y') · svh (+ bias). A row's result
 * does not depend on m. Each tile is decoded once per call. Returns -1 only if scratch (m·k floats)
 * cannot be allocated. */
int exl3_matmul(const exl3_linear *L, const float *x, int m, float *y);
/* The same result bit for bit, from W_hat decoded beforehand by exl3_reconstruct_hat_f32 (for small
 * matrices called many times; the caller owns the cache). */
int exl3_matmul_cached(const exl3_linear *L, const float *w_hat, const float *x, int m, float *y);

#endif
