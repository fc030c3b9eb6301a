/* What a backend implements for the engine (runtime/engine/engine.h). engine.c owns the sequence table
 * and checks every call (positions, context, pool, rollback window) before it reaches a backend, so a
 * backend sees only calls that are valid; its state stays inside its own folder. */
#ifndef DSK_ENGINE_BACKEND_H
#define DSK_ENGINE_BACKEND_H

#include "runtime/engine/engine.h"
#include "runtime/engine/xchg.h"

typedef struct {
    void (*close)(void *impl);
    /* a sequence slot of reserve positions; flags ENGINE_SEQ_* */
    int (*seq_open)(void *impl, int seq, int64_t reserve, unsigned flags);
    void (*seq_close)(void *impl, int seq);
    /* rows as engine_step describes them, each sequence's rows from its committed length; valid is the
     * tokenizer's id mask the draws must stay within (with each row's allow); fill (may be NULL) writes the
     * allow masks' words, called as engine_step_fill says (engine_fill_run) */
    int (*step)(void *impl, const engine_row *rows, int n, engine_out *out, const engine_fill *fill);
    /* committed length from old_len to len (either way; engine.c checked the rollback window) */
    int (*commit)(void *impl, int seq, int64_t old_len, int64_t len);
    int (*draft)(void *impl, const engine_draft_req *req, int n, int32_t *drafts, float *conf);
    /* an image span at pos (engine.c checked the position, the reservation and overlaps); a commit below pos
     * drops it (the commit op is told old_len and len) */
    int (*image)(void *impl, int seq, int64_t pos, const engine_image *img);
    /* optional: the Engram store's counters (NULL: none) */
    void (*engram_counters)(void *impl, engine_engram_stats *out);
} engine_backend_ops;

/* Call a step's fill (none: nothing to do). */
static inline int engine_fill_run(const engine_fill *fill)
{
    return fill && fill->fn ? fill->fn(fill->ctx) : 0;
}

/* What a backend's open gets: the options, the id mask of the tokenizer ((vocab + 31) / 32 words, owned
 * by the engine), the info to fill (cfg, device, limits), and this rank's exchanges (tp = 1: none). */
typedef struct {
    const engine_opts *opts;
    const uint32_t *valid;
    engine_info *info;
    rank_xchg *xchg;
} engine_backend_args;

/* The backends (each defined in its own folder). */
int cpu_backend_open(const engine_backend_args *a, void **impl, const engine_backend_ops **ops);
int gpu_backend_open(const engine_backend_args *a, void **impl, const engine_backend_ops **ops);
/* The backend named by a->opts->backend, on this rank alone (engine.c). */
int engine_local_backend_open(const engine_backend_args *a, void **impl, const engine_backend_ops **ops);
/* tp > 1 (runtime/ranks): rank 0 starts the followers and wraps its local backend so that every call goes
 * to them first; a follower (opts->rank_group set) opens its local backend on the group's exchanges. */
int tp_backend_open(const engine_backend_args *a, void **impl, const engine_backend_ops **ops);
/* A follower: run rank 0's calls until it says stop (0) or the group fails (-1). */
int tp_backend_follow(void *impl);

#endif
