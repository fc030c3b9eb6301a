/* EXL3 weights in a checkpoint (exl3.md §1): the codebooks and the recognition of an EXL3 linear. Its
 * decoding and the CPU reference of y = x·W are in runtime/ref/exl3.h. Rules: docs/weights.md. */
#ifndef DSK_WEIGHTS_EXL3_LINEAR_H
#define DSK_WEIGHTS_EXL3_LINEAR_H

#include "runtime/weights/safetensors.h"

#include <stdint.h>

enum {
    EXL3_CB_3INST = 0, /* no .mcg / .mul1 tensor */
    EXL3_CB_MCG = 1,   /* .mcg present */
    EXL3_CB_MUL1 = 2,  /* .mul1 present */
};

/* The locked codebook multipliers (exl3.md §1.3) as stored in the .mcg / .mul1 I32 scalars. */
#define EXL3_MCG_MULT 0xCBAC1FEDu
#define EXL3_MUL1_MULT 0x83DCD12Du
/* Largest in or out feature count exl3_linear_get accepts (the model's widest is 129280). */
#define EXL3_MAX_FEATURES (INT64_C(1) << 31)

/* One EXL3 linear y = x·W, W of shape (k × n); all pointers into the checkpoint's mapping. */
typedef struct {
    const char *name;       /* "<prefix>.trellis", owned by the set */
    int64_t k, n;           /* in and out features, multiples of 128 */
    int K;                  /* bits per weight, 1..8 */
    int codebook;           /* EXL3_CB_* */
    const uint16_t *trellis; /* [k/16][n/16][16·K] */
    const uint16_t *suh;     /* [k] fp16 */
    const uint16_t *svh;     /* [n] fp16 */
    const void *bias;        /* [n] fp16 or fp32, or NULL */
    int bias_is_f32;
} exl3_linear;

/* Recognize <prefix>.trellis/.suh/.svh/.mcg/.mul1/.bias and check them (docs/weights.md). The error
 * names the tensor and what is wrong. */
int exl3_linear_get(const st_set *set, const char *prefix, exl3_linear *out);
/* 1 if any tensor of an EXL3 linear exists under prefix (then exl3_linear_get decides), else 0. */
int exl3_linear_is_present(const st_set *set, const char *prefix);

#endif
