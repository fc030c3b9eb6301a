/* The tensors a checkpoint holds for a config: names (inference-style, model.md §4), kinds, shapes and
 * EXL3 bit widths. The loader reads exactly this list and `dskit mkmodel` writes exactly this list, so
 * the two cannot drift apart. See docs/model.md "Checkpoint" for the storage of each kind. */
#ifndef DSK_MODEL_SCHEMA_H
#define DSK_MODEL_SCHEMA_H

#include "runtime/model/config.h"

#include <stdint.h>

typedef enum {
    /* EXL3 linear y = x·W, W (in × out): `<name>.trellis` I16 [in/16, out/16, 16·bits], `<name>.suh` F16
     * [in], `<name>.svh` F16 [out], and a 0-dim I32 `<name>.mul1` (default) or `<name>.mcg` selecting the
     * codebook (exl3.md §1.1). shape = {in, out}. */
    TENSOR_EXL3,
    /* bf16 tensor `<name>`; norm weights and engram q/k may also be stored F32 (allow_f32), and are then
     * rounded to bf16 on load, as REF holds them (model.md §2, §8.1). */
    TENSOR_BF16,
    TENSOR_F32,      /* f32 tensor `<name>` */
    /* FP8 rows: `<name>.weight` F8_E4M3 [rows, width] and `<name>.scale` F8_E8M0 [rows, width/32], one
     * power-of-two scale per 32 values of a row (the Engram tables). shape = {rows, width}. */
    TENSOR_F8_ROWS,
    TENSOR_I32,      /* int32 table `<name>` */
    TENSOR_I64,      /* int64 table `<name>` */
} tensor_kind;

typedef struct {
    char name[96];    /* stored name (TENSOR_EXL3 / TENSOR_F8_ROWS: the key before the suffixes) */
    tensor_kind kind;
    int ndim;         /* 0 for a scalar */
    int64_t shape[3]; /* HF order [out, in] for 16-bit matrices; {in, out} for EXL3; {rows, width} F8 rows */
    int bits;         /* EXL3 bits per weight K (1..8); 0 otherwise */
    int allow_f32;    /* TENSOR_BF16 that may be stored as F32 */
    int allow_bf16;   /* TENSOR_F32 that may be stored as BF16 (widened exactly on load: the vision norms) */
} schema_tensor;

/* Every tensor the model loads for config c, in a fixed order (top level, then layers, then DSpark
 * stages). *out is malloc'd; free it with free(). Fails, naming the tensor, if an EXL3 linear's in or out
 * is not a multiple of 128 (the Hadamard block). */
int model_schema(const model_config *c, schema_tensor **out, int *n_out);

/* EXL3 bits of the routed experts of layer l (backbone): even layers 2, odd layers 3 (mean 2.5 bpw,
 * model.md §4.1; one K per layer as upstream requires). */
int schema_expert_bits(int layer);

#endif
