#include "runtime/ref/vision_glue.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"

#include <math.h>
#include <string.h>

static inline float rnd(int bf16, float x)
{
    return bf16 ? bf16_round(x) : x;
}

void ref_vision_rmsnorm(int bf16, const float *x, int n, int D, const float *w, float *y)
{
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * D;
        float ss = 0.0f;
        for (int k = 0; k < D; k++)
            ss += xi[k] * xi[k];
        float r = 1.0f / sqrtf(ss / (float)D + 1e-6f);
        for (int k = 0; k < D; k++)
            y[(size_t)i * D + k] = rnd(bf16, w[k] * (xi[k] * r));
    }
}

int ref_vision_rope_table(int head_dim, float theta, int nh, int nw, float **cs, float **sn)
{
    int R = head_dim / 2, half = R / 2;
    size_t N = (size_t)nh * nw;
    float f[512];
    *cs = *sn = NULL;
    if (half > 512 || half < 1)
        return dsk_err("vision RoPE: %d frequencies per axis (head dim %d) are outside 1..512", half, head_dim);
    *cs = dsk_malloc(sizeof(float) * N * R);
    *sn = dsk_malloc(sizeof(float) * N * R);
    if (!*cs || !*sn)
        return -1;
    for (int i = 0; i < half; i++)
        f[i] = 1.0f / powf(theta, (float)(2 * i) / (float)R);
    /* patch (row, col) takes cos/sin(row · f[j]) for j < half and cos/sin(col · f[j - half]) after: each
     * distinct angle once, in row 0's table (columns) and each row's first patch (rows), then copied: the
     * same bits as one cosf per entry in nh + nw rather than nh · nw patches' time */
    for (int col = 0; col < nw; col++)
        for (int j = half; j < R; j++) {
            float a = (float)col * f[j - half];
            (*cs)[(size_t)col * R + j] = cosf(a);
            (*sn)[(size_t)col * R + j] = sinf(a);
        }
    for (int row = 0; row < nh; row++) {
        float rc[512], rs[512];
        for (int j = 0; j < half; j++) {
            float a = (float)row * f[j];
            rc[j] = cosf(a);
            rs[j] = sinf(a);
        }
        for (int col = 0; col < nw; col++) {
            size_t at = ((size_t)row * nw + col) * R;
            memcpy(*cs + at, rc, sizeof(float) * (size_t)half);
            memcpy(*sn + at, rs, sizeof(float) * (size_t)half);
            if (row > 0) {
                memcpy(*cs + at + half, *cs + (size_t)col * R + half, sizeof(float) * (size_t)half);
                memcpy(*sn + at + half, *sn + (size_t)col * R + half, sizeof(float) * (size_t)half);
            }
        }
    }
    return 0;
}

void ref_vision_rope(int bf16, float *x, size_t stride, int N, int heads, int hd, const float *cs, const float *sn)
{
    int R = hd / 2;
    for (int i = 0; i < N; i++)
        for (int h = 0; h < heads; h++) {
            float *v = x + (size_t)i * stride + (size_t)h * hd;
            const float *c = cs + (size_t)i * R, *s = sn + (size_t)i * R;
            for (int k = 0; k < R; k++) {
                float u = v[k], w = v[k + R];
                float a = u * c[k], b = w * s[k], e = w * c[k], g = u * s[k];
                v[k] = rnd(bf16, a - b);
                v[k + R] = rnd(bf16, e + g);
            }
        }
}

void ref_vision_s2d(const float *grid, int nh, int nw, int D, int r, float *cells)
{
    int lh = (nh + r - 1) / r, lw = (nw + r - 1) / r;
    size_t cw = (size_t)r * r * D;
    for (int bi = 0; bi < lh; bi++)
        for (int bj = 0; bj < lw; bj++) {
            float *cell = cells + ((size_t)bi * lw + bj) * cw;
            for (int ki = 0; ki < r; ki++)
                for (int kj = 0; kj < r; kj++) {
                    int gy = r * bi + ki, gx = r * bj + kj, inside = gy < nh && gx < nw;
                    const float *g = inside ? grid + ((size_t)gy * nw + gx) * D : NULL;
                    for (int ch = 0; ch < D; ch++)
                        cell[(size_t)ch * r * r + ki * r + kj] = inside ? g[ch] : 0.0f;
                }
        }
}
