#include "runtime/model/engram_layout.h"
#include "runtime/common/error.h"

#include <inttypes.h>
#include <string.h>

/* Deterministic trial division: the candidates are around 10^7 (real config) or tiny, so at most a few
 * thousand divisions each, for a few dozen primes. */
static int is_prime(int64_t n)
{
    if (n < 2)
        return 0;
    if (n % 2 == 0)
        return n == 2;
    for (int64_t d = 3; d <= n / d; d += 2)
        if (n % d == 0)
            return 0;
    return 1;
}

static int64_t next_prime(int64_t n)
{
    do
        n++;
    while (!is_prime(n));
    return n;
}

static int taken(const engram_layout *lay, int64_t p, int upto_layer, int upto_col)
{
    for (int l = 0; l <= upto_layer; l++)
        for (int c = 0; c < (l == upto_layer ? upto_col : lay->n_cols); c++)
            if (lay->primes[l][c] == p)
                return 1;
    return 0;
}

int engram_layout_init(engram_layout *lay, const int *layer_ids, int n_layers, int max_ngram, int n_heads,
                       int64_t vocab_size)
{
    memset(lay, 0, sizeof *lay);
    if (n_layers < 0 || n_layers > ENGRAM_MAX_LAYERS)
        return dsk_err("engram: %d Engram layers (supported: 0..%d)", n_layers, ENGRAM_MAX_LAYERS);
    if (max_ngram < 2 || max_ngram > ENGRAM_MAX_NGRAM)
        return dsk_err("engram: engram_max_ngram_size %d (supported: 2..%d)", max_ngram, ENGRAM_MAX_NGRAM);
    if (n_heads < 1 || n_heads > ENGRAM_MAX_HEADS)
        return dsk_err("engram: engram_n_heads %d (supported: 1..%d)", n_heads, ENGRAM_MAX_HEADS);
    if (vocab_size < 1 || vocab_size > ((int64_t)1 << 40))
        return dsk_err("engram: engram_vocab_size %" PRId64 " out of range [1, 2^40]", vocab_size);
    lay->n_layers = n_layers;
    lay->max_ngram = max_ngram;
    lay->n_heads = n_heads;
    lay->n_cols = (max_ngram - 1) * n_heads;
    lay->vocab_size = vocab_size;
    lay->pad = -1;
    for (int l = 0; l < n_layers; l++) {
        lay->layer_ids[l] = layer_ids[l];
        int64_t off = 0;
        for (int o = 0; o < max_ngram - 1; o++) {
            /* REF restarts every (layer, order) at vocab_size − 1 and skips primes already taken */
            int64_t p = vocab_size - 1;
            for (int h = 0; h < n_heads; h++) {
                int col = o * n_heads + h;
                do
                    p = next_prime(p);
                while (taken(lay, p, l, col));
                lay->primes[l][col] = p;
                lay->offsets[l][col] = off;
                off += p;
            }
        }
        lay->rows[l] = off;
    }
    return 0;
}

int engram_layout_check_rows(const engram_layout *lay, const int64_t *num_embeddings)
{
    for (int l = 0; l < lay->n_layers; l++)
        if (lay->rows[l] != num_embeddings[l])
            return dsk_err("engram: layer %d (Engram index %d) has %" PRId64 " bucket rows by the layout of "
                           "engram_vocab_size %" PRId64 ", but config engram_num_embeddings says %" PRId64,
                           lay->layer_ids[l], l, lay->rows[l], lay->vocab_size, num_embeddings[l]);
    return 0;
}

int64_t engram_multiplier_bound(int64_t compressed_vocab)
{
    int64_t b = INT64_MAX / (compressed_vocab > 0 ? compressed_vocab : 1) / 2;
    return b > 1 ? b : 1;
}

/* Values of REF's draw, keyed by (layer id, compressed vocabulary size). The release rows are quoted in
 * model.md §3.3, the tiny rows in §7.1; the layer-* preset row (layer 0, vocabulary 99092) was drawn here
 * with the same formula (numpy 2.4.6, whose PCG64 stream reproduces the release rows exactly). */
static const struct {
    int layer_id;
    int64_t compressed_vocab;
    int64_t mult[4];
} stored_multipliers[] = {
    {1, 99092, {76632096046245, 4839876093313, 35959672319349, 73987337458391}},
    {14, 99092, {67716810739261, 51510806800915, 30921347202721, 82619226485591}},
    {1, 1000, {7593627661414631, 479593001838623, 3563315849468963, 7331553243427023}},
    {2, 1000, {7581278190532785, 3676095719277115, 2244174728982399, 7077601700902431}},
    {0, 99092, {59287678272599, 25111444230055, 3813769577005, 1538373747317}},
};

int engram_stored_multipliers(int layer_id, int64_t compressed_vocab, int max_ngram, int64_t *mult)
{
    if (max_ngram != 4)
        return dsk_err("engram: no stored multipliers for engram_max_ngram_size %d (the table holds size 4); "
                       "the checkpoint must ship them",
                       max_ngram);
    for (size_t i = 0; i < sizeof stored_multipliers / sizeof stored_multipliers[0]; i++)
        if (stored_multipliers[i].layer_id == layer_id &&
            stored_multipliers[i].compressed_vocab == compressed_vocab) {
            memcpy(mult, stored_multipliers[i].mult, sizeof stored_multipliers[i].mult);
            return 0;
        }
    return dsk_err("engram: no stored multipliers for layer %d with engram_compressed_vocab_size %" PRId64
                   "; the checkpoint must ship them",
                   layer_id, compressed_vocab);
}

void engram_hash(const engram_layout *lay, int layer, const int32_t *cid, int64_t pos0, int n, int64_t *rows)
{
    const int64_t *prime = lay->primes[layer], *off = lay->offsets[layer], *mult = lay->mult[layer];
    for (int i = 0; i < n; i++) {
        int64_t t = pos0 + i;
        /* operands are non-negative and products stay below 2^63 for valid multipliers; unsigned
         * arithmetic gives the same XOR and remainders without undefined behaviour on bad input */
        uint64_t r = 0;
        int blocked = 0;
        for (int k = 0; k < lay->max_ngram; k++) {
            if (!blocked && (t - k < 0 || cid[i - k] == ENGRAM_DEAD))
                blocked = 1;
            int32_t s = blocked ? lay->pad : cid[i - k];
            r ^= (uint64_t)s * (uint64_t)mult[k];
            if (k == 0)
                continue;
            for (int h = 0; h < lay->n_heads; h++) {
                int col = (k - 1) * lay->n_heads + h;
                rows[(int64_t)i * lay->n_cols + col] = (int64_t)(r % (uint64_t)prime[col]) + off[col];
            }
        }
    }
}
