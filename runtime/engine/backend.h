/* What a backend implements for the engine (runtime/engine/engine.h). engine.c owns the sequence table
 * and checks every call (positions, context, pool, rollback window) before it reaches a backend, so a
 * backend sees only calls that are valid; its state stays inside its own folder. */
#ifndef DSK_ENGINE_BACKEND_H
#define DSK_ENGINE_BACKEND_H

#include "runtime/engine/engine.h"

typedef struct {
    void (*close)(void *impl);
    /* a sequence slot of reserve positions; flags ENGINE_SEQ_* */
    int (*seq_open)(void *impl, int seq, int64_t reserve, unsigned flags);
    void (*seq_close)(void *impl, int seq);
    /* rows as engine_step describes them, each sequence's rows from its committed length; valid is the
     * tokenizer's id mask the draws must stay within (with each row's allow) */
    int (*step)(void *impl, const engine_row *rows, int n, engine_out *out);
    /* committed length from old_len to len (either way; engine.c checked the rollback window) */
    int (*commit)(void *impl, int seq, int64_t old_len, int64_t len);
    int (*draft)(void *impl, const engine_draft_req *req, int n, int32_t *drafts, float *conf);
} engine_backend_ops;

/* What a backend's open gets: the options, the id mask of the tokenizer ((vocab + 31) / 32 words, owned
 * by the engine), and the info to fill (cfg, device, limits). */
typedef struct {
    const engine_opts *opts;
    const uint32_t *valid;
    engine_info *info;
} engine_backend_args;

/* The backends (each defined in its own folder). */
int cpu_backend_open(const engine_backend_args *a, void **impl, const engine_backend_ops **ops);

#endif
