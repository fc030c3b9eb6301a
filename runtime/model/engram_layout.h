/* Engram bucket layout and n-gram hash (model.md §3.3): which table rows a token position reads.
 *
 * Per Engram layer (config order), per n-gram order n = 2..max_ngram, n_heads primes: each search
 * restarts at engram_vocab_size − 1 and takes the next prime no earlier (layer, order, head) took, so
 * the primes are simply consecutive. Column col = (n−2)·n_heads + head owns rows
 * [offset, offset + prime) of its layer's table; offsets are the exclusive prefix sums and the layer's
 * row count is the sum of its primes (= config engram_num_embeddings).
 *
 * The multipliers come from NumPy's generator in REF; they are not recomputed here. The real config's
 * values and the synthetic presets' live in one table (engram_stored_multipliers); a synthetic
 * checkpoint also ships them as a tensor, which the loader prefers. */
#ifndef DSK_ENGRAM_LAYOUT_H
#define DSK_ENGRAM_LAYOUT_H

#include <stdint.h>

#define ENGRAM_MAX_LAYERS 4 /* Engram layers per model (the release has 2) */
#define ENGRAM_MAX_NGRAM 4  /* max_ngram_size (the release has 4: orders 2, 3, 4) */
#define ENGRAM_MAX_HEADS 16 /* heads per order (the release has 8) */
#define ENGRAM_MAX_COLS ((ENGRAM_MAX_NGRAM - 1) * ENGRAM_MAX_HEADS)
#define ENGRAM_DEAD (-1)    /* compressed id of a position Engram must not see (image tokens) */

typedef struct {
    int n_layers;                                      /* Engram layers */
    int layer_ids[ENGRAM_MAX_LAYERS];                  /* backbone layer of each (config order) */
    int max_ngram;                                     /* engram_max_ngram_size; orders 2..max_ngram */
    int n_heads;                                       /* engram_n_heads */
    int n_cols;                                        /* (max_ngram − 1) · n_heads row lookups per layer */
    int64_t vocab_size;                                /* engram_vocab_size: the primes start above it − 1 */
    int64_t primes[ENGRAM_MAX_LAYERS][ENGRAM_MAX_COLS];  /* [layer][col] bucket count */
    int64_t offsets[ENGRAM_MAX_LAYERS][ENGRAM_MAX_COLS]; /* [layer][col] first row of the column */
    int64_t rows[ENGRAM_MAX_LAYERS];                   /* [layer] table rows = Σ primes */
    /* Set by the caller before hashing (from engram_stored_multipliers or the checkpoint): */
    int64_t mult[ENGRAM_MAX_LAYERS][ENGRAM_MAX_NGRAM]; /* [layer][shift k] odd multipliers */
    int32_t pad;                                       /* compressed id of engram_pad_id */
} engram_layout;

/* Compute primes, offsets and row counts. layer_ids gives each Engram layer's backbone id. mult is
 * zeroed and pad set to −1: both must be filled before engram_hash. */
int engram_layout_init(engram_layout *lay, const int *layer_ids, int n_layers, int max_ngram, int n_heads,
                       int64_t vocab_size);

/* Check the layout's row counts against config engram_num_embeddings ([n_layers]); the message names
 * the layer and both counts. */
int engram_layout_check_rows(const engram_layout *lay, const int64_t *num_embeddings);

/* The stored multipliers for backbone layer layer_id of a model whose token map has compressed_vocab
 * ids: REF's NumPy draw (default_rng(10007·layer_id), uniform int64 in [0, B), 2x+1, with
 * B = max(1, ⌊⌊(2^63−1)/compressed_vocab⌋/2⌋)). Writes max_ngram values; fails (naming the key) when the
 * table has no entry, in which case the checkpoint must ship them. */
int engram_stored_multipliers(int layer_id, int64_t compressed_vocab, int max_ngram, int64_t *mult);

/* The bound B of the multiplier draw above (multipliers are odd and < 2B). */
int64_t engram_multiplier_bound(int64_t compressed_vocab);

/* Table rows that positions pos0 .. pos0+n−1 read in Engram layer `layer` (its index in the layout).
 * cid points at the compressed id of position pos0; cid[i] for i in [−min(pos0, max_ngram−1), n) must
 * be readable (the look-back reaches max_ngram−1 positions before pos0; none before position 0).
 * ENGRAM_DEAD marks positions Engram skips. Output rows [n][n_cols], absolute row indices into the
 * layer's table: column (order−2)·n_heads + head = (R mod prime) + offset with R the XOR-folded hash.
 * Shift k uses the pad id when position t−k is before 0 or DEAD, and so does every larger shift after
 * the first such one (the blocked flag is sticky; a DEAD current position reads pads only). */
void engram_hash(const engram_layout *lay, int layer, const int32_t *cid, int64_t pos0, int n, int64_t *rows);

#endif
