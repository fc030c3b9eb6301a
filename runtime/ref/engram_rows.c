#include "runtime/ref/engram_rows.h"
#include "runtime/common/numerics.h"

void ref_engram_row(const uint8_t *values, const uint8_t *scales, int w, uint16_t *out)
{
    for (int i = 0; i < w; i++)
        out[i] = f32_to_bf16(e4m3_to_f32(values[i]) * e8m0_to_f32(scales[i / 32]));
}

void ref_engram_records(const uint8_t *records, int n, int cols, int w, uint16_t *out, int64_t out_stride)
{
    int rb = ref_engram_record_bytes(w);
    for (int p = 0; p < n; p++)
        for (int col = 0; col < cols; col++) {
            const uint8_t *rec = records + ((int64_t)p * cols + col) * rb;
            ref_engram_row(rec, rec + w, w, out + p * out_stride + (int64_t)col * w);
        }
}

void ref_engram_table_rows(const uint8_t *values, const uint8_t *scales, const int64_t *idx, int n, int cols, int w,
                           uint16_t *out, int64_t out_stride)
{
    for (int p = 0; p < n; p++)
        for (int col = 0; col < cols; col++) {
            int64_t row = idx[(int64_t)p * cols + col];
            ref_engram_row(values + row * w, scales + row * (w / 32), w, out + p * out_stride + (int64_t)col * w);
        }
}
